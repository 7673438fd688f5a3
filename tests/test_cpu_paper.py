"""Suites of arms (a base config plus overrides, `suite.yaml`), run in parallel (`--jobs`),
resumed, and compared in detail (per subset, paired tests against the baseline, plots)."""

import csv
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from envengineer.cli.commands import app, main
from envengineer.components.metrics import sign_test

ENV = {"ENVENGINEER_LOAD_PLUGINS": "", "COLUMNS": "250"}
REPO = Path(__file__).resolve().parents[1]
runner = CliRunner()


def run_main(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    captured = capsys.readouterr()
    return exc.value.code, " ".join((captured.out + captured.err).split())  # undo the console's line wrapping


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def tiny_base(cache: Path) -> dict:
    """The smallest run that does every step: a 1-layer tiny policy warm-started on 120 answers,
    one GRPO step a round, 6 instances of each evaluation set."""
    return {
        "name": "mini",
        "task": {"name": "mapf-frozenlake", "agents": 2, "prompt_style": "compact"},
        "rounds": 2,
        "budget": 8,
        "context": {"preset": "V6"},
        "engineer": {"name": "heuristic"},
        "policy": {"name": "tiny", "instances": 120, "epochs": 1, "hidden_size": 32, "layers": 1, "ffn": 64,
                   "max_new_tokens": 48, "cache_dir": str(cache)},
        "trainer": {"name": "trl", "max_steps": 1, "num_generations": 2, "per_device_train_batch_size": 4,
                    "max_completion_length": 32, "threads": 1},
        "eval": {"validation": "mapf-2agents-val", "benchmarks": ["mapf-3agents"], "limit": 6},
    }


def write_suite(folder: Path, base: dict, arms: dict, **manifest) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "base.yaml").write_text(yaml.safe_dump(base, sort_keys=False))
    (folder / "suite.yaml").write_text(yaml.safe_dump({"base": "base.yaml", **manifest, "arms": arms}, sort_keys=False))
    return folder


# ------------------------------------------------------------------ the manifest


def test_the_shipped_manifest_gives_one_arm_per_engineer_and_the_probe(tmp_path):
    from envengineer.loop.runconfig import load_run_config
    from envengineer.plugins.suite.tables import plan

    cwd = os.getcwd()
    os.chdir(REPO)  # the probe's generator config is named from the manifest's folder, recorded from the working directory
    try:
        suite = plan(["examples/cpu-paper"], seeds=3, output=tmp_path / "out")
    finally:
        os.chdir(cwd)
    arms = {e.arm: e for e in suite.entries}
    assert list(arms) == ["fixed", "random", "curriculum", "heuristic", "learnability", "bad-env"]
    assert [e.baseline for e in suite.entries] == [True] + [False] * 5
    base = load_run_config(REPO / "examples/cpu-paper/base.yaml").model_dump(mode="json")
    assert base["rounds"] >= 4 and base["eval"]["benchmarks"] == ["mapf-2agents-test", "mapf-3agents", "mapf-4agents", "mapf-5agents"]
    for arm, entry in arms.items():
        # exactly `envengineer run base.yaml OVERRIDES`: the arm differs from the base where it says, and in its name
        # (the manifest's paths are from its folder, the command line's from the working directory: the root here)
        overrides = tuple("initial_config=examples/cpu-paper/bad-env.yaml" if o.startswith("initial_config=") else o
                          for o in entry.overrides)
        assert entry.config.model_dump(mode="json") == load_run_config(REPO / "examples/cpu-paper/base.yaml", overrides).model_dump(mode="json") | {"name": f"cpu-paper-{arm}"}
        differ = {k for k, v in entry.config.model_dump(mode="json").items() if base[k] != v}
        assert differ <= ({"name", "engineer", "initial_config"} if arm == "bad-env" else {"name", "engineer"}), arm
        assert entry.config.engineer["name"] == ("fixed" if arm == "bad-env" else arm)
        assert [r.seed for r in entry.runs] == [0, 1, 2] and len({r.run_dir for r in entry.runs}) == 3
        assert entry.config.suite.table == "engineers on CPU" and entry.config.suite.row == arm
    # every arm starts from the same warm start: the policy section is the base's
    assert len({json.dumps(e.config.policy, sort_keys=True) for e in suite.entries}) == 1
    bad = yaml.safe_load((REPO / "examples/cpu-paper/bad-env.yaml").read_text())["sizes"]
    assert bad["10x10"] == {"ratio": 0.86, "hole_ratio": 0.4, "wait_ratio": 0.3}  # every other size at the 2% floor
    assert all(v["ratio"] == 0.02 for size, v in bad.items() if size != "10x10")
    assert abs(sum(v["ratio"] for v in bad.values()) - 1.0) < 1e-9


