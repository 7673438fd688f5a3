"""Frozen sets of a verifiers taskset: its validation set, built from a fixed config and seed, with a sha256.

The family cannot ship a set for a taskset it does not know; the package (or plugin module) that runs a
taskset registers one with :func:`frozen_set` from its ``register_benchmarks`` hook, and
``envengineer bench build NAME`` freezes it (writes the JSONL and its line in ``SHA256SUMS`` beside it),
``--check`` rebuilds it in memory and compares, ``bench verify`` checks the file, like the other families'
sets. The records are the family's own (``generate`` with the set's config and seed), so a run evaluates
on them exactly as it trains on its rounds' tasks.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from envengineer.api import Benchmark, Grouping, frozen_benchmark
from envengineer.tasks.verifiers import TASK_NAME


def frozen_set(
    name: str, *, options: Mapping[str, Any], seed: int, n: int, path: Path | str,
    config: Mapping[str, Any] | None = None, description: str = "", label: str = "",
) -> Benchmark:
    """The frozen set ``name``: ``n`` tasks the family generates under the task section ``options`` from ``config``
    (default: the family's default config, the taskset's own field defaults) with round seed ``seed``, stored at
    ``path`` (its sha256 read from ``SHA256SUMS`` beside it; empty until ``envengineer bench build NAME``)."""
    path = Path(path)
    section = {"name": TASK_NAME, **dict(options)}
    frozen_config = dict(config) if config is not None else None

    def build() -> list[dict[str, Any]]:
        from envengineer.tasks.verifiers.generator import VFGenerator
        from envengineer.tasks.verifiers.knobs import VFOptions

        generator = VFGenerator(VFOptions.model_validate(section))
        start = generator.config_model.model_validate(frozen_config) if frozen_config is not None else generator.default_config()
        return generator.generate(start, n=n, seed=seed).records

    groups = section.get("groups")
    return frozen_benchmark(
        path, name=name, task=TASK_NAME, options=section, build=build,
        description=description or f"{n} tasks of the verifiers taskset {section.get('taskset')} (seed {seed})",
        subsets=Grouping("group", title=str(groups.get("field", "group"))) if isinstance(groups, Mapping) else None, label=label,
    )
