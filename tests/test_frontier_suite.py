"""examples/frontier/: the manifest's arms are its base plus their overrides, the held-out target is never the
engineers' evidence, and the whole manifest runs end to end when shrunk (every arm, one seed, two rounds)."""

import csv
import json
import shutil
import os
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from envengineer.cli.commands import app

REPO = Path(__file__).resolve().parents[1]
FRONTIER = REPO / "examples" / "frontier"
ARMS = ["fixed", "fixed-target", "fixed-easy", "random", "curriculum", "heuristic", "learnability"]
runner = CliRunner()


@pytest.fixture()
def at_repo_root():
    cwd = os.getcwd()
    os.chdir(REPO)  # the arms' initial configs are named from the repository root
    yield
    os.chdir(cwd)


def test_the_manifest_is_the_base_plus_each_arms_overrides(tmp_path, at_repo_root):
    from envengineer.registry import load_registry
    from envengineer.loop.runconfig import load_run_config
    from envengineer.plugins.suite.tables import plan

    suite = plan([str(FRONTIER)], seeds=4, output=tmp_path / "out")
    arms = {e.arm: e for e in suite.entries}
    assert list(arms) == ARMS and [e.baseline for e in suite.entries] == [True] + [False] * 6
    base = load_run_config(FRONTIER / "base.yaml").model_dump(mode="json")
    assert base["rounds"] >= 6 and base["task"]["name"] == "grid-walk" and base["budget_mode"] == "instances"
    # the engineers read grid-walk-val (k3-k8); the target (k9, k10) is only a held-out benchmark
    assert base["eval"]["validation"] == "grid-walk-val" and base["eval"]["benchmarks"] == ["grid-walk-target"]
    assert base["eval"]["bench_rounds"] == "all"
    for arm, entry in arms.items():
        config = entry.config.model_dump(mode="json")
        differ = {k for k, v in config.items() if base[k] != v}
        assert differ <= {"name", "engineer", "initial_config"}, arm
        assert [r.seed for r in entry.runs] == [0, 1, 2, 3]
    assert len({json.dumps(e.config.policy, sort_keys=True) for e in suite.entries}) == 1  # one shared warm start
    registry = load_registry(entry_points=False)
    generator, _ = registry.task("grid-walk", {"prompt_style": "compact"})
    for name, heavy in (("target-only.yaml", {"k9", "k10"}), ("easy-only.yaml", {"k3", "k4"})):
        groups = yaml.safe_load((FRONTIER / name).read_text())["groups"]
        assert abs(sum(g["ratio"] for g in groups.values()) - 1) < 1e-9
        assert {g for g, v in groups.items() if v["ratio"] > 0.4} == heavy
        # the projection keeps it as written (every share at or above the floor): the fixed engineer keeps it every round
        projected = generator.project(groups and {"groups": groups}, generator.default_config())
        assert projected.config.model_dump()["groups"] == groups
    target = {json.loads(line)["k"] for line in (REPO / "tasks/gridwalk/data/grid-walk-target.jsonl").read_text().splitlines()}
    val = {json.loads(line)["k"] for line in (REPO / "tasks/gridwalk/data/grid-walk-val.jsonl").read_text().splitlines()}
    assert target == {9, 10} and not target & val


def shrunk_base(cache: Path) -> dict:
    base = yaml.safe_load((FRONTIER / "base.yaml").read_text())
    base.update(rounds=2, budget=48)
    base["policy"].update(instances=600, epochs=1, hidden_size=32, layers=1, ffn=64, cache_dir=str(cache))
    base["trainer"].update(max_steps=1, num_generations=4, per_device_train_batch_size=8)
    base["eval"]["limit"] = 40
    return base


def test_the_shrunk_manifest_runs_every_arm_end_to_end(tmp_path, at_repo_root):
    folder = tmp_path / "frontier"
    folder.mkdir()
    (folder / "base.yaml").write_text(yaml.safe_dump(shrunk_base(tmp_path / "cache"), sort_keys=False))
    manifest = yaml.safe_load((FRONTIER / "suite.yaml").read_text())
    (folder / "suite.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    for start in ("target-only.yaml", "easy-only.yaml"):  # the arms' initial configs, named from the manifest's folder
        shutil.copy(FRONTIER / start, folder / start)
    out = tmp_path / "out"
    result = runner.invoke(app, ["suite", str(folder), "--seeds", "1", "--jobs", "1", "--output", str(out)],
                           env={"ENVENGINEER_LOAD_PLUGINS": "", "COLUMNS": "250"})
    assert result.exit_code == 0, result.output + repr(result.exception)
    for arm in ARMS:
        run = out / arm / "seed-0"
        for r in (0, 1):
            summary = json.loads((run / f"round-{r:02d}/bench/grid-walk-target/summary.json").read_text())
            assert summary["overall"]["n"] == 40 and "moves" in summary["by"]
            assert (run / f"round-{r:02d}/train/signal.json").is_file()
        configs = [yaml.safe_load((run / f"round-{r:02d}/config.yaml").read_text())["groups"] for r in (0, 1)]
        if arm in ("fixed-target", "fixed-easy"):
            heavy = {"k9", "k10"} if arm == "fixed-target" else {"k3", "k4"}
            assert all({g for g, v in c.items() if v["ratio"] > 0.4} == heavy for c in configs)
        if arm == "fixed":
            assert configs[0] == configs[1]
        if arm == "learnability":
            assert configs[0] != configs[1]
    table = out / "engineers-at-the-frontier-grid-walks.csv"
    rows = list(csv.reader(table.open()))
    assert [row[0] for row in rows[1:]] == ARMS, rows
    assert (out / "engineers-at-the-frontier-grid-walks-signal.csv").is_file()
