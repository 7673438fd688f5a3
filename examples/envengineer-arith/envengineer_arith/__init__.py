"""envengineer-arith: add up integers, with knobs for how many terms and how many digits.

A complete task family in the layout of the built-in ones, to copy from when writing your own
(docs/writing-a-plugin.md, "A task family's layout"): ``knobs.py`` (the config model and its declared
knobs), ``generator.py`` (deterministic generation, groupings, prompts), ``validator.py``,
``benchmarks.py`` (the frozen validation set ``data/arith-val.jsonl`` with its sha256 in
``data/SHA256SUMS``, rebuilt identically by :func:`benchmarks.build_validation_set`: ``envengineer bench
build arith-val --check``) and ``plugin.py``, the hook implementations that the ``envengineer`` entry point
in this package's pyproject.toml names. Everything else comes from the defaults: the default config is the
config model's field defaults, and the declared knobs give the projection of an engineer's proposal
(clipped to their bounds and steps, the budget shares renormalised), the random config and what the
baselines move.
"""
