"""The baselines on the training signal: learnability and the heuristic read each group's sampled
success (``Evidence.signal``) and fall back to the validation rate where it is missing; the
curriculum's ramp runs from ``start`` at the first design step to ``end`` at the last.

``QUICKSTART`` replays numbers like the quickstart's first design step (tiny policy, 150 prompts a
size x 4 prefilter samples, greedy validation on 60 instances a size); docs/engineers.md shows what
each engineer proposes on it (``python tests/test_baselines_signal.py`` prints that table).
"""

from __future__ import annotations

import pytest

from envengineer.design.step import design
from envengineer.design.evidence import Evidence, RoundRecord
from envengineer.design.prompts import build_request
from envengineer.loop.signal import Cell

SIZES = ("3x3", "4x4", "5x5", "6x6", "7x7", "8x8", "9x9", "10x10")
N_VAL = 60  # greedy validation instances per size
#: size: (greedy valid of 60, sampled success p, share of mixed prompts)
QUICKSTART = {
    "3x3": (36, 0.45, 0.36), "4x4": (14, 0.20, 0.30), "5x5": (8, 0.12, 0.22), "6x6": (6, 0.08, 0.16),
    "7x7": (5, 0.05, 0.12), "8x8": (4, 0.03, 0.08), "9x9": (3, 0.02, 0.06), "10x10": (2, 0.01, 0.03),
}
FLOOR = 0.02  # mapf-frozenlake's ratio floor


def cell(p: float, mixed_share: float, prompts: int = 150, k: int = 4) -> dict:
    """A signal cell as :func:`envengineer.loop.signal.aggregate` writes it, from rollout lines with
    sampled success ``p`` and ``mixed_share`` of the prompts mixed (k samples each)."""
    valid, mixed = round(p * prompts * k), round(mixed_share * prompts)
    right = min(prompts - mixed, max(0, round((valid - mixed * k / 2) / k)))
    rest = valid - right * k  # the mixed prompts' valid samples, 1..k-1 each
    assert mixed <= rest <= mixed * (k - 1) or (mixed == 0 and rest == 0), (p, mixed_share)
    counts = [k] * right + [1] * mixed + [0] * (prompts - right - mixed)
    extra, i = rest - mixed, 0
    while extra > 0:
        if counts[right + i % mixed] < k - 1:
            counts[right + i % mixed] += 1
            extra -= 1
        i += 1
    c = Cell()
    for n, v in enumerate(counts):
        c.add({"id": str(n), "samples": k, "valid": v, "score": v / k, "kept": 0 < v < k, "groups": []})
    return c.to_dict()


def signal_of(cells: dict[str, dict]) -> dict:
    overall = Cell()
    for c in cells.values():
        for key in ("prompts", "samples", "valid", "mixed", "all_right", "all_wrong", "kept"):
            setattr(overall, key, getattr(overall, key) + c[key])
    return {"overall": overall.to_dict(), "by": {"size": cells}}


