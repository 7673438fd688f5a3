"""What the embedded tiny policy needs from mapf-frozenlake: a vocabulary, an embedding init, warm-start data.

The compact style (``N7 H 2_4 … S1 0_6 G1 1_0 S2 4_2 G2 1_2 P`` → ``| 0_6 4_2 | 0_5 3_2 …``)
is a sequence of whole words, so the tiny model reads it with a word-level vocabulary
(:func:`vocabulary`); its cell words ``r_c`` start from grid geometry
(:func:`geometric_embeddings`); and it is warm-started on solver-optimal answers of
2-agent instances (:func:`warm_start_pairs`). :class:`~envengineer.tasks.mapf_frozenlake.generator.MapfGenerator`
offers them through the ``Generator`` hooks ``tiny_vocabulary``, ``tiny_init_embeddings`` and
``warm_start_pairs``. Measured facts behind these choices: docs/tiny-policy.md.

The quickstart's base model (the default recipe's warm start) also ships, built once by
``envengineer pretrain --force`` and sealed with a SHA256SUMS, in ``data/tiny/<recipe key>/``
(:func:`prebuilt_dir`, the ``tiny_prebuilt`` hook), so a first run spends no ten minutes
rebuilding it; ``policy.prebuilt: false`` builds it here instead.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from envengineer.tasks.mapf_frozenlake import SIZES

MAX_COORD = 10  # cells 0_0 … 9_9: maps up to 10x10
MAX_AGENTS = 8

#: (hole ratio, share of crossing placements) of the warm-start parts, drawn in turn. Crossing
#: agents often need a WAIT or a detour. Measured: this easier mix (mean hole ratio 0.15, ~22%
#: crossing) gave a better base than hole ratios 0-0.4 with 50% crossing (11.5% vs 4.4% valid on
#: mapf-2agents-val after the same 1.8 M tokens).
WARM_PARTS = ((0.0, 0.0), (0.1, 0.3), (0.2, 0.3), (0.3, 0.3))

#: Solver time limit of a warm-start draw: none (the work limit alone decides a give-up, so the
#: warm-start data, and the shipped base trained on it, are the same on every machine).
TIME_LIMIT: float | None = None


#: Where shipped warm starts live: one folder per tiny-policy recipe key.
PREBUILT_ROOT = Path(__file__).parent / "data" / "tiny"


def prebuilt_dir(key: str) -> Path | None:
    """The shipped base model of recipe ``key``, if any."""
    if not key.isalnum():
        return None
    folder = PREBUILT_ROOT / key
    return folder if (folder / "warm_start.json").is_file() else None


def vocabulary() -> list[str]:
    """Every word of the compact style's prompts and answers (the tiny policy puts its specials first)."""
    tokens = ["H", "P", "|"]
    tokens += [f"N{n}" for n in SIZES]
    for i in range(1, MAX_AGENTS + 1):
        tokens += [f"S{i}", f"G{i}"]
    tokens += [f"{r}_{c}" for r in range(MAX_COORD) for c in range(MAX_COORD)]
    return tokens


def geometric_embeddings(weight: Any, token_ids: Mapping[str, int], *, frequencies: int = 8, scale: float = 1.0) -> None:
    """Initialise the embedding rows of the cell tokens ``r_c`` (and ``N<size>``) with grid geometry.

    Cell tokens are atomic words, so a randomly initialised model must first discover
    from data that ``2_3`` is next to ``2_4``. Here a cell's row starts as Fourier
    features of ``r`` (cos/sin at ``frequencies`` frequencies) in one block of dimensions
    and its column as features of ``c`` in another; nearby cells start with similar
    vectors. With tied embeddings this also shapes the output layer. Only the initial
    values change: the architecture stays a plain Qwen3. ``weight`` is the input embedding
    matrix (vocabulary × hidden); ``token_ids`` maps each word to its row.
    """
    import torch

    hidden = weight.shape[1]
    block = 2 * frequencies
    if 2 * block > hidden:
        return
    std = float(weight.detach().std())

    def features(x: float) -> torch.Tensor:
        k = torch.arange(1, frequencies + 1, dtype=torch.float32)
        angle = math.pi * k * x / (2 * MAX_COORD)
        return torch.cat([torch.cos(angle), torch.sin(angle)]) * std * scale * math.sqrt(hidden / (2 * block))

    with torch.no_grad():
        for r in range(MAX_COORD):
            for c in range(MAX_COORD):
                row = weight[token_ids[f"{r}_{c}"]]
                row[:block] = features(r)
                row[block : 2 * block] = features(c)
        for n in SIZES:
            row = weight[token_ids[f"N{n}"]]
            row[:block] = features(n - 1)
            row[block : 2 * block] = features(n - 1)