@pytest.mark.parametrize("arms, manifest, expected", [
    ({"fixed": {"trainer.bta": 0.1}}, {}, ["arm fixed", "trainer.bta=0.1", "trainer.trl.bta: Extra inputs are not permitted"]),
    ({"fixed": ["rounds=0"]}, {}, ["arm fixed", "rounds: Input should be greater than or equal to 1"]),
    ({"fixed": {"engineer.name": "fixd"}}, {}, ["arm fixed", "unknown engineer 'fixd'"]),
    ({"fixed": {"engineer.name": "fixed", "seed": 3}}, {}, ["arms.fixed.seed: set by the suite"]),
    ({"fixed": {"output": "x"}}, {}, ["arms.fixed.output: set by the suite"]),
    ({"fixed": ["engineer.name fixed"]}, {}, ["arms.fixed", "expected KEY=VALUE"]),
    ({"fixed": "engineer.name=fixed"}, {}, ["arms.fixed: expected a mapping of dotted fields"]),
    ({"a b": {}}, {}, ["arms.a b: an arm's name names its run folder"]),
    ({"fixed": {}}, {"baseline": "heuristic"}, ["baseline: no arm named heuristic (arms: fixed)"]),
    ({"fixed": {}}, {"tabel": "x"}, ["tabel: Extra inputs are not permitted"]),
    ({}, {}, ["arms: Dictionary should have at least 1 item"]),
    ({"fixed": {"eval.validation": "mapf-3agentz"}}, {}, ["arm fixed", "eval.validation", "mapf-3agentz"]),
    ({"fixed": {}}, {"common": {"seed": 2}}, ["common.seed: set by the suite"]),
    ({"fixed": {}}, {"common": "rounds=2"}, ["common: expected a mapping of dotted fields"]),
    ({"fixed": {}}, {"common": ["rounds=0"]}, ["arm fixed", "rounds: Input should be greater than or equal to 1"]),
    ({"fixed": {}}, {"seeds": [4, 4]}, ["seeds: a seed is listed twice"]),
    ({"fixed": {}}, {"seeds": []}, ["seeds: give one seed or more"]),
    ({"fixed": {}}, {"seeds": {4: {"seed": 1}}}, ["seeds.4.seed: set by the suite"]),
    ({"fixed": {}}, {"seeds": {4: {"policy.sed": 1}}}, ["arm fixed at seed 4", "policy.sed=1"]),
])
def test_a_bad_manifest_or_arm_is_refused_naming_the_file_and_field(tmp_path, capsys, arms, manifest, expected):
    folder = write_suite(tmp_path / "s", tiny_base(tmp_path / "cache"), arms, **manifest)
    code, text = run_main(["suite", str(folder), "--dry-run", "--output", str(tmp_path / "out")], capsys)
    assert code == 2, text
    assert str(folder / "suite.yaml") in text
    for part in expected:
        assert part in text, (part, text)
    assert not (tmp_path / "out").exists()


def test_common_overrides_come_before_each_arms_own(tmp_path):
    from envengineer.plugins.suite.tables import plan

    folder = write_suite(tmp_path / "s", tiny_base(tmp_path / "cache"), {"fixed": {"engineer.name": "fixed"},
                         "short": {"engineer.name": "fixed", "rounds": 1}}, common={"rounds": 2, "budget": 7})
    suite = plan([folder], seeds=1, output=tmp_path / "out")
    assert [(e.arm, e.config.rounds, e.config.budget) for e in suite.entries] == [("fixed", 2, 7), ("short", 1, 7)]
    assert suite.entries[1].overrides == ("rounds=2", "budget=7", "engineer.name=fixed", "rounds=1")


