"""The compact style: what the embedded tiny policy reads and writes (docs/reasoning-gym.md, "The compact style").

``full`` prompts carry reasoning-gym's system prompt and an English question, and answers sit inside
``<answer>…</answer>``: hundreds of characters before the first one that matters. The compact style keeps
only what a ~1 M-parameter model can learn from, for the datasets listed in :data:`COMPACT_DATASETS`:

- ``chain_sum``: the expression without spaces and an ``=`` (``38-45-35=``), answered by the bare number
  (``-42``); the converter (:func:`to_answer`) puts it inside ``<answer>…</answer>`` for the validator,
  so the verdict is reasoning-gym's own scorer on exactly what the model wrote (:class:`Answer` carries the line,
  tag text in it included, past the validator's tag extraction).

Prompts are plain strings of printable ASCII, so the tiny policy's default character tokenizer reads them
(no vocabulary hook). The warm start (:func:`warm_start_pairs`) draws chain_sum items at levels
``0..WARM_LEVELS[attr]``, independently of the run's options (the tiny policy caches its base model by task
name and style). A dataset outside :data:`COMPACT_DATASETS` has no compact form: rendering it is refused.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Any

#: The datasets the compact style renders.
COMPACT_DATASETS: tuple[str, ...] = ("chain_sum",)
#: The warm start's levels per dataset and attribute: each drawn uniformly from 0 to this (chain_sum level 1: 2-3 terms
#: of 1-2 digits).
WARM_LEVELS: dict[str, dict[str, int]] = {"chain_sum": {"num_terms": 1, "num_digits": 1}}


def unsupported(*datasets: Any) -> str:
    """Why ``datasets`` have no compact prompt."""
    return f"the compact prompt style renders {', '.join(COMPACT_DATASETS)} only, not {', '.join(map(str, datasets))} (use prompt_style: full)"


def render(record: Mapping[str, Any]) -> str:
    """``38-45-35=``: chain_sum's expression (from the record's metadata) without spaces, then ``=``."""
    dataset = record.get("dataset")
    if dataset not in COMPACT_DATASETS:
        raise ValueError(unsupported(dataset))
    expression = (record.get("metadata") or {}).get("expression")
    if not isinstance(expression, str) or not expression:
        raise ValueError(f"record {record.get('id')!r}: no metadata.expression to render compactly")
    return expression.replace(" ", "") + "="


def completion(record: Mapping[str, Any]) -> str:
    """The optimal compact answer: the oracle's number as it is."""
    return str(record["answer"])


def answer_end(response: str) -> int:
    """The compact answer is the first line: what follows it changes no verdict."""
    end = response.find("\n")
    return len(response) if end < 0 else end


class Answer(str):
    """A decoded compact answer: ``<answer>line</answer>`` as a string, with ``line`` itself in :attr:`exact`.

    The validator grades :attr:`exact` as it is instead of extracting from the tags: a line holding tag text
    (``junk<answer>5``) would otherwise be cut down to its last tagged piece (``5``) and score what the model did
    not write."""

    exact: str


def to_answer(response: str) -> str:
    """The validator's format: the first line, stripped, inside ``<answer>…</answer>`` (the validator's size cap then
    refuses an over-long one as too_long); an :class:`Answer`, so the validator scores exactly that line."""
    text = str(response)
    line = text[: answer_end(text)].strip()
    answer = Answer(f"<answer>{line}</answer>")
    answer.exact = line
    return answer


def warm_start_pairs(*, n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` (compact prompt, compact answer) pairs of chain_sum items at levels 0..WARM_LEVELS, deterministic in ``seed``
    (levels from ``Random("reasoning-gym-warm|seed")``, item ``i`` with the generator's hashed seed of ``seed`` and ``i``)."""
    from envengineer.tasks.reasoning_gym.items import item_seed, make_item

    rng = random.Random(f"reasoning-gym-warm|{seed}")
    pairs = []
    for index in range(n):
        dataset = COMPACT_DATASETS[index % len(COMPACT_DATASETS)]
        levels = {attr: rng.randint(0, top) for attr, top in WARM_LEVELS[dataset].items()}
        item = make_item(dataset, levels, item_seed(seed, f"warm-{dataset}", index))
        record = {"dataset": dataset, "answer": item["answer"], "metadata": item["metadata"]}
        pairs.append((render(record), completion(record)))
    return pairs