def check_agent_counts(counts: list[int]) -> list[int]:
    """``counts`` if it names 1 to :data:`MAX_AGENTS` agents each (the compact vocabulary's S1…), else a ValueError."""
    bad = [k for k in counts if not 1 <= k <= MAX_AGENTS]
    if not counts or bad:
        raise ValueError(f"agent counts must be 1-{MAX_AGENTS} (the compact vocabulary's S1-S{MAX_AGENTS}), got {bad or counts}")
    return counts


def warm_start_pairs(*, n: int, seed: int, agents: Sequence[int] = (2,), time_limit: float | None = TIME_LIMIT) -> list[tuple[str, str]]:
    """(compact prompt, compact optimal answer) for ``n`` instances.

    Agent counts from ``agents`` in turn (repeat a count to weight it: ``(2, 3, 2, 4, 2, 5)``
    gives half the pairs 2 agents), then, per count, the map sizes that fit it in turn, hole
    ratio and crossing share from :data:`WARM_PARTS` in turn (the generator's own placement
    helpers). Each draw is solved once and its optimal paths are kept, so there is no rejection
    loop and no second solve (unsolvable draws, and draws past the generator's work limit, are
    redrawn). Deterministic in ``seed`` and ``agents``: the solver's work limit, not the clock,
    decides a give-up. The run's training agent count and solver options do not enter. With the
    default ``(2,)`` the pairs are those the shipped quickstart base model was trained on.
    """
    from envengineer.tasks.mapf_frozenlake.knobs import hole_count, sizes_fitting
    from envengineer.tasks.mapf_frozenlake.draw import WORK_LIMIT, _crossing_placement, _random_placement
    from envengineer.tasks.mapf_frozenlake.instance import Agent, Instance
    from envengineer.tasks.mapf_frozenlake.prompts import compact_answer, render_compact
    from envengineer.tasks.mapf_frozenlake.solver import solve

    counts = tuple(check_agent_counts(list(agents)))
    densest = max(ratio for ratio, _ in WARM_PARTS)
    fits = {k: sizes_fitting(k, densest) for k in set(counts)}  # on its densest warm-start map
    rng = random.Random(f"tiny-warm-start-{seed}")
    out: list[tuple[str, str]] = []
    while len(out) < n:
        k = counts[len(out) % len(counts)]
        turn = len(out) // len(counts)
        sizes = fits[k]
        size = sizes[turn % len(sizes)]
        hole_ratio, crossing = WARM_PARTS[(turn // len(sizes)) % len(WARM_PARTS)]
        n_cells = size * size
        holes = set(rng.sample(range(n_cells), hole_count(size, hole_ratio)))
        free = [i not in holes for i in range(n_cells)]
        place = _crossing_placement if rng.random() < crossing else _random_placement
        placement = place(rng, size, free, k)
        if placement is None:
            continue
        grid = tuple("".join("H" if r * size + c in holes else "F" for c in range(size)) for r in range(size))
        starts_goals = tuple(Agent(divmod(s, size), divmod(g, size)) for s, g in placement)
        solution = solve(grid, [(a.start, a.goal) for a in starts_goals], time_limit=time_limit, work_limit=WORK_LIMIT)
        if solution.status == "gave_up" and not solution.reason.startswith("work limit"):
            raise ValueError(f"warm start: the solver's time limit ({time_limit:g} s) cut a {k}-agent draw short "
                             f"({solution.reason}); the pairs would depend on this machine's speed: pass no time limit")
        if solution.status != "optimal" or solution.paths is None:
            continue
        instance = Instance(size=size, grid=grid, agents=starts_goals, hole_ratio=len(holes) / n_cells)
        out.append((render_compact(instance), compact_answer(solution.paths)))
    return out
