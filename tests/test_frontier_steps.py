"""examples/frontier-steps: the equal-steps comparison's manifests (every arm at the same optimizer steps, fresh
seeds, two warm starts, both targets), the never-trained target no run can train on, and bench/frontier_steps.py's
check of that from the run directories (it fails when a run holds a walk of those lengths)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
STEPS = REPO / "examples" / "frontier-steps"
ARMS = ["fixed", "fixed-band", "window", "rlve", "learnability", "learnability-shares"]


@pytest.fixture()
def at_repo_root():
    cwd = os.getcwd()
    os.chdir(REPO)
    yield
    os.chdir(cwd)


def test_every_arm_takes_the_same_optimizer_steps_on_fresh_seeds_and_two_warm_starts(tmp_path, at_repo_root):
    from envengineer.plugins.suite.tables import plan

    primary = plan([str(STEPS)], output=tmp_path / "steps")
    secondary = plan([str(STEPS / "instances.yaml")], output=tmp_path / "instances")
    assert [e.arm for e in primary.entries] == ARMS and sorted(e.arm for e in secondary.entries) == sorted(ARMS)  # every arm, both modes
    for suite, mode, budget in ((primary, "kept_prompts", 400), (secondary, "instances", 2000)):
        for entry in suite.entries:
            assert [(r.seed, r.config.policy["seed"]) for r in entry.runs] == [(4, 0), (5, 0), (6, 1), (7, 1)]
            for run in entry.runs:
                c = run.config
                assert (c.budget_mode, c.budget, c.rounds) == (mode, budget, 16)
                assert c.eval.benchmarks == ["grid-walk-target", "grid-walk-beyond"] and c.eval.validation == "grid-walk-val"
                assert c.engineer["name"] == entry.arm or (entry.arm == "fixed-band" and c.engineer == {"name": "fixed-band", "cycle": ["size"]}) or (
                    entry.arm == "rlve" and c.engineer == {"name": "rlve-grid-port"})  # the page's rlve arm: the rule it was run with
        # one warm start per policy seed: the arms differ only in their engineer
        assert len({json.dumps(r.config.policy, sort_keys=True) for e in suite.entries for r in e.runs}) == 2
    assert {r.config.draw_cap for e in primary.entries for r in e.runs} == {20}


def test_no_config_can_train_on_the_never_trained_lengths():
    from envengineer.registry import load_registry
    from envengineer.tasks.gridwalk.benchmarks import untrained_lengths
    from envengineer.tasks.gridwalk.knobs import GROUPS, MAX_MOVES, GridWalkConfig

    generator, _ = load_registry(entry_points=False).task("grid-walk", {"prompt_style": "compact"})
    asked = {"groups": {**generator.default_config().model_dump()["groups"], "k11": {"ratio": 0.5, "size": 5}}}
    with pytest.raises(ValueError, match="k11"):
        generator.generate(GridWalkConfig.model_validate(asked), n=20, seed=0)
    projected = generator.project(asked, generator.default_config())  # an engineer that asks for k11 gets the knob table's groups
    assert set(projected.config.model_dump()["groups"]) == set(GROUPS)
    pairs = generator.warm_start_pairs(n=24000, seed=1, style="compact")  # the comparison's second warm start, in full
    assert max(len(answer.split()) for _, answer in pairs) == MAX_MOVES < min(untrained_lengths())


def test_the_check_reads_every_training_record_and_fails_on_a_never_trained_walk(tmp_path, at_repo_root):
    from typer.testing import CliRunner

    from envengineer.cli.commands import app

    folder = tmp_path / "steps"
    folder.mkdir()
    base = yaml.safe_load((REPO / "examples/frontier/base.yaml").read_text())
    base["policy"].update(instances=600, epochs=1, hidden_size=32, layers=1, ffn=64, cache_dir=str(tmp_path / "cache"))
    base["trainer"].update(max_steps=1, num_generations=4, per_device_train_batch_size=8)
    base["eval"]["limit"] = 24
    (folder / "base.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    manifest = yaml.safe_load((STEPS / "suite.yaml").read_text())
    manifest.update(base="base.yaml", common={**manifest["common"], "rounds": 2, "budget": 8}, seeds={4: {"policy.seed": 0}},
                    arms={a: manifest["arms"][a] for a in ("fixed", "learnability")})
    (folder / "suite.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["suite", str(folder), "--output", str(out)], env={"ENVENGINEER_LOAD_PLUGINS": "", "COLUMNS": "250"})
    assert result.exit_code == 0, result.output + repr(result.exception)
    script = [sys.executable, str(REPO / "bench/frontier_steps.py"), str(out)]
    done = subprocess.run(script, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads((out / "steps.json").read_text())
    assert report["untrained_passes"] and set(report["arms"]) == {"fixed", "learnability"}
    checks = report["untrained"]["fixed"]["4"]
    assert checks["records"] >= 16 and checks["in_never_trained"] == 0 and "k11" not in checks["groups"]
    assert [(t["family"], t["a"], t["b"]) for t in report["tests"]] == [("k9-k10 target", "learnability", "fixed"),
                                                                      ("k11-k12 never trained", "learnability", "fixed")]
    # the targets by their parts: the set's composition (40 walks at each grid size 3-7 and length), each arm per part
    parts = report["parts"]["bench:grid-walk-target"]
    assert parts["composition"] == {"size": {str(n): 80 for n in range(3, 8)}, "k": {"9": 200, "10": 200}}
    assert set(parts["arms"]["fixed"]) == {f"size={n}" for n in range(3, 8)} | {"k=9", "k=10"}
    assert [(t["a"], t["b"]) for t in parts["tests"]] == [("learnability", "fixed")]
    assert "grid-walk-target by its parts" in done.stdout and "learnability − fixed" in done.stdout
    # the second pre-registration's family and primary test: the seed-level sign-flip test decides
    done = subprocess.run(script + ["--primary", "seeds", "--tests", "rlve:fixed", "learnability:strongest", "learnability:fixed"],
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stdout + done.stderr
    seeds = json.loads((out / "steps.json").read_text())["tests"]
    assert [(t["a"], t["b"], t["primary"]) for t in seeds][:1] == [("learnability", "fixed", "seeds")]  # rlve absent, strongest = fixed
    assert all(t["p_seeds"] is None and "p_seeds_holm" in t for t in seeds)  # one seed: no seed-level test, and no "beats"
    assert not any(t["beats"] for t in seeds)
    done = subprocess.run(script, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})  # the default again
    assert done.returncode == 0, done.stdout + done.stderr
    # at kept-prompt budgets learnability allocates the kept prompts (the round recorded its budget_mode)
    assert "kept-prompt budget: shares ∝ (p(1-p) + epsilon) / keep rate" in (out / "learnability/seed-4/round-00/engineer/response.md").read_text()
    history = [json.loads(line) for line in (out / "fixed/seed-4/history.jsonl").read_text().splitlines()]
    assert report["arms"]["fixed"]["kept_total"]["4"] == sum(h["trained_prompts"] for h in history if h["step"] == "train")
    assert report["arms"]["fixed"]["cpu_s_total"]["4"] == pytest.approx(sum(h.get("cpu_s", 0) for h in history if h["round"] is not None))
    # --export keeps what the analysis reads (no checkpoints, no training records) and the analysis of the export agrees
    exported = tmp_path / "kept"
    done = subprocess.run(script + ["--export", str(exported)], capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0 and "exported 2 finished runs" in done.stdout, done.stdout + done.stderr
    assert not list((exported / "out").rglob("train.jsonl")) and not list((exported / "out").rglob("*.safetensors"))
    done = subprocess.run([sys.executable, str(REPO / "bench/frontier_steps.py"), str(exported / "out")], capture_output=True, text=True)
    again = json.loads((exported / "out/steps.json").read_text())
    assert done.returncode == 0 and again["untrained"] == report["untrained"] and again["tests"] == report["tests"]
    assert {a: e["target"] for a, e in again["arms"].items()} == {a: e["target"] for a, e in report["arms"].items()}
    # a walk of a never-trained length in any round's training records fails the check
    from envengineer.tasks.gridwalk.walk import make_record

    with (out / "learnability/seed-4/round-01/train.jsonl").open("a") as handle:
        handle.write(json.dumps(make_record("planted", 5, 11)) + "\n")
    done = subprocess.run(script, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 1 and "never-trained check failed" in done.stdout, done.stdout + done.stderr
    assert json.loads((out / "steps.json").read_text())["untrained"]["learnability"]["4"]["in_never_trained"] == 1
