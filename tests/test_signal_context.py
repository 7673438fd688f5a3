"""The training signal in the engineer's context, for any task: T's tables and F's column, snapshotted
on a recorded round of the simulated student for MAPF-FrozenLake, reasoning-gym and the arith example."""

from pathlib import Path

import pytest

from envengineer.design.evidence import load_evidence
from envengineer.plugin_manager import create_plugin_manager
from envengineer.registry import Registry

from test_context import check_snapshot

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"

TASKS = {
    "mapf": "task: {name: mapf-frozenlake}\neval: {limit: 96}\n",
    "reasoning-gym": "task: {name: reasoning-gym, datasets: [chain_sum, gcd]}\neval: {limit: 60}\n",
    "arith": "task: {name: arith}\neval: {limit: 60}\n",
}


def _registry(task, monkeypatch):
    pm = create_plugin_manager(entry_points=False, environ={})
    if task == "arith":
        monkeypatch.syspath_prepend(str(EXAMPLES / "envengineer-arith"))
        import envengineer_arith.plugin

        pm.register(envengineer_arith.plugin, name="arith")
    if task == "reasoning-gym":
        pytest.importorskip("reasoning_gym")
    return Registry(pm)


@pytest.fixture(params=sorted(TASKS))
def recorded(request, tmp_path, monkeypatch):
    from envengineer.loop.steps import run

    task = request.param
    registry = _registry(task, monkeypatch)
    config = tmp_path / "run.yaml"
    config.write_text(f"name: signal-{task}\nrounds: 2\nbudget: 48\nengineer: heuristic\npolicy: simulated\ntrainer: simulated\n" + TASKS[task])
    run(config, registry=registry, output=str(tmp_path / "run"))
    return task, load_evidence(tmp_path / "run", 1, registry), registry


def test_t_shows_the_training_signal_by_each_grouping(recorded):
    task, evidence, registry = recorded
    text = registry.create("context_module", "T", {"mode": "bookkeeping"}).render(evidence)
    assert "Sampled success by" in text
    check_snapshot(f"signal-T-{task}", text)
    assert "Sampled success" not in registry.create("context_module", "T", {"mode": "bookkeeping", "signal": False}).render(evidence)


def test_f_cites_the_signal_beside_the_primary_groupings_rates(recorded):
    task, evidence, registry = recorded
    text = registry.create("context_module", "F", {"examples": 0}).render(evidence)
    assert "sampled in training" in text
    check_snapshot(f"signal-F-{task}", text)
    assert "sampled in training" not in registry.create("context_module", "F", {"examples": 0, "signal": False}).render(evidence)


def test_an_old_run_without_a_signal_renders_as_before(recorded, tmp_path):
    task, evidence, registry = recorded
    evidence.signal = {}
    assert "Sampled" not in registry.create("context_module", "T", {}).render(evidence)
    assert "sampled in training" not in registry.create("context_module", "F", {}).render(evidence)


def test_groupings_are_headed_by_their_titles(recorded):
    """F, H and T head each grouping's table with its declared title (the arith example: `digits` is
    "digits per term"), as the report does; a grouping without one by its name."""
    task, evidence, registry = recorded
    f = registry.create("context_module", "F", {"examples": 0}).render(evidence)
    t = registry.create("context_module", "T", {}).render(evidence)
    h = registry.create("context_module", "H", {}).render(evidence)
    groupings = evidence.task.evaluation_groupings()
    for g in groupings:
        assert f"By {g.title}:\n\n| {g.title} | n |" in f
        if (evidence.signal.get("by") or {}).get(g.name):
            assert f"Sampled success by {g.title}:\n\n| {g.title} | prompts |" in t
    assert f"\n| {groupings[0].title} |" in h
    if task == "arith":
        assert "By digits per term:" in f and "By digits:" not in f
        assert "\n| digits per term |" in h and "\n| digits |" not in h and "Sampled success by digits per term:" in t
