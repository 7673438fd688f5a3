"""`envengineer suite`: two tiny configs × two seeds on CPU, their tables, resumption, errors."""

import csv
import json
import math
import shutil
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

pytest.importorskip("trl")

from envengineer.cli.commands import app, main  # noqa: E402

ENV = {"ENVENGINEER_LOAD_PLUGINS": "", "COLUMNS": "250"}
BENCH = "mapf-3agents"
runner = CliRunner()


def tiny_config(name: str, cache: Path, **overrides) -> dict:
    config = {
        "name": name,
        "task": {"name": "mapf-frozenlake", "agents": 2, "prompt_style": "compact"},
        "rounds": 2,
        "seed": 7,  # the suite overrides it
        "budget": 8,
        "context": {"preset": "V6"},
        "engineer": {"name": "heuristic"},
        "policy": {"name": "tiny", "instances": 120, "epochs": 1, "hidden_size": 32, "layers": 1, "ffn": 64,
                   "max_new_tokens": 48, "cache_dir": str(cache)},
        "trainer": {"name": "trl", "max_steps": 1, "num_generations": 2, "per_device_train_batch_size": 4,
                    "max_completion_length": 32, "threads": 2},
        "eval": {"validation": "mapf-2agents-val", "benchmarks": [BENCH], "limit": 6},
    }
    config.update(overrides)
    return config