def test_a_manifests_seeds_and_their_overrides_apply_to_every_arm(tmp_path, capsys):
    """seeds: a list is the seeds run without --seeds; a mapping gives a seed overrides of its own (e.g. its own
    warm start), applied after the arm's; --seeds takes N, A-B or a,b,c, and may not ask for a seed the mapping lacks."""
    from envengineer.errors import EnvEngineerError
    from envengineer.plugins.suite.tables import plan
    from envengineer.plugins.suite.plan import parse_seeds

    assert parse_seeds("3") == (0, 1, 2) and parse_seeds("4-7") == (4, 5, 6, 7) and parse_seeds("6, 4") == (6, 4)
    assert parse_seeds(2) == (0, 1) and parse_seeds(None) is None
    for bad in ("0", "5-4", "a", "1,1", "-1", "1-2-3", ""):
        with pytest.raises(EnvEngineerError, match="--seeds"):
            parse_seeds(bad)
    base = tiny_base(tmp_path / "cache")
    listed = write_suite(tmp_path / "l", base, {"fixed": {}}, seeds=[5, 9])
    assert [r.seed for r in plan([listed], output=tmp_path / "o1").runs] == [5, 9]
    assert [r.seed for r in plan([listed], seeds="2", output=tmp_path / "o1").runs] == [0, 1]  # --seeds wins over a list
    assert [r.seed for r in plan([write_suite(tmp_path / "d", base, {"fixed": {}}), ], output=tmp_path / "o0").runs] == [0, 1, 2]
    mapped = write_suite(tmp_path / "m", base, {"fixed": {"policy.seed": 7}, "short": {"rounds": 1}},
                         seeds={4: {"policy.seed": 0}, 5: None, 6: {"policy.seed": 1, "rounds": 3}})
    suite = plan([mapped], output=tmp_path / "o2")
    got = {(e.arm, r.seed): (r.config.policy.get("seed"), r.config.rounds, r.config.seed, r.run_dir.name) for e in suite.entries for r in e.runs}
    assert got == {("fixed", 4): (0, 2, 4, "seed-4"), ("fixed", 5): (7, 2, 5, "seed-5"), ("fixed", 6): (1, 3, 6, "seed-6"),
                   ("short", 4): (0, 1, 4, "seed-4"), ("short", 5): (None, 1, 5, "seed-5"), ("short", 6): (1, 3, 6, "seed-6")}
    assert [r.seed for r in plan([mapped], seeds="5-6", output=tmp_path / "o2").runs] == [5, 6, 5, 6]  # two arms
    code, text = run_main(["suite", str(mapped), "--seeds", "4-7", "--dry-run", "--output", str(tmp_path / "o3")], capsys)
    assert code == 2 and "seeds: the manifest gives seeds 4, 5, 6 overrides of their own" in text and "seed 7" in text, text
    code, text = run_main(["suite", str(mapped), "--seeds", "x", "--dry-run", "--output", str(tmp_path / "o3")], capsys)
    assert code == 2 and "--seeds x" in text, text


def test_the_llm_engineer_manifests_share_their_engineer_and_set_the_donor_per_seed():
    """examples/llm-engineer: the SmolLM2 arms are one engineer, the donor arm reads the next seed of smollm2-v6
    (under the output the manifest's comment names), and the grid-walk arms train at equal optimizer steps."""
    from envengineer.plugins.suite.tables import plan

    for name, out in (("sim", "runs/llm-engineer/sim"), ("gw", "runs/llm-engineer/gw")):
        suite = plan([REPO / f"examples/llm-engineer/{name}-suite.yaml"], seeds=4, output=out)
        arms = {e.arm: e.config for e in suite.entries}
        assert list(arms)[:2] in (["fixed", "learnability"], ["fixed", "heuristic"])
        llm = [arms[a].engineer for a in ("smollm2-v6", "smollm2-v6-donor", "smollm2-no-f")]
        assert llm[0] == llm[1] == llm[2] and llm[0]["model_path"] == "smollm2-135m-instruct" and llm[0]["structured"]
        donor = arms["smollm2-v6-donor"].context["options"]["F"]
        assert donor == {"donor": f"{out}/smollm2-v6/seed-{{other_seed}}", "donor_seeds": 4}
        assert f"--output {out} --only smollm2-v6" in (REPO / f"examples/llm-engineer/{name}-suite.yaml").read_text()
        assert "F" not in arms["smollm2-no-f"].context["modules"]
        if name == "gw":
            assert {(c.budget_mode, c.budget, c.rounds) for c in arms.values()} == {("kept_prompts", 96, 6)}


def test_a_manifest_without_its_base_or_naming_another_manifest_is_refused(tmp_path, capsys):
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "suite.yaml").write_text("base: nowhere.yaml\narms: {fixed: {}}\n")
    code, text = run_main(["suite", str(folder), "--dry-run"], capsys)
    assert code == 2 and "suite.yaml: base:" in text and "nowhere.yaml: no such run config file" in text
    (folder / "other.yaml").write_text("base: base.yaml\narms: {a: {}}\n")
    (folder / "suite.yaml").write_text("base: other.yaml\narms: {fixed: {}}\n")
    code, text = run_main(["suite", str(folder), "--dry-run"], capsys)
    assert code == 2 and "other.yaml is a manifest, not a run config" in text


def test_arms_and_config_files_that_would_share_a_folder_are_refused(tmp_path, capsys):
    folder = write_suite(tmp_path / "s", tiny_base(tmp_path / "cache"), {"fixed": {"engineer.name": "fixed"}})
    other = tmp_path / "files"
    other.mkdir()
    (other / "fixed.yaml").write_text(yaml.safe_dump(tiny_base(tmp_path / "cache")))
    code, text = run_main(["suite", str(folder), str(other), "--dry-run"], capsys)
    assert code == 2 and "same name as" in text and "fixed/" in text


