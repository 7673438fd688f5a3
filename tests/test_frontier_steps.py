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

from conftest import import_bench

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
    done = subprocess.run(script + ["--primary", "seeds", "--tests", "rlve:fixed", "learnability:strongest", "learnability:fixed",
                                    "--markdown", str(tmp_path / "tables.md"), "--plots", str(tmp_path / "plots")],
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == ["seeds-out.png", "steps-out.png"]
    tables = (tmp_path / "tables.md").read_text()  # every printed table, as markdown under its bold title
    assert tables.count("**") >= 2 * 6 and "| learnability vs fixed |" in tables and "grid-walk-target by its parts" in tables
    per_seed = (tmp_path / "tables-parts-per-seed.csv").read_text().splitlines()  # each arm, seed and part of both targets
    assert per_seed[0] == "target,arm,seed,part,valid_rate" and len(per_seed) == 1 + 2 * 2 * 7 and "grid-walk-beyond,learnability,4,k=11," in "\n".join(per_seed)
    assert "| learnability − fixed |" in tables and "[" not in tables.split("| arm |", 1)[1].split("\n", 1)[0]
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
    # the claims bench keeps the engineer folders too (the LLM pages' restate and fallback counts are read from them)
    claims = [sys.executable, str(REPO / "bench/llm_engineer_claims.py"), "--primary", "bench:grid-walk-target", "--export"]
    done = subprocess.run(claims + [str(tmp_path / "claims"), str(out)], capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0 and "exported 2 finished runs" in done.stdout, done.stdout + done.stderr
    kept = tmp_path / "claims" / "out" / "learnability" / "seed-4"
    assert (kept / "round-00/engineer/response.md").read_text() == (out / "learnability/seed-4/round-00/engineer/response.md").read_text()
    assert not list(kept.rglob("train.jsonl")) and not list(kept.rglob("*.safetensors")) and (kept / "round-01/eval/verdicts.jsonl").is_file()
    done = subprocess.run(claims[:-1] + [str(tmp_path / "claims" / "out")], capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((tmp_path / "claims/out/claims.json").read_text())["arms"] == json.loads((out / "claims.json").read_text())["arms"]
    # a walk of a never-trained length in any round's training records fails the check
    from envengineer.tasks.gridwalk.walk import make_record

    with (out / "learnability/seed-4/round-01/train.jsonl").open("a") as handle:
        handle.write(json.dumps(make_record("planted", 5, 11)) + "\n")
    done = subprocess.run(script, capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 1 and "never-trained check failed" in done.stdout, done.stdout + done.stderr
    assert json.loads((out / "steps.json").read_text())["untrained"]["learnability"]["4"]["in_never_trained"] == 1


def _steps_report(diffs: dict[tuple[str, str, str], list[float]], beyond_means: dict[str, float],
                  sizes: dict[str, float]) -> dict:
    """A steps.json as bench/frontier_steps.py writes it with --primary seeds, from per-seed differences: the
    family's rows tested by the real seed-level test and Holm, and rlve − fixed's per-size differences."""
    from envengineer.plugins.suite.arms.stats import seed_test

    holm = import_bench("llm_engineer_claims").holm
    tests = []
    for family in ("k9-k10 target", "k11-k12 never trained"):
        rows = []
        for (fam, a, b), d in diffs.items():
            if fam == family:
                t = seed_test(d)
                rows.append({"family": family, "a": a, "b": b, "mean_diff": t.mean, "p_seeds": t.p, "interval": [t.low, t.high],
                             "primary": "seeds", "strongest_baseline": "rlve"})
        for row, adjusted in zip(rows, holm([r["p_seeds"] for r in rows])):
            row["p_seeds_holm"] = adjusted
        tests += rows
    arms = {arm: {"beyond": {str(s): mean / 100 for s in range(8)}} for arm, mean in beyond_means.items()}
    parts = {"bench:grid-walk-target": {"tests": [{"a": "rlve", "b": "fixed", "parts": {k: {"mean": v / 100} for k, v in sizes.items()}}]}}
    return {"tests": tests, "arms": arms, "parts": parts}


def test_the_registered_predictions_are_read_by_their_falsification_rules(tmp_path):
    strong = [0.08, 0.10, 0.09, 0.12, 0.07, 0.11, 0.10, 0.09]  # every seed + : the smallest sign-flip p, 2/256
    null = [0.01, -0.02, 0.0, 0.02, -0.01, 0.01, -0.01, 0.0]
    diffs = {("k9-k10 target", "learnability", "fixed"): null, ("k9-k10 target", "learnability", "rlve"): [-d for d in strong],
             ("k9-k10 target", "rlve", "fixed"): strong, ("k9-k10 target", "learnability", "learnability-instances"): strong,
             ("k11-k12 never trained", "learnability", "fixed"): null, ("k11-k12 never trained", "rlve", "fixed"): null}
    sizes = {"size=3": 10.0, "size=4": 10.0, "size=5": 8.0, "size=6": 10.0, "size=7": 10.0}  # 3x3 + 4x4: 20 of 48 points
    script = [sys.executable, str(REPO / "bench/frontier_seeds_verdicts.py")]

    def run(report: dict) -> tuple[dict[str, str], str]:
        path = tmp_path / "steps.json"
        path.write_text(json.dumps(report))
        done = subprocess.run(script + [str(path)], capture_output=True, text=True, env={**os.environ, "COLUMNS": "300"})
        assert done.returncode == 0, done.stdout + done.stderr
        held = {line.split("│")[1].strip(): line.split("│")[3].strip() for line in done.stdout.splitlines()
                if line.startswith("│ P")}
        return held, done.stdout

    held, out = run(_steps_report(diffs, {"fixed": 0.5, "rlve": 1.5, "learnability": 0.0}, sizes))
    assert held == {"P1": "held", "P2": "held", "P3": "held", "P4": "held", "P5": "held"}, out
    assert "3x3+4x4 share 42%" in out
    done = subprocess.run(script + [str(tmp_path / "steps.json"), "--markdown", str(tmp_path / "verdicts.md")], capture_output=True, text=True)
    assert done.returncode == 0 and "| P3 | rlve beats fixed" in (tmp_path / "verdicts.md").read_text()
    # rlve's difference from the small grids (3x3 + 4x4 = 40 of 48 points > two thirds): P3 falsified by its second clause
    held, out = run(_steps_report(diffs, {"fixed": 0.5}, {**sizes, "size=3": 30.0, "size=4": 10.0, "size=5": 0.0, "size=6": 4.0, "size=7": 4.0}))
    assert held["P3"] == "FALSIFIED" and "3x3+4x4 share 83%" in out
    # an arm above 2% on the never-trained lengths, and B beating A there, each falsify P5; learnability beating fixed, P1
    held, _ = run(_steps_report({**diffs, ("k11-k12 never trained", "rlve", "fixed"): [-d for d in strong]}, {"fixed": 0.5}, sizes))
    assert held["P5"] == "FALSIFIED" and held["P1"] == "held"
    held, _ = run(_steps_report({**diffs, ("k9-k10 target", "learnability", "fixed"): strong}, {"fixed": 2.5}, sizes))
    assert held["P5"] == "FALSIFIED" and held["P1"] == "FALSIFIED"
    # the walk-level analysis (--primary instances) is refused: the registered test is the seed-level one
    report = _steps_report(diffs, {"fixed": 0.5}, sizes)
    report["tests"][0]["primary"] = "instances"
    (tmp_path / "steps.json").write_text(json.dumps(report))
    done = subprocess.run(script + [str(tmp_path / "steps.json")], capture_output=True, text=True)
    assert done.returncode != 0 and "--primary seeds" in done.stderr