def report_of(valid: dict[str, int], n: int = N_VAL, conflict_share: float = 0.3) -> dict:
    def rates(k, v):
        bad = k - v
        conflict = round(bad * conflict_share)
        failures = {f: c for f, c in {"conflict": conflict, "goal": bad - conflict}.items() if c}
        return {"n": k, "valid": v, "optimal": v // 2, "valid_rate": v / k, "optimal_rate": v // 2 / k, "failures": failures}

    by = {g: rates(n, v) for g, v in valid.items()}
    return {"overall": rates(n * len(by), sum(valid.values())), "by": {"size": by}}


@pytest.fixture
def mapf(registry):
    return registry.create("generator", "mapf-frozenlake", {}, where="task")


def request_for(registry, generator, valid, signal, *, config=None, round=0, rounds_total=3, history=()):
    config = config if config is not None else generator.default_config()
    evidence = Evidence(task=generator, round=round, rounds_total=rounds_total, config=config.model_dump(),
                        report=report_of(valid), failure_types=("conflict", "goal"), history=list(history), signal=signal)
    return build_request(evidence, registry, {"modules": ["F"]})


def quickstart_request(registry, generator, **kw):
    valid = {g: v for g, (v, _, _) in QUICKSTART.items()}
    signal = signal_of({g: cell(p, m) for g, (_, p, m) in QUICKSTART.items()})
    return request_for(registry, generator, valid, signal, **kw)


def shares(config) -> dict[str, float]:
    return {g: k.ratio for g, k in config.sizes.items()}


# ------------------------------------------------------------------ the heuristic


def test_heuristic_on_the_quickstart_keeps_the_learnable_group_and_does_not_feed_a_collapsed_one(registry, mapf):
    request = quickstart_request(registry, mapf)
    outcome = design(registry.create("engineer", "heuristic"), request)
    assert not outcome.fallback, outcome.reason
    before, after = shares(request.current_config), shares(outcome.config)
    assert after["3x3"] > FLOOR + 0.01  # 36% of its prompts mixed: not starved in one step
    assert after["3x3"] >= before["3x3"] - 1e-4  # sampled success in the learnable band: never a donor
    assert max(after, key=after.get) != "9x9"  # sampled success 2%: collapsed, not fed
    assert after["9x9"] <= before["9x9"] + 1e-4
    assert outcome.config.sizes["9x9"].hole_ratio < request.current_config.sizes["9x9"].hole_ratio  # eased
    text = outcome.replies[-1].text
    assert "sampled" in text and "9x9 collapsed (sampled 2%)" in text


def test_heuristic_bounds_each_shares_change_per_step(registry, mapf, report_factory):
    """No signal (an older run): the validation rates decide, and no share moves by more than x/÷ 1.5."""
    valid = dict(zip(SIZES, (54, 54, 54, 54, 12, 54, 54, 54)))
    request = request_for(registry, mapf, valid, {})
    outcome = design(registry.create("engineer", "heuristic"), request)
    before, after = shares(request.current_config), shares(outcome.config)
    assert after["7x7"] > before["7x7"] and max(after, key=lambda g: after[g] - before[g]) == "7x7"
    for g in SIZES:
        assert before[g] / 1.5 - 1e-3 <= after[g] <= before[g] * 1.5 + 1e-3, (g, before[g], after[g])
    assert "no training signal" in outcome.replies[-1].text
    tight = design(registry.create("engineer", "heuristic", {"max_share_change": 1.2}), request)
    assert shares(tight.config)["7x7"] <= before["7x7"] * 1.2 + 1e-3


def test_heuristic_decides_collapse_by_sampled_success(registry, mapf):
    """Greedy validation at 0 but sampled 30%: not collapsed; greedy 50% but sampled 1%: collapsed."""
    valid = dict(zip(SIZES, (40, 40, 40, 0, 30, 40, 40, 40)))
    cells = {g: cell(0.6, 0.1) for g in SIZES}  # few mixed prompts: these may give budget away
    cells["6x6"], cells["7x7"] = cell(0.30, 0.4), cell(0.01, 0.03)
    request = request_for(registry, mapf, valid, signal_of(cells))
    outcome = design(registry.create("engineer", "heuristic"), request)
    before, after = request.current_config.sizes, outcome.config.sizes
    assert after["6x6"].hole_ratio == before["6x6"].hole_ratio  # not eased
    assert after["7x7"].hole_ratio < before["7x7"].hole_ratio  # eased
    assert after["6x6"].ratio > before["6x6"].ratio  # lagging (sampled), so it gets budget


def test_heuristic_falls_back_per_group_below_min_samples(registry, mapf):
    valid = dict(zip(SIZES, (40, 40, 40, 40, 40, 40, 40, 0)))
    cells = {g: cell(0.6, 0.3) for g in SIZES}
    cells["10x10"] = cell(0.5, 0.0, prompts=2)  # 8 samples: too few, the greedy 0% decides
    request = request_for(registry, mapf, valid, signal_of(cells))
    outcome = design(registry.create("engineer", "heuristic"), request)
    assert outcome.config.sizes["10x10"].hole_ratio < request.current_config.sizes["10x10"].hole_ratio
    assert "validation rate for 10x10" in outcome.replies[-1].text


def test_heuristic_compares_with_last_rounds_sampled_success(registry, mapf):
    """A saturated group is hardened unless it just improved, judged on the same evidence as this round's."""
    valid = {g: 30 for g in SIZES}
    cells = {g: cell(0.5, 0.3) for g in SIZES}
    cells["3x3"] = cell(0.97, 0.1)
    config = mapf.default_config()

    def hardened(last_3x3: float) -> bool:
        last = RoundRecord(round=0, config=config.model_dump(), report=report_of({g: 59 for g in SIZES}),
                           signal=signal_of({**cells, "3x3": cell(last_3x3, 0.03)}))
        request = request_for(registry, mapf, valid, signal_of(cells), config=config, round=1, history=[last])
        after = design(registry.create("engineer", "heuristic"), request).config.sizes["3x3"]
        return after.hole_ratio > config.sizes["3x3"].hole_ratio

    assert not hardened(0.9)  # improved from 90% sampled (the greedy 98% of last round is not compared)
    assert hardened(0.99)


# ------------------------------------------------------------------ learnability


def test_learnability_allocates_by_sampled_success_not_validation(registry, mapf):
    valid = dict(zip(SIZES, (30, 57, 57, 57, 57, 57, 57, 3)))  # greedy says 3x3 is at 50%
    cells = {g: cell(0.95, 0.1) for g in SIZES}
    cells["3x3"], cells["10x10"] = cell(0.02, 0.06), cell(0.5, 0.6)  # sampled says 10x10 is
    request = request_for(registry, mapf, valid, signal_of(cells))
    outcome = design(registry.create("engineer", "learnability"), request)
    after = shares(outcome.config)
    assert max(after, key=after.get) == "10x10" and after["3x3"] < after["10x10"]
    assert "sampled" in outcome.replies[-1].text


def test_learnability_falls_back_per_group_and_says_which(registry, mapf):
    valid = dict(zip(SIZES, (57, 57, 57, 57, 57, 57, 57, 30)))
    cells = {g: cell(0.95, 0.1) for g in SIZES}
    cells["10x10"] = cell(1.0, 0.0, prompts=3)  # 12 samples < 16: the greedy 50% is used
    request = request_for(registry, mapf, valid, signal_of(cells))
    outcome = design(registry.create("engineer", "learnability"), request)
    after = shares(outcome.config)
    assert max(after, key=after.get) == "10x10"
    assert "validation rate for 10x10 (12 samples < min_samples 16)" in outcome.replies[-1].text
    low = design(registry.create("engineer", "learnability", {"min_samples": 8}), request)
    assert max(shares(low.config), key=shares(low.config).get) != "10x10"  # its sampled 100% counts now


def test_learnability_without_signal_uses_validation_and_says_so(registry, mapf):
    valid = dict(zip(SIZES, (60, 59, 54, 45, 30, 15, 3, 0)))
    outcome = design(registry.create("engineer", "learnability"), request_for(registry, mapf, valid, {}))
    after = shares(outcome.config)
    assert max(after, key=after.get) == "7x7"
    assert "no training signal" in outcome.replies[-1].text


def test_learnability_moves_difficulty_toward_the_target_band(registry, mapf):
    valid = {g: 30 for g in SIZES}
    ps = dict(zip(SIZES, (0.9, 0.8, 0.5, 0.4, 0.6, 0.2, 0.1, 0.0)))
    cells = {g: cell(p, 0.0 if p == 0 else 0.2 if p in (0.9, 0.1) else 0.3) for g, p in ps.items()}
    request = request_for(registry, mapf, valid, signal_of(cells))
    outcome = design(registry.create("engineer", "learnability"), request)
    before, after = request.current_config.sizes, outcome.config.sizes
    for g in ("3x3", "4x4"):  # above the band (0.3..0.7): harder by at least 5% of each knob's range
        assert after[g].wait_ratio >= before[g].wait_ratio + 0.05 - 1e-9, g
        assert after[g].hole_ratio > before[g].hole_ratio or after[g].hole_ratio == pytest.approx(0.5), g
    for g in ("5x5", "6x6", "7x7"):  # in the band: left alone
        assert (after[g].wait_ratio, after[g].hole_ratio) == (before[g].wait_ratio, before[g].hole_ratio), g
    for g in ("8x8", "9x9", "10x10"):  # below: easier
        assert after[g].wait_ratio <= before[g].wait_ratio - 0.05 + 1e-9, g
        assert after[g].hole_ratio < before[g].hole_ratio, g
    # no valid sample at all: a larger move than a group that is merely below the band
    assert before["10x10"].wait_ratio - after["10x10"].wait_ratio > before["9x9"].wait_ratio - after["9x9"].wait_ratio
    text = outcome.replies[-1].text
    assert "3x3" in text and "harder" in text and "easier" in text and "in band" in text
    still = design(registry.create("engineer", "learnability", {"band": 0.5}), request)
    assert all(still.config.sizes[g].wait_ratio == before[g].wait_ratio for g in SIZES if ps[g] > 0)


def test_learnability_on_the_quickstart(registry, mapf):
    request = quickstart_request(registry, mapf)
    outcome = design(registry.create("engineer", "learnability"), request)
    after = shares(outcome.config)
    assert max(after, key=after.get) == "3x3" and min(after, key=after.get) == "10x10"
    assert outcome.config.sizes["3x3"].wait_ratio == request.current_config.sizes["3x3"].wait_ratio  # 45%: in band
    assert outcome.config.sizes["9x9"].wait_ratio < request.current_config.sizes["9x9"].wait_ratio  # 2%: easier


# ------------------------------------------------------------------ the curriculum


RAMPS = {"ramps": {"hole_ratio": {"start": 0.1, "end": 0.3, "spread": 0}, "wait_ratio": {"start": 0.2, "end": 0.6, "spread": 0}}}


@pytest.mark.parametrize("round,hole,wait", [(0, 0.1, 0.2), (1, 0.2, 0.4), (2, 0.3, 0.6), (3, 0.3, 0.6)])
def test_curriculum_runs_from_start_at_the_first_design_step_to_end_at_the_last(registry, mapf, round, hole, wait):
    """4 rounds: design steps after rounds 0, 1, 2 make the configs of rounds 1, 2, 3 (a replay after
    the last round stays at the end)."""
    valid = {g: 30 for g in SIZES}
    outcome = design(registry.create("engineer", "curriculum", RAMPS), request_for(registry, mapf, valid, {}, round=round, rounds_total=4))
    assert {k.hole_ratio for k in outcome.config.sizes.values()} == {hole}
    assert {k.wait_ratio for k in outcome.config.sizes.values()} == {wait}
    progress = min(1.0, round / 2)
    assert f"progress {progress:.2f}" in outcome.replies[-1].text


def test_curriculum_default_ramp_starts_at_start(registry, mapf):
    """Without ramps the first design step puts each knob ``start`` of its way to the hard bound (the last group; earlier ones less by ``spread``)."""
    valid = {g: 30 for g in SIZES}
    first = design(registry.create("engineer", "curriculum", {"spread": 0}), request_for(registry, mapf, valid, {}, round=0, rounds_total=4)).config
    last = design(registry.create("engineer", "curriculum", {"spread": 0}), request_for(registry, mapf, valid, {}, round=2, rounds_total=4)).config
    assert {k.wait_ratio for k in first.sizes.values()} == {0.2} and {k.wait_ratio for k in last.sizes.values()} == {0.6}
    assert {k.hole_ratio for k in first.sizes.values()} == {0.1} and {k.hole_ratio for k in last.sizes.values()} == {0.3}
    assert len({k.ratio for k in first.sizes.values()}) == 1  # no tilt at progress 0: equal shares


def test_curriculum_with_one_design_step_goes_to_the_end(registry, mapf):
    valid = {g: 30 for g in SIZES}
    outcome = design(registry.create("engineer", "curriculum", RAMPS), request_for(registry, mapf, valid, {}, round=0, rounds_total=2))
    assert {k.hole_ratio for k in outcome.config.sizes.values()} == {0.3}
    assert "progress 1.00" in outcome.replies[-1].text


# ------------------------------------------------------------------ the worked example


def worked_example() -> str:
    """The docs' table: the quickstart-like evidence and each engineer's proposed shares and knobs."""
    from envengineer.plugin_manager import create_plugin_manager
    from envengineer.registry import Registry

    registry = Registry(create_plugin_manager(entry_points=False, environ={}))
    generator = registry.create("generator", "mapf-frozenlake", {}, where="task")
    request = quickstart_request(registry, generator)
    cells = request.evidence.signal["by"]["size"]
    arms = {"heuristic": ("heuristic", {}), "heuristic, keep_mixed: null": ("heuristic", {"keep_mixed": None}),
            "learnability": ("learnability", {})}
    outcomes = {label: design(registry.create("engineer", name, options), request) for label, (name, options) in arms.items()}
    before = request.current_config.sizes
    lines = ["| size | greedy valid | sampled p | mixed | share | " + " | ".join(arms) + " |", "|---" * (5 + len(arms)) + "|"]
    for g, (v, _, _) in QUICKSTART.items():
        c = cells[g]
        row = [g, f"{v}/{N_VAL}", f"{c['success']:.2f}", f"{c['mixed_share']:.0%}", f"{before[g].ratio:.4f}"]
        for outcome in outcomes.values():
            k = outcome.config.sizes[g]
            moved = [f"{name} {getattr(before[g], name):g}→{getattr(k, name):g}" for name in ("hole_ratio", "wait_ratio")
                     if getattr(k, name) != getattr(before[g], name)]
            row.append(f"{k.ratio:.4f}" + (f" ({', '.join(moved)})" if moved else ""))
        lines.append("| " + " | ".join(row) + " |")
    notes = [f"{label}: " + o.replies[-1].text.split(chr(10))[0].split(": ", 1)[1] for label, o in outcomes.items()]
    return "\n".join(lines) + "\n\n" + "\n\n".join(notes)


def test_the_docs_show_the_worked_example_as_the_code_gives_it():
    from pathlib import Path

    docs = (Path(__file__).resolve().parents[1] / "docs" / "engineers.md").read_text(encoding="utf-8")
    table, *notes = worked_example().split("\n\n")
    assert table in docs, "docs/engineers.md: paste the output of python tests/test_baselines_signal.py"
    assert all("> " + note in docs for note in notes)


if __name__ == "__main__":
    print(worked_example())