def test_an_override_value_is_the_yaml_the_command_line_would_read():
    from envengineer.plugins.suite.manifest import yaml_value

    for value in ("fixed", 0.01, 1e-5, "yes", "a: b", {"name": "learnability", "mix": 0.5}, [1, 2], None, True, 3):
        assert yaml.safe_load(yaml_value(value)) == value


# ------------------------------------------------------------------ running: --jobs, resuming


@pytest.fixture(scope="module")
def mini(tmp_path_factory):
    """Two arms (fixed, heuristic) x two seeds of the tiny run, once with --jobs 1 and once with --jobs 2."""
    root = tmp_path_factory.mktemp("mini")
    cache = root / "cache"
    folder = write_suite(root / "s", tiny_base(cache), {"fixed": {"engineer.name": "fixed"}, "heuristic": {}}, table="mini")
    outputs = {}
    for jobs in (1, 2):
        out = root / f"out-{jobs}"
        result = runner.invoke(app, ["suite", str(folder), "--seeds", "2", "--jobs", str(jobs), "--output", str(out)], env=ENV)
        assert result.exit_code == 0, result.output + repr(result.exception)
        outputs[jobs] = (out, result.output)
    return {"root": root, "folder": folder, "outputs": outputs}


RUNS = [f"{arm}/seed-{seed}" for arm in ("fixed", "heuristic") for seed in (0, 1)]