def write_config(folder: Path, stem: str, config: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{stem}.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """alpha: heuristic engineer, table "engineers"; beta: the checkpoint as engineer (a tiny
    model, so every design falls back), context V5, table "context variants"."""
    root = tmp_path_factory.mktemp("suite")
    cache = root / "cache"
    configs = root / "configs"
    write_config(configs, "alpha", tiny_config("alpha", cache, suite={"table": "engineers", "row": "heuristic"}))
    write_config(configs, "beta", tiny_config(
        "beta", cache, context={"preset": "V5"},
        engineer={"name": "checkpoint", "backend": "transformers", "max_new_tokens": 8},
        suite={"table": "context variants", "row": "V5 (self)"},
    ))
    out = root / "out"
    result = runner.invoke(app, ["suite", str(configs), "--seeds", "2", "--output", str(out)], env=ENV)
    assert result.exit_code == 0, result.output + repr(result.exception)
    return {"root": root, "cache": cache, "configs": configs, "out": out, "output": result.output}


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def mean_sd(values):
    n = len(values)
    mean = sum(values) / n
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


def recorded(run_dir: Path) -> dict[str, float]:
    """The figures a finished run recorded: last-round benchmark and validation, in percent."""
    bench = json.loads((run_dir / "round-01" / "bench" / BENCH / "summary.json").read_text())
    val = json.loads((run_dir / "round-01" / "eval" / "summary.json").read_text())
    return {
        f"{BENCH} valid Σ": 100 * bench["sum_over_subsets"]["valid"],
        f"{BENCH} optimal Σ": 100 * bench["sum_over_subsets"]["optimal"],
        f"{BENCH} valid %": 100 * bench["overall"]["valid_rate"],
        f"{BENCH} optimal %": 100 * bench["overall"]["optimal_rate"],
        "validation valid %": 100 * val["overall"]["valid_rate"],
        "validation optimal %": 100 * val["overall"]["optimal_rate"],
    }


def check_row(row: dict[str, str], run_dirs: list[Path]) -> None:
    figures = [recorded(d) for d in run_dirs]
    for header in figures[0]:
        mean, sd = mean_sd([f[header] for f in figures])
        assert float(row[header]) == pytest.approx(mean, abs=1e-3), header
        assert float(row[f"{header} sd"]) == pytest.approx(sd, abs=1e-3), header
        assert row[f"{header} n"] == str(len(run_dirs))


def test_every_config_runs_for_every_seed_with_the_seed_overridden(suite):
    out = suite["out"]
    for stem in ("alpha", "beta"):
        for seed in (0, 1):
            run_dir = out / stem / f"seed-{seed}"
            run_yaml = yaml.safe_load((run_dir / "run.yaml").read_text())
            assert run_yaml["seed"] == seed and run_yaml["output"] == str(run_dir)
            assert "suite" not in run_yaml  # labels are not part of the run
            steps = [json.loads(line)["step"] for line in (run_dir / "history.jsonl").read_text().splitlines()]
            assert steps.count("round_end") == 2


def test_tables_come_from_the_configs_and_hold_the_recorded_means(suite):
    out = suite["out"]
    engineers, context = read_csv(out / "engineers.csv"), read_csv(out / "context-variants.csv")
    assert [r["row"] for r in engineers] == ["heuristic"] and [r["row"] for r in context] == ["V5 (self)"]
    check_row(engineers[0], [out / "alpha" / "seed-0", out / "alpha" / "seed-1"])
    check_row(context[0], [out / "beta" / "seed-0", out / "beta" / "seed-1"])
    assert engineers[0]["seeds finished"] == "2/2" and engineers[0]["status"] == "ok"
    assert engineers[0]["designs fell back"] == "0/2" and engineers[0]["engineer"] == "heuristic"
    # The tiny checkpoint cannot write a config: every design fell back, and the row says so.
    assert context[0]["designs fell back"] == "2/2" and "all designs fell back" in context[0]["status"]
    assert context[0]["context"] == "V5"
    md = (out / "engineers.md").read_text()
    assert md.startswith("# engineers\n") and f"| {BENCH} valid Σ |" in md and "mean ± sd" in md
    assert "engineers: Σ over subsets" in suite["output"] and "context variants: overall rates" in suite["output"]


def test_tables_average_distinct_values_per_seed(suite, tmp_path):
    """The recorded figures of a tiny policy are mostly zero; give each seed its own figures."""
    out = tmp_path / "out"
    shutil.copytree(suite["out"], out)
    for seed, level in ((0, 0.25), (1, 0.6)):
        run_dir = out / "alpha" / f"seed-{seed}"
        for rel, extra in ((f"round-01/bench/{BENCH}/summary.json", level / 3), ("round-01/eval/summary.json", 0.0)):
            path = run_dir / rel
            data = json.loads(path.read_text())
            data["overall"]["valid_rate"], data["overall"]["optimal_rate"] = level, level / 2 + extra
            if "sum_over_subsets" in data:
                data["sum_over_subsets"] = {"valid": 3 * level - 0.1, "optimal": level}
            if "eval" in rel:  # the loop's sampled pass@1: seed 0 recorded it, seed 1's block is not one (read as absent)
                data["sampled"] = {"n": 4, "temperature": 1.0, "pass1": 0.3} if seed == 0 else ["not", "a", "block"]
            path.write_text(json.dumps(data))
    result = runner.invoke(app, ["suite", str(suite["configs"]), "--seeds", "2", "--output", str(out), "--tables-only"], env=ENV)
    assert result.exit_code == 0, result.output
    row = read_csv(out / "engineers.csv")[0]
    check_row(row, [out / "alpha" / "seed-0", out / "alpha" / "seed-1"])
    assert float(row[f"{BENCH} valid Σ"]) == pytest.approx(100 * (0.75 + 1.8 - 0.2) / 2)
    assert float(row[f"{BENCH} valid Σ sd"]) > 20
    assert f"{100 * (0.75 + 1.8 - 0.2) / 2:.1f} ± " in (out / "engineers.md").read_text()
    # the arms report's validation table: sampled pass@1 beside the greedy rate, and the valid rate over the rounds
    arms = read_csv(out / "engineers-mapf-2agents-val.csv")[0]
    assert float(arms["pass@1 (sampled) %"]) == pytest.approx(30.0) and arms["pass@1 (sampled) % n"] == "1"
    first = [json.loads((out / "alpha" / f"seed-{s}" / "round-00/eval/summary.json").read_text())["overall"]["valid_rate"] for s in (0, 1)]
    over_rounds = [100 * (first[0] + 0.25) / 2, 100 * (first[1] + 0.6) / 2]
    assert float(arms["valid, mean over rounds %"]) == pytest.approx(sum(over_rounds) / 2, abs=1e-3)
    assert "base evaluation" in (out / "engineers-arms.md").read_text()


def test_a_second_invocation_runs_nothing(suite):
    out = suite["out"]
    histories = {p: p.read_text() for p in out.rglob("history.jsonl")}
    result = runner.invoke(app, ["suite", str(suite["configs"]), "--seeds", "2", "--output", str(out)], env=ENV)
    assert result.exit_code == 0, result.output
    assert "4 finished run(s) skipped" in result.output and "starting" not in result.output
    assert {p: p.read_text() for p in out.rglob("history.jsonl")} == histories


def test_dry_run_prints_the_plan_and_runs_nothing(suite, tmp_path):
    result = runner.invoke(app, ["suite", str(suite["configs"]), "--seeds", "3", "--output", str(suite["out"]), "--dry-run"], env=ENV)
    assert result.exit_code == 0, result.output
    assert result.output.count("finished") == 4 and result.output.count("to do") == 2  # seed 2 of each config
    assert not (suite["out"] / "alpha" / "seed-2").exists()
    fresh = tmp_path / "fresh"
    result = runner.invoke(app, ["suite", str(suite["configs"]), "--output", str(fresh), "--dry-run", "--only", "al*"], env=ENV)
    assert result.exit_code == 0 and result.output.count("to do") == 3 and "beta" not in result.output
    assert not fresh.exists()


def run_main(args, capsys):
    with pytest.raises(SystemExit) as exc:
        main(args)
    captured = capsys.readouterr()
    return exc.value.code, " ".join((captured.out + captured.err).split())  # undo the console's line wrapping


def test_bad_sources_are_named_in_the_error(tmp_path, capsys):
    code, text = run_main(["suite", str(tmp_path / "nowhere"), "--dry-run"], capsys)
    assert code == 2 and "nowhere: no such folder or run config file" in text
    (tmp_path / "empty").mkdir()
    code, text = run_main(["suite", str(tmp_path / "empty"), "--dry-run"], capsys)
    assert code == 2 and "no run configs" in text
    bad = write_config(tmp_path / "bad", "typo", tiny_config("typo", tmp_path, suite={"tabel": "engineers"}))
    code, text = run_main(["suite", str(bad.parent), "--dry-run"], capsys)
    assert code == 2 and "typo.yaml" in text and "suite.tabel" in text and "suite.table" in text
    code, text = run_main(["suite", str(bad.parent), "--only", "zzz*", "--dry-run"], capsys)
    assert code == 2  # the bad config is read (and refused) before filtering
    good = write_config(tmp_path / "good", "ok", tiny_config("ok", tmp_path))
    code, text = run_main(["suite", str(good), "--only", "zzz*", "--dry-run"], capsys)
    assert code == 2 and "--only zzz*" in text


def test_a_failing_run_is_recorded_the_others_still_run_and_the_exit_is_non_zero(suite, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(suite["out"], out)
    shutil.rmtree(out / "alpha" / "seed-1")  # to be run again, after the broken config's runs
    configs = tmp_path / "configs"
    shutil.copytree(suite["configs"], configs)
    write_config(configs, "a-broken", tiny_config(
        "broken", suite["cache"], initial_config=str(tmp_path / "missing-config.yaml"), suite={"table": "engineers", "row": "broken"},
    ))
    result = runner.invoke(app, ["suite", str(configs), "--seeds", "2", "--output", str(out)], env=ENV)
    assert result.exit_code == 1, result.output
    assert "missing-config.yaml" in result.output
    # alpha seed 1 ran after the failures, and gave what it gave the first time (same config, same seed).
    for rel in (f"round-01/bench/{BENCH}/summary.json", "round-01/eval/summary.json"):
        again, first = (json.loads(((d / "alpha" / "seed-1") / rel).read_text()) for d in (out, suite["out"]))
        assert {k: again[k] for k in ("overall", "by")} == {k: first[k] for k in ("overall", "by")}
    rows = {r["row"]: r for r in read_csv(out / "engineers.csv")}
    assert list(rows) == ["broken", "heuristic"]  # same order 0: by file name
    assert rows["broken"]["seeds finished"] == "0/2" and rows["broken"]["status"].startswith("failed: seed 0,1")
    assert "missing-config.yaml" in rows["broken"]["status"] and rows["broken"][f"{BENCH} valid %"] == ""
    assert rows["heuristic"]["status"] == "ok" and rows["heuristic"]["seeds finished"] == "2/2"
    # The failure is remembered: a later --tables-only or --dry-run still shows it.
    result = runner.invoke(app, ["suite", str(configs), "--seeds", "2", "--output", str(out), "--tables-only"], env=ENV)
    assert result.exit_code == 0 and "failed: seed 0,1" in (out / "engineers.md").read_text()
    result = runner.invoke(app, ["suite", str(configs), "--seeds", "2", "--output", str(out), "--dry-run"], env=ENV)
    assert result.output.count("failed") == 2


def test_an_incomplete_run_is_shown_not_dropped(suite, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(suite["out"], out)
    history = out / "beta" / "seed-1" / "history.jsonl"
    lines = history.read_text().splitlines()
    history.write_text("".join(line + "\n" for line in lines[:5]))  # as if killed during round 0
    result = runner.invoke(app, ["suite", str(suite["configs"]), "--seeds", "2", "--output", str(out), "--tables-only"], env=ENV)
    assert result.exit_code == 0, result.output
    row = read_csv(out / "context-variants.csv")[0]
    assert row["seeds finished"] == "1/2" and "incomplete: seed 1" in row["status"]
    figures = recorded(out / "beta" / "seed-0")
    assert float(row["validation valid %"]) == pytest.approx(figures["validation valid %"], abs=1e-3)
    assert row["validation valid % sd"] == "" and row["validation valid % n"] == "1"


def test_a_folder_holding_another_run_is_flagged(suite, tmp_path):
    out = tmp_path / "out"
    shutil.copytree(suite["out"], out)
    run_yaml = out / "alpha" / "seed-0" / "run.yaml"
    run_yaml.write_text(run_yaml.read_text().replace("budget: 8", "budget: 9"))
    result = runner.invoke(app, ["suite", str(suite["configs"]), "--seeds", "2", "--output", str(out), "--dry-run"], env=ENV)
    assert result.exit_code == 0 and result.output.count("different run") == 1 and result.output.count("finished") == 3
    runner.invoke(app, ["suite", str(suite["configs"]), "--seeds", "2", "--output", str(out), "--tables-only"], env=ENV)
    row = read_csv(out / "engineers.csv")[0]
    assert row["seeds finished"] == "1/2" and "folder holds a different run: seed 0" in row["status"]


def test_a_config_that_is_the_same_run_as_another_is_run_once_and_shown_in_both_rows(suite, tmp_path):
    """The paper's V6 row and its checkpoint-engineer row are one run under two labels."""
    configs = tmp_path / "configs"
    shutil.copytree(suite["configs"], configs)
    write_config(configs, "gamma", tiny_config("gamma", suite["cache"], suite={"table": "context variants", "row": "V6 (heuristic)"}))
    args = ["suite", str(configs), "--seeds", "2", "--output", str(suite["out"])]
    result = runner.invoke(app, [*args, "--dry-run"], env=ENV)
    assert result.exit_code == 0, result.output
    assert result.output.count("(the run of alpha)") == 2 and "to do" not in result.output
    histories = {p: p.read_text() for p in suite["out"].rglob("history.jsonl")}
    result = runner.invoke(app, args, env=ENV)
    assert result.exit_code == 0, result.output
    assert "starting" not in result.output and not (suite["out"] / "gamma").exists()
    assert {p: p.read_text() for p in suite["out"].rglob("history.jsonl")} == histories
    row = next(r for r in read_csv(suite["out"] / "context-variants.csv") if r["row"] == "V6 (heuristic)")
    check_row(row, [suite["out"] / "alpha" / "seed-0", suite["out"] / "alpha" / "seed-1"])
    assert row["seeds finished"] == "2/2" and "same run as alpha" in row["status"]


def test_a_parallel_runs_job_carries_its_suite_table_and_row(tmp_path, monkeypatch):
    """The suite section is excluded from a config's dump; the job file carries it, so a run in its own
    process (suite --jobs N) is labelled as in the suite's process (trackers group runs by it)."""
    import json

    import envengineer.loop.steps
    from envengineer.plugins.suite import worker as suite_worker
    from envengineer.loop.runconfig import SuiteSection, parse_run_config

    config = parse_run_config({"name": "x", "task": {"name": "grid-walk"}, "engineer": {"name": "fixed"}}, "x.yaml")
    config = config.model_copy(update={"suite": SuiteSection(table="engineers", row="fixed")})
    assert "suite" not in config.model_dump(mode="json")
    seen = {}

    class Stop(Exception):
        pass

    def capture(resolved, registry, console):
        seen["suite"] = resolved.config.suite
        raise Stop

    monkeypatch.setattr(envengineer.loop.steps, "Loop", capture)
    job = tmp_path / "job.json"
    job.write_text(json.dumps({"config": config.model_dump(mode="json"), "log": str(tmp_path / "log"), "result": str(tmp_path / "r.json"),
                               "suite": config.suite.model_dump(mode="json")}))
    assert suite_worker.main([str(job)]) == 1  # Stop: the capture ends the run
    assert seen["suite"].table == "engineers" and seen["suite"].row == "fixed"
    source = (Path(suite_worker.__file__).parent / "local.py").read_text()
    assert '"suite": run.config.suite.model_dump(mode="json")' in source