def results(run_dir: Path) -> dict[str, str]:
    """What a run produced that must not depend on how it was scheduled: every round's data,
    config, verdicts and responses (history lines carry times, so only their steps are compared)."""
    import hashlib

    out = {}
    for path in sorted(run_dir.rglob("*")):
        rel = path.relative_to(run_dir).as_posix()
        if path.name == "model.safetensors":  # each round's checkpoint, byte for byte
            out[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        if path.is_file() and (path.name in ("config.yaml", "train.jsonl", "verdicts.jsonl", "responses.jsonl", "run.yaml")
                               or rel.endswith("engineer/projection.yaml")):
            out[rel] = path.read_text()
    out["steps"] = json.dumps([(line["step"], line.get("round")) for line in map(json.loads, (run_dir / "history.jsonl").read_text().splitlines())])
    return out


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
def test_parallel_runs_give_the_same_results_as_sequential_ones(mini):
    (one, _), (two, output) = mini["outputs"][1], mini["outputs"][2]
    assert "each in its own process" in output
    for rel in RUNS:
        first, second = results(one / rel), results(two / rel)
        assert "round-01/eval/verdicts.jsonl" in first and "round-01/bench/mapf-3agents/verdicts.jsonl" in first
        assert any(k.endswith("model.safetensors") for k in first)
        assert {k: v.replace(str(one), "OUT") for k, v in first.items()} == {k: v.replace(str(two), "OUT") for k, v in second.items()}, rel
        assert (two / f"{rel}.log").is_file()  # each parallel run's console output
    # the fixed arm kept its config, the heuristic moved it: the arms differ where they should
    assert results(one / "fixed/seed-0")["round-01/config.yaml"] == results(one / "fixed/seed-0")["round-00/config.yaml"]
    assert results(one / "heuristic/seed-0")["round-01/config.yaml"] != results(one / "heuristic/seed-0")["round-00/config.yaml"]


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
def test_run_yaml_records_the_resolved_arm(mini):
    out, _ = mini["outputs"][2]
    run_yaml = yaml.safe_load((out / "fixed/seed-1/run.yaml").read_text())
    assert run_yaml["engineer"] == {"name": "fixed"} and run_yaml["seed"] == 1 and run_yaml["name"] == "mini-fixed"
    assert run_yaml["output"] == str(out / "fixed/seed-1") and "suite" not in run_yaml
    assert yaml.safe_load((out / "heuristic/seed-0/run.yaml").read_text())["engineer"] == {"name": "heuristic"}


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
def test_the_warm_start_is_built_once_before_the_parallel_runs(mini):
    cache = (mini["root"] / "cache").resolve()
    assert len(list(cache.rglob("warm_start.json"))) == 1 and not list(cache.rglob("*.tmp-*"))
    bases = set()
    for out, _ in mini["outputs"].values():
        for rel in RUNS:
            lines = [json.loads(line) for line in (out / rel / "history.jsonl").read_text().splitlines()]
            bases |= {Path(line["base"]).resolve() for line in lines if line["step"] == "pretrain"}
    assert len(bases) == 1 and next(iter(bases)).parent == cache


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
def test_a_finished_suite_runs_nothing_and_a_killed_one_resumes_to_the_same_results(mini, tmp_path):
    one, _ = mini["outputs"][1]
    out = tmp_path / "out"
    result = runner.invoke(app, ["suite", str(mini["folder"]), "--seeds", "2", "--jobs", "2", "--output", str(mini["outputs"][2][0])], env=ENV)
    assert result.exit_code == 0 and "4 finished run(s) skipped" in result.output and "own process" not in result.output
    # kill the suite (and its runs) while runs are under way, then start it again
    env = {**os.environ, **ENV}
    command = [sys.executable, "-c", "from envengineer.cli.commands import main; main()", "suite", str(mini["folder"]), "--seeds", "2",
               "--jobs", "2", "--output", str(out)]
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        histories = [out / rel / "history.jsonl" for rel in RUNS]
        if any(h.exists() and '"train"' in h.read_text() for h in histories):
            break
        time.sleep(0.2)
    else:
        pytest.fail("no run got to its first train step")
    process.kill()  # the suite alone, outright (SIGKILL): its runs notice and end too
    process.wait()
    time.sleep(3)
    snapshot = {rel: (out / rel / "history.jsonl").read_text() for rel in RUNS if (out / rel / "history.jsonl").exists()}
    time.sleep(4)
    assert snapshot == {rel: (out / rel / "history.jsonl").read_text() for rel in RUNS if (out / rel / "history.jsonl").exists()}
    def finished(rel):
        history = out / rel / "history.jsonl"
        return history.exists() and any(json.loads(line)["step"] == "round_end" and json.loads(line)["round"] == 1
                                        for line in history.read_text().splitlines() if line.strip())

    assert not all(finished(rel) for rel in RUNS)
    result = runner.invoke(app, ["suite", str(mini["folder"]), "--seeds", "2", "--jobs", "2", "--output", str(out)], env=ENV)
    assert result.exit_code == 0, result.output
    for rel in RUNS:
        assert {k: v.replace(str(one), "OUT") for k, v in results(one / rel).items() if k != "steps"} == \
               {k: v.replace(str(out), "OUT") for k, v in results(out / rel).items() if k != "steps"}, rel


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
def test_a_failing_parallel_run_is_recorded_and_the_others_finish(mini, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(mini["outputs"][2][0], out)
    shutil.rmtree(out / "heuristic" / "seed-1")
    folder = tmp_path / "s"
    shutil.copytree(mini["folder"], folder)
    manifest = yaml.safe_load((folder / "suite.yaml").read_text())
    manifest["arms"]["broken"] = {"initial_config": str(tmp_path / "missing.yaml")}
    (folder / "suite.yaml").write_text(yaml.safe_dump(manifest))
    result = runner.invoke(app, ["suite", str(folder), "--seeds", "2", "--jobs", "2", "--output", str(out)], env=ENV)
    error = str(result.exception)  # checked before anything runs (main() prints it and exits 2)
    assert result.exit_code != 0 and "arm broken" in error and "missing.yaml: no such file" in error
    assert not (out / "broken").exists()
    manifest["arms"]["broken"] = {"policy.path": str(tmp_path / "no-model")}  # fails only when the run loads it
    (folder / "suite.yaml").write_text(yaml.safe_dump(manifest))
    result = runner.invoke(app, ["suite", str(folder), "--seeds", "2", "--jobs", "2", "--output", str(out)], env=ENV)
    assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output + repr(result.exception)
    assert "broken seed 0 failed" in result.output and "no-model" in result.output
    assert "no-model" in (out / "broken/seed-0.log").read_text()  # the run's own output, its error included
    assert (out / "heuristic/seed-1/history.jsonl").read_text().count('"round_end"') == 2
    status = json.loads((out / "suite.json").read_text())["errors"]
    assert set(status) == {"broken/seed-0", "broken/seed-1"}


# ------------------------------------------------------------------ the comparison on hand-built verdicts


SUBSETS = ("wr_025", "wr_050", "wr_075")


def write_finished(run, verdicts: dict[str, list[tuple[bool, bool]]], configs: list[dict], signal=(), earlier=(), sampled=None) -> None:
    """A finished run directory with the given verdicts (validation and mapf-3agents, last round),
    the validation verdicts of the rounds before (``earlier``), the last validation summary's
    ``sampled`` block, and, per round, the (prompts used, steps) its train step recorded."""
    from envengineer.components import Verdict
    from envengineer.components.metrics import summarize
    from envengineer.store.rundir import RunDir

    folder = RunDir(run.run_dir)
    folder.path.mkdir(parents=True, exist_ok=True)
    folder.run_yaml.write_text(yaml.safe_dump(run.config.model_dump(mode="json"), sort_keys=False))
    last = run.config.rounds - 1
    for index, config in enumerate(configs):
        path = folder.config_path(index)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(config))
    sets = [("validation", folder.eval_dir(i), pairs) for i, pairs in enumerate(earlier)]
    sets += [("validation", folder.eval_dir(last), verdicts["validation"]), ("mapf-3agents", folder.bench_dir(last, "mapf-3agents"), verdicts["mapf-3agents"])]
    for name, target, pairs in sets:
        target.mkdir(parents=True, exist_ok=True)
        items = [Verdict(v, o, None if v else "parse") for v, o in pairs]
        groups = [{"subset": SUBSETS[i % 3]} for i in range(len(items))]
        summary = summarize(items, groups).to_dict()
        if sampled is not None and target == folder.eval_dir(last):
            summary["sampled"] = sampled
        (target / "summary.json").write_text(json.dumps(summary))
        (target / "verdicts.jsonl").write_text("".join(json.dumps(v.to_record(f"{name}-{i}")) + "\n" for i, v in enumerate(items)))
    for step, round in [("pretrain", None), ("base_eval", None)] + [(s, r) for r in range(run.config.rounds) for s in ("train", "eval", "design", "round_end")]:
        if step == "train" and round < len(signal):
            folder.record(step, round, time.monotonic(), prompts_used=signal[round][0], steps=signal[round][1])
        elif step != "train":
            folder.record(step, round, time.monotonic())


def flags(text: str) -> list[tuple[bool, bool]]:
    """'V' valid and optimal, 'v' valid only, '.' neither."""
    return [(c in "Vv", c == "V") for c in text]


def test_the_comparison_holds_per_subset_means_and_paired_tests_against_fixed(tmp_path):
    from envengineer.plugins.suite.tables import plan, write_tables
    from envengineer.registry import load_registry

    folder = write_suite(tmp_path / "s", tiny_base(tmp_path / "cache"),
                         {"fixed": {"engineer.name": "fixed"}, "heuristic": {"engineer.name": "heuristic"}}, table="hand")
    out = tmp_path / "out"
    suite = plan([folder], seeds=2, output=out)
    table = {"sizes": {"3x3": {"ratio": 0.5, "hole_ratio": 0.1, "wait_ratio": 0.3}, "4x4": {"ratio": 0.5, "hole_ratio": 0.1, "wait_ratio": 0.3}}}
    moved = {"sizes": {"3x3": {"ratio": 0.2, "hole_ratio": 0.1, "wait_ratio": 0.5}, "4x4": {"ratio": 0.8, "hole_ratio": 0.3, "wait_ratio": 0.3}}}
    # 12 instances each; fixed vs heuristic, instance by instance
    hand = {
        ("fixed", 0): {"validation": flags("VVvv....VV.."), "mapf-3agents": flags("v...........")},
        ("fixed", 1): {"validation": flags("VVVVVVvv...."), "mapf-3agents": flags("............")},
        ("heuristic", 0): {"validation": flags("VVVVVVVVVVV."), "mapf-3agents": flags("vVV.........")},
        ("heuristic", 1): {"validation": flags("VV.VVV.v.v.."), "mapf-3agents": flags("....V.......")},
    }
    # round 00's validation (round 01 is the last): 2, 3, 4 and 6 of 12 valid
    first = {("fixed", 0): "VV..........", ("fixed", 1): "VVV.........", ("heuristic", 0): "VVVV........", ("heuristic", 1): "VVVVVV......"}
    # sampled pass@1 beside the greedy rate: fixed seed 1 has a malformed block (read as absent)
    sampled = {("fixed", 0): {"n": 4, "temperature": 1.0, "pass1": 0.4}, ("fixed", 1): "oops",
               ("heuristic", 0): {"n": 4, "temperature": 1.0, "pass1": 0.7}, ("heuristic", 1): {"n": 4, "temperature": 1.0, "pass1": 0.5}}
    for entry in suite.entries:
        for run in entry.runs:
            signal = [(40, 5), (48, 6)] if entry.arm == "fixed" else [(40, 5), (24 + 8 * run.seed, 3 + run.seed)]
            write_finished(run, hand[(entry.arm, run.seed)], [table, table] if entry.arm == "fixed" else [table, moved], signal,
                           earlier=[flags(first[(entry.arm, run.seed)])], sampled=sampled[(entry.arm, run.seed)])
    suite = plan([folder], seeds=2, output=out)
    assert all(run.done for run in suite.runs)
    write_tables(suite, load_registry())

    # per seed: validation valid. seed 0: fixed VVvv....VV.. vs heuristic VVVVVVVVVVV. -> +5 (4,5,6,7,10) -0
    # seed 1: fixed VVVVVVvv.... vs heuristic VV.VVV.v.v.. -> +1 (9) -2 (2, 6)
    rows = {(r["arm"], r["seed"]): r for r in read_csv(out / "hand-paired-per-seed.csv")}
    val = "validation (mapf-2agents-val)"
    assert rows[("heuristic", "0")][f"{val} valid"] == f"+5 −0 (n 12), p = {sign_test(5, 0):.3f}"
    assert rows[("heuristic", "1")][f"{val} valid"] == f"+1 −2 (n 12), p = {sign_test(1, 2):.3f}"
    # optimal, seed 0: fixed optimal at 0,1,8,9; heuristic at 0..10 -> +7 (2..7, 10) -0
    assert rows[("heuristic", "0")][f"{val} optimal"] == f"+7 −0 (n 12), p = {sign_test(7, 0):.3f}"
    bench = "3 agents (mapf-3agents)"
    assert rows[("heuristic", "0")][f"{bench} valid"] == f"+2 −0 (n 12), p = {sign_test(2, 0):.3f}"
    assert rows[("heuristic", "1")][f"{bench} optimal"] == f"+1 −0 (n 12), p = {sign_test(1, 0):.3f}"
    pooled = {r["arm"]: r for r in read_csv(out / "hand-paired.csv")}
    assert list(pooled) == ["heuristic", "fixed vs itself"]  # the baseline's seeds against each other: training noise
    # fixed seed 1 (VVVVVVvv....) against seed 0 (VVvv....VV..): +4 (4..7) −2 (8, 9)
    assert pooled["fixed vs itself"][f"{val} valid"] == f"+4 −2 (n 12), p = {sign_test(4, 2):.3f}"
    assert rows[("fixed vs itself", "0 vs 1")][f"{val} valid"] == pooled["fixed vs itself"][f"{val} valid"]
    assert pooled["heuristic"][f"{val} valid"] == f"+6 −2 (n 24), p = {sign_test(6, 2):.3f}"
    assert sign_test(6, 2) == pytest.approx(2 * (1 + 8 + 28) / 256)

    # per subset: instance i is in subset i % 3; validation valid in wr_025 (instances 0, 3, 6, 9)
    # fixed seed 0: V v . V -> 3/4 = 75%; seed 1: V V v . -> 75%; heuristic: 4/4 = 100% and V V . v -> 75%
    subset_rows = {r["arm"]: r for r in read_csv(out / "hand-mapf-2agents-val.csv")}
    assert float(subset_rows["fixed (baseline)"]["wr_025 valid %"]) == pytest.approx(75.0)
    assert float(subset_rows["fixed (baseline)"]["wr_025 valid % sd"]) == pytest.approx(0.0)
    assert float(subset_rows["heuristic"]["wr_025 valid %"]) == pytest.approx(87.5)
    assert float(subset_rows["heuristic"]["wr_025 valid % sd"]) == pytest.approx(17.6777, abs=1e-3)
    # the Sum over subsets: seed 0 heuristic valid 4/4 + 4/4 + 3/4 = 275; seed 1 VV.VVV.v.v.. -> 3/4 + 2/4 + 2/4 = 175
    assert float(subset_rows["heuristic"]["valid Σ"]) == pytest.approx(225.0)
    assert float(subset_rows["heuristic"]["overall valid %"]) == pytest.approx(100 * (11 + 7) / 24)

    # how far the heuristic's configs are from fixed's: round 00 the same, round 01 moved
    distance = {(r["arm"], r["knob"].split()[0]): r for r in read_csv(out / "hand-config-distance.csv")}
    assert float(distance[("heuristic", "ratio")]["round 00"]) == 0.0
    assert float(distance[("heuristic", "ratio")]["round 01"]) == pytest.approx(30.0)  # 30% of the budget moved
    assert float(distance[("heuristic", "hole_ratio")]["round 01"]) == pytest.approx(0.1)  # (0 + 0.2) / 2
    # the training signal each arm's environments gave: prompts kept and steps per round, and their total
    signal = {(r["arm"], r["figure"]): r for r in read_csv(out / "hand-signal.csv")}
    assert float(signal[("fixed (baseline)", "prompts trained on")]["round 01"]) == 48.0
    assert float(signal[("heuristic", "prompts trained on")]["round 01"]) == pytest.approx(28.0)  # 24 and 32
    assert float(signal[("heuristic", "prompts trained on")]["round 01 sd"]) == pytest.approx(math.sqrt(32), abs=1e-3)
    assert float(signal[("heuristic", "optimizer steps")]["total"]) == pytest.approx(8.5)  # 5 + 3 and 5 + 4
    # beside the last round's greedy rates: sampled pass@1 (fixed: seed 0 only) and the mean over rounds
    # (fixed: (16.7 + 50) / 2 and (25 + 66.7) / 2; heuristic: (33.3 + 91.7) / 2 and (50 + 58.3) / 2)
    assert float(subset_rows["fixed (baseline)"]["pass@1 (sampled) %"]) == pytest.approx(40.0)
    assert subset_rows["fixed (baseline)"]["pass@1 (sampled) % n"] == "1"
    assert float(subset_rows["heuristic"]["pass@1 (sampled) %"]) == pytest.approx(60.0)
    assert float(subset_rows["fixed (baseline)"]["valid, mean over rounds %"]) == pytest.approx((100 / 3 + 275 / 6) / 2, abs=1e-3)
    assert float(subset_rows["heuristic"]["valid, mean over rounds %"]) == pytest.approx((62.5 + 325 / 6) / 2, abs=1e-3)
    assert "pass@1 (sampled) %" not in read_csv(out / "hand-mapf-3agents.csv")[0]  # the validation set only
    # the pooled sign tests with Holm's adjustment: one arm, so the same p
    assert pooled["heuristic"][f"{val} valid Holm p"] == f"{sign_test(6, 2):.3f}"
    # seeds as the unit: last-round validation valid, fixed 50 and 66.7, heuristic 91.7 and 58.3
    from envengineer.plugins.suite.arms.stats import welch

    tests = {(r["figure"], r["arm"]): r for r in read_csv(out / "hand-seed-tests.csv")}
    assert list(tests) == [(f"{val} valid %", "heuristic"), (f"{val} valid, mean over rounds %", "heuristic"),
                           (f"{bench} valid %", "heuristic")]
    last = tests[(f"{val} valid %", "heuristic")]
    expected = welch([275 / 3, 175 / 3], [50.0, 200 / 3])
    assert float(last["difference (points)"]) == pytest.approx(50 / 3, abs=1e-3)
    assert float(last["95% CI low"]) == pytest.approx(expected.low, abs=1e-3) and last["Welch p"] == f"{expected.p:.3f}"
    # 2 vs 2 seeds, 6 splits: of {50, 66.7, 91.7, 58.3} the splits {50, 66.7}, {50, 58.3} and their mirrors are as far apart
    assert last["permutation p"] == "0.667" and last["permutation p (Holm)"] == "0.667"
    assert float(tests[(f"{val} valid, mean over rounds %", "heuristic")]["difference (points)"]) == pytest.approx(18.75, abs=1e-3)
    assert float(tests[(f"{bench} valid %", "heuristic")]["difference (points)"]) == pytest.approx(100 * (3 + 1 - 1) / 24, abs=1e-3)
    md = (out / "hand-arms.md").read_text()
    assert "## Against fixed with seeds as the unit" in md and "6 splits, so its smallest two-sided p is 0.333" in md
    assert "## Training signal at the same budget" in md
    assert "## Paired against fixed" in md and "hand-plots/rounds.png" in md and "hand-plots/config-heuristic.png" in md
    for name in ("rounds.png", "sets.png", "config-fixed.png", "config-heuristic.png"):
        assert (out / "hand-plots" / name).stat().st_size > 1000


def test_the_noise_row_pools_a_chain_of_seeds_not_a_cycle():
    """Around a closed cycle of seeds (0-1, 1-2, 2-0) every instance is gained as often as lost, so a
    pooled cycle always reads + = −; the noise row pairs 0 with 1 and 1 with 2."""
    from envengineer.plugins.suite.arms.runs import Arm, ArmRun, ArmsReport, SetResult
    from envengineer.plugins.suite.arms.paired import noise_rows

    solved = {0: "VV..", 1: "V.V.", 2: "VVVV"}
    runs = [ArmRun(seed, None, {"validation": SetResult(None, {f"i{k}": {"valid": c == "V", "optimal": False}
                                                                  for k, c in enumerate(text)})})
            for seed, text in solved.items()]
    arm = Arm("fixed", "fixed", runs, 3, baseline=True)
    pooled_row, seed_rows = noise_rows(ArmsReport("t", [arm], [("validation", None)], arm))
    assert [r["seed"] for r in seed_rows] == ["0 vs 1", "1 vs 2"]
    # 0 -> 1: +1 (i2) -1 (i1); 1 -> 2: +2 (i1, i3) -0; pooled +3 -1 (a cycle would add 2 -> 0: +0 -2, giving +3 -3)
    assert seed_rows[1]["validation:valid"].startswith("+2 −0 (n 4)")
    assert pooled_row["validation:valid"].startswith("+3 −1 (n 8)")
