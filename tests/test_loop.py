"""The closed loop end to end on CPU (tiny policy, TRL), its resumability, and run-config errors."""

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

pytest.importorskip("trl")

from envengineer import hookimpl  # noqa: E402
from envengineer.errors import ConfigError  # noqa: E402
from envengineer.loop.steps import Loop, run  # noqa: E402
from envengineer.registry import Registry  # noqa: E402
from envengineer.loop.runconfig import parse_run_config, resolve  # noqa: E402


def tiny_run_config(tmp: Path, output: Path, cache: Path, **overrides) -> dict:
    config = {
        "name": "loop-test",
        "task": {"name": "mapf-frozenlake", "agents": 2, "prompt_style": "compact"},
        "rounds": 2,
        "seed": 3,
        "budget": 12,
        "context": {"preset": "V6"},
        "engineer": {"name": "heuristic"},
        "policy": {"name": "tiny", "instances": 120, "epochs": 1, "hidden_size": 32, "layers": 1, "ffn": 64,
                   "max_new_tokens": 48, "cache_dir": str(cache)},
        "trainer": {"name": "trl", "max_steps": 1, "num_generations": 2, "per_device_train_batch_size": 4,
                    "max_completion_length": 32, "threads": 2},
        "eval": {"validation": "mapf-2agents-val", "benchmarks": ["mapf-3agents"], "limit": 10},
        "output": str(output),
    }
    config.update(overrides)
    return config


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("tiny-cache")


class Killed(BaseException):
    """Stands for the process dying: nothing after the kill point runs."""


class KillAt:
    def __init__(self, step, round):
        self.step, self.round = step, round

    @hookimpl
    def on_step_end(self, run_dir, round, step, record):
        if (step, round) == (self.step, self.round):
            raise Killed()


def _loop(pm, config_dict):
    registry = Registry(pm)
    resolved = resolve(parse_run_config(config_dict), registry)
    return Loop(resolved, registry)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def comparable(run_dir: Path) -> dict[str, str]:
    """What must match between a resumed run and an uninterrupted one."""
    out = {}
    for path in sorted(run_dir.rglob("*")):
        rel = path.relative_to(run_dir).as_posix()
        if not path.is_file() or "/trl/" in rel or rel.startswith("report") or rel == "history.jsonl":
            continue
        if rel.endswith("calls.jsonl") or rel == "run.yaml":
            continue
        if rel.endswith("summary.json"):
            data = json.loads(path.read_text())
            data.pop("settings", None)
            out[rel] = json.dumps(data, sort_keys=True)
        elif rel.endswith(".md") and "/engineer/" in rel:
            out[rel] = path.read_text().replace(str(run_dir), "RUN")
        elif rel.endswith(("config.json", "generation_config.json", "details.json", "training_args.bin")):
            continue  # hold paths of the run directory
        elif rel.endswith("curves.jsonl"):
            rows = [json.loads(line) for line in path.read_text().splitlines()]
            out[rel] = json.dumps([{k: v for k, v in row.items() if k != "seconds"} for row in rows])
        else:
            out[rel] = _digest(path)
    return out


class Recorder:
    """A logging plugin (wandb-style): sees every finished step and round."""

    def __init__(self):
        self.rounds, self.steps, self.ended = [], [], None

    @hookimpl
    def on_step_end(self, step, round):
        self.steps.append((step, round))

    @hookimpl
    def on_round_end(self, round, metrics):
        self.rounds.append((round, metrics))

    @hookimpl
    def on_run_end(self, metrics):
        self.ended = metrics


RECORDER = Recorder()


@pytest.fixture(scope="module")
def reference(tmp_path_factory, cache):
    from envengineer.plugin_manager import create_plugin_manager

    out = tmp_path_factory.mktemp("reference") / "run"
    pm = create_plugin_manager(entry_points=False, environ={})
    pm.register(RECORDER, name="recorder")
    rows = _loop(pm, tiny_run_config(out.parent, out, cache)).run_all()
    return out, rows


def test_lifecycle_hooks_see_every_round(reference):
    assert [r for r, _ in RECORDER.rounds] == [0, 1]
    assert {"valid_rate", "optimal_rate"} <= set(RECORDER.rounds[0][1])
    assert ("train", 0) in RECORDER.steps and ("design", 0) in RECORDER.steps
    assert [row["round"] for row in RECORDER.ended["rounds"]] == ["base", 0, 1]


def test_end_to_end_loop_writes_every_artifact(reference):
    out, rows = reference
    assert [row["round"] for row in rows] == ["base", 0, 1]
    steps = [(line["step"], line["round"]) for line in map(json.loads, (out / "history.jsonl").read_text().splitlines())]
    assert steps[:2] == [("pretrain", None), ("base_eval", None)]
    assert ("design", 0) in steps and ("design", 1) not in steps and ("bench", 1) in steps
    for rel in ("run.yaml", "base/eval/summary.json", "base/bench/mapf-3agents/summary.json",
                "round-00/config.yaml", "round-00/train.jsonl", "round-00/train/checkpoint/config.json",
                "round-00/train/curves.jsonl", "round-00/eval/summary.json", "round-00/eval/examples.jsonl",
                "round-00/engineer/projection.yaml", "round-00/engineer/summary.md", "round-01/config.yaml",
                "round-01/bench/mapf-3agents/summary.json"):
        assert (out / rel).exists(), rel
    assert not list(out.rglob("*.partial")) and not list(out.rglob(".*.tmp"))
    summary = json.loads((out / "round-01/eval/summary.json").read_text())
    assert summary["overall"]["n"] == 10 and "size" in summary["by"]
    base_valid = round(rows[0]["valid_rate"] * rows[0]["n"])
    for row in rows[1:]:  # the paired change against the base adds up to the change in valid counts
        change = row["vs_base"]
        assert change["gained"] - change["lost"] == round(row["valid_rate"] * row["n"]) - base_valid
        assert 0 <= change["p"] <= 1
    bench = json.loads((out / "round-01/bench/mapf-3agents/summary.json").read_text())
    assert "sum_over_subsets" in bench


@pytest.mark.parametrize("step,round", [
    ("pretrain", None), ("base_eval", None), ("generate", 0), ("train", 0), ("eval", 0), ("design", 0),
    ("train", 1), ("bench", 1),
])
def test_resume_after_a_kill_at_each_step_matches_an_uninterrupted_run(tmp_path, cache, reference, step, round):
    from envengineer.plugin_manager import create_plugin_manager

    ref_dir, _ = reference
    out = tmp_path / "run"
    config = tiny_run_config(tmp_path, out, cache)
    pm = create_plugin_manager(entry_points=False, environ={})
    pm.register(KillAt(step, round), name="killer")
    with pytest.raises(Killed):
        _loop(pm, config).run_all()
    # Die before the history line too: the step's outputs exist but it does not count as done,
    # and a half-built folder of the next step is left behind.
    lines = (out / "history.jsonl").read_text().splitlines()
    (out / "history.jsonl").write_text("".join(line + "\n" for line in lines[:-1]))
    junk = out / "round-00" / "eval.partial"
    junk.mkdir(parents=True, exist_ok=True)
    (junk / "summary.json").write_text("{half")
    pm = create_plugin_manager(entry_points=False, environ={})
    _loop(pm, config).run_all()
    assert comparable(out) == comparable(ref_dir)
    done = [(l["step"], l["round"]) for l in map(json.loads, (out / "history.jsonl").read_text().splitlines())]
    assert len(done) == len(set(done)), "a finished step was redone"


def test_the_table_does_not_depend_on_the_thread_count(tmp_path, cache, reference):
    """One trainer thread and two evaluation threads against the reference's two and one: a thread count may
    change a weight's last bits (measured: up to 1.5e-7 on an Intel CPU), not the table (every verdict)."""
    from envengineer.plugin_manager import create_plugin_manager

    ref_dir, ref_rows = reference
    out = tmp_path / "threads"
    config = tiny_run_config(tmp_path, out, cache)
    config["trainer"] = {**config["trainer"], "threads": 1}
    config["policy"] = {**config["policy"], "threads": 2}
    rows = _loop(create_plugin_manager(entry_points=False, environ={}), config).run_all()
    table = lambda rows: [(r["round"], r["n"], r["valid_rate"], r["optimal_rate"]) for r in rows]  # noqa: E731
    assert table(rows) == table(ref_rows)
    for verdicts in sorted(ref_dir.rglob("verdicts.jsonl")):
        rel = verdicts.relative_to(ref_dir)
        assert (out / rel).read_text() == verdicts.read_text(), rel
    trains = [line for line in map(json.loads, (out / "history.jsonl").read_text().splitlines()) if line["step"] == "train"]
    assert all(line["cpu_s"] > 0 and line["train_cpu_seconds"] > 0 for line in trains)  # CPU seconds beside wall seconds


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
def test_sigkill_during_training_then_resume(tmp_path, cache, reference):
    """A real kill of the process in the middle of a training step."""
    ref_dir, _ = reference
    out = tmp_path / "run"
    config_path = tmp_path / "run.yaml"
    config_path.write_text(yaml.safe_dump(tiny_run_config(tmp_path, out, cache)))
    env = {**os.environ, "ENVENGINEER_LOAD_PLUGINS": ""}
    proc = subprocess.Popen([sys.executable, "-m", "envengineer.cli.commands", "run", str(config_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    partial = out / "round-00" / "train.partial"
    deadline = time.monotonic() + 300
    while not partial.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert partial.exists(), "training never started"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "round-00" / "train").exists()
    result = subprocess.run([sys.executable, "-m", "envengineer.cli.commands", "run", str(config_path)],
                            capture_output=True, text=True, env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    assert comparable(out) == comparable(ref_dir)


def test_rerunning_a_finished_run_redoes_nothing(tmp_path, cache, reference):
    ref_dir, _ = reference
    from envengineer.plugin_manager import create_plugin_manager

    before = (ref_dir / "history.jsonl").read_text().count("\n")
    config = yaml.safe_load((ref_dir / "run.yaml").read_text())
    _loop(create_plugin_manager(entry_points=False, environ={}), config).run_all()
    assert (ref_dir / "history.jsonl").read_text().count("\n") == before


def test_a_different_config_in_the_same_directory_is_refused(tmp_path, cache, reference):
    ref_dir, _ = reference
    from envengineer.plugin_manager import create_plugin_manager

    config = yaml.safe_load((ref_dir / "run.yaml").read_text())
    config["budget"] = 13
    with pytest.raises(ConfigError, match="budget"):
        _loop(create_plugin_manager(entry_points=False, environ={}), config).run_all()


@pytest.mark.parametrize("patch,field", [
    ({"engineer": {"name": "openai", "modle": "gpt"}}, "engineer.openai.modle"),
    ({"trainer": {"name": "trl", "learning_rat": 1e-4}}, "trainer.trl.learning_rat"),
    ({"task": {"name": "mapf-frozenlake", "agents": "two"}}, "task.agents"),
    ({"policy": {"name": "tiny", "epochs": -1}}, "policy.tiny.epochs"),
    ({"context": {"preset": "V9"}}, "context.preset"),
    ({"eval": {"validaton": "x"}}, "eval.validaton"),
    ({"roundz": 3}, "roundz"),
    ({"rounds": 0}, "rounds"),
    ({"engineer": {"name": "no-such-engineer"}}, "no-such-engineer"),
    ({"eval": {"validation": "no-such-bench"}}, "no-such-bench"),
])
def test_bad_run_configs_name_the_field(registry, tmp_path, cache, patch, field):
    config = tiny_run_config(tmp_path, tmp_path / "run", cache)
    config.update(patch)
    with pytest.raises(Exception) as info:
        resolve(parse_run_config(config), registry)
    assert field in str(info.value)
    assert not (tmp_path / "run").exists()


def test_cli_run_rejects_a_bad_config_without_writing(tmp_path):
    from envengineer.cli.commands import main

    path = tmp_path / "bad.yaml"
    path.write_text("name: x\ntask: mapf-frozenlake\nengineer: {name: heuristic, bogus: 1}\noutput: " + str(tmp_path / "run") + "\n")
    with pytest.raises(SystemExit) as info:
        main(["run", str(path)])
    assert info.value.code == 2
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------- failed experiments

KEY = "ENVENGINEER_TEST_LOOP_KEY"


def _designs(out: Path) -> list[tuple]:
    lines = map(json.loads, (out / "history.jsonl").read_text().splitlines())
    return [(l["round"], l["fallback"], l.get("halted")) for l in lines if l["step"] == "design"]


def test_an_llm_engineer_that_keeps_falling_back_stops_the_run_until_fixed(tmp_path, cache, fake_llm, monkeypatch, capsys):
    from envengineer.cli.commands import main
    from envengineer.plugins.report.page import render_html
    from envengineer.plugins.report.view import load_run_view

    monkeypatch.setenv("ENVENGINEER_LOAD_PLUGINS", "")
    monkeypatch.delenv(KEY, raising=False)
    out = tmp_path / "run"
    engineer = {"name": "openai", "model": "gpt-test", "base_url": fake_llm.url + "/v1", "api_key_env": KEY, "max_retries": 0}
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(tiny_run_config(tmp_path, out, cache, rounds=3, engineer=engineer, design={"max_fallbacks": 2})))
    with pytest.raises(SystemExit) as info:
        main(["run", str(path)])
    assert info.value.code == 2
    captured = capsys.readouterr()
    err, table = " ".join(captured.err.split()), " ".join(captured.out.split())
    assert "engineer openai (model gpt-test): 2 consecutive design step(s) fell back (rounds 0–1)" in err
    assert f"set the API key in the environment variable {KEY}" in err and "Traceback" not in captured.err
    assert "FAILED EXPERIMENT: the run was stopped by design.max_fallbacks after 2 of 2 design step(s) fell back" in table
    # Everything done so far is recorded, the stopping design step included; round 2 never started.
    assert _designs(out) == [(0, True, None), (1, True, True)]
    assert yaml.safe_load((out / "round-01/engineer/projection.yaml").read_text())["fallback"] is True
    assert (out / "round-02/config.yaml").exists() and not (out / "round-02/train.jsonl").exists()
    assert fake_llm.requests == []  # no key, no call
    assert "stopped by design.max_fallbacks" in render_html(load_run_view(out), {})

    # The user sets the key and reruns: round 1's design is redone (now applied) and the run finishes.
    monkeypatch.setenv(KEY, "sk-loop-secret-1234")
    fake_llm.script = [fake_llm.Step("Shift to waiting.\n```yaml\nsizes: {5x5: {wait_ratio: 0.6}}\n```")]
    main(["run", str(path)])
    table = " ".join(capsys.readouterr().out.split())
    assert _designs(out) == [(0, True, None), (1, True, True), (1, False, None)]
    assert yaml.safe_load((out / "round-02/config.yaml").read_text())["sizes"]["5x5"]["wait_ratio"] == 0.6
    assert yaml.safe_load((out / "round-01/engineer/projection.yaml").read_text())["fallback"] is False
    assert (out / "round-02/eval/summary.json").exists()
    assert "1 of 2 design steps fell back" in table and "FAILED" not in table
    steps = [(l["step"], l["round"]) for l in map(json.loads, (out / "history.jsonl").read_text().splitlines())]
    assert len(steps) == len(set(steps)) + 1  # only the stopped design step was done twice
    assert not any("sk-loop-secret-1234" in p.read_text(errors="replace") for p in out.rglob("*") if p.is_file() and p.suffix in (".md", ".jsonl", ".yaml", ".json"))


@pytest.mark.parametrize("limit", [None, 5])
def test_a_resume_may_change_max_fallbacks_and_read_an_older_run_yaml(tmp_path, reference, limit):
    import shutil

    from envengineer.plugin_manager import create_plugin_manager

    ref_dir, _ = reference
    out = tmp_path / "run"
    shutil.copytree(ref_dir, out)
    written = yaml.safe_load((out / "run.yaml").read_text())
    del written["design"]["max_fallbacks"]  # as a run directory made before the field existed
    written["output"] = str(out)
    (out / "run.yaml").write_text(yaml.safe_dump(written))
    before = (out / "history.jsonl").read_text()
    config = {**written, "design": {**written["design"], "max_fallbacks": limit}}
    _loop(create_plugin_manager(entry_points=False, environ={}), config).run_all()
    assert (out / "history.jsonl").read_text() == before  # nothing redone
    assert yaml.safe_load((out / "run.yaml").read_text())["design"]["max_fallbacks"] == limit


@pytest.mark.parametrize("name", ["checkpoint", "base"])
def test_offline_propose_uses_the_models_the_run_recorded(tmp_path, reference, name):
    """`envengineer propose --engineer checkpoint|base` loads round N's trained checkpoint / the run's base policy."""
    from typer.testing import CliRunner

    from envengineer.cli.commands import app

    ref_dir, _ = reference
    history = [json.loads(line) for line in (ref_dir / "history.jsonl").read_text().splitlines()]
    base = next(l["base"] for l in history if l["step"] == "pretrain")
    expected = str(ref_dir / "round-00" / "train" / "checkpoint") if name == "checkpoint" else base
    options = tmp_path / "engineer.yaml"
    options.write_text(yaml.safe_dump({"backend": "transformers", "max_new_tokens": 8}))
    result = CliRunner().invoke(app, ["propose", "--run", str(ref_dir), "--round", "0", "--engineer", name,
                                      "--engineer-config", str(options), "--reask", "0", "--output", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    calls = [json.loads(line) for line in (tmp_path / "out" / "calls.jsonl").read_text().splitlines()]
    assert calls and all(c["model"] == expected and c["error"] is None and c["backend"] == "transformers" for c in calls)
    assert calls[0]["usage"]["completion_tokens"] >= 1  # the model answered
    assert "engineer call failed" not in result.output and "(no response" not in (tmp_path / "out" / "response.md").read_text()


# ------------------------------------------------------------- dotted overrides


def test_overrides_apply_like_the_file():
    from envengineer.loop.runconfig import apply_overrides

    base = {"name": "x", "task": "mapf-frozenlake", "seed": 0, "engineer": "heuristic", "trainer": {"name": "trl", "beta": 0.0}}
    out = apply_overrides(base, ["seed=2", "engineer.name=fixed", "trainer.beta=1.0e-2", "eval.limit=5",
                                 "policy={name: tiny, threads: 1}", "output=runs/a=b"])
    assert out == {"name": "x", "task": "mapf-frozenlake", "seed": 2, "engineer": {"name": "fixed"}, "trainer": {"name": "trl", "beta": 0.01},
                   "eval": {"limit": 5}, "policy": {"name": "tiny", "threads": 1}, "output": "runs/a=b"}
    assert base["engineer"] == "heuristic"  # the file's data is not changed
    assert parse_run_config(out).seed == 2


@pytest.mark.parametrize("override, message", [
    ("seed", "expected KEY=VALUE"),
    ("trainer..beta=1", "expected KEY=VALUE"),
    ("name.first=x", "name is 'x', not a mapping"),
    ("seed=[1", "the value is not YAML"),
])
def test_bad_overrides_are_named(override, message):
    from envengineer.loop.runconfig import apply_overrides

    with pytest.raises(ConfigError) as info:
        apply_overrides({"name": "x"}, [override])
    assert message in str(info.value) and override in str(info.value)


def test_cli_run_takes_dotted_overrides_and_records_the_result(tmp_path, cache, capsys):
    from envengineer.cli.commands import main

    out = tmp_path / "run"
    path = tmp_path / "base.yaml"
    path.write_text(yaml.safe_dump(tiny_run_config(tmp_path, out, cache, rounds=1)))
    with pytest.raises(SystemExit) as info:  # a typo in an override is refused like one in the file, before anything is written
        main(["run", str(path), "trainer.bta=0.1"])
    assert info.value.code == 2 and "trainer.trl.bta" in " ".join(capsys.readouterr().err.split())
    assert not out.exists()
    main(["run", str(path), "seed=5", "engineer.name=fixed", "eval.benchmarks=[]"])
    recorded = yaml.safe_load((out / "run.yaml").read_text())
    assert recorded["seed"] == 5 and recorded["engineer"] == {"name": "fixed"} and recorded["eval"]["benchmarks"] == []
    assert yaml.safe_load(path.read_text())["seed"] == 3  # the file itself is untouched


def test_a_rounds_model_is_the_one_its_trainer_returned(tmp_path):
    """The train step records the checkpoint the trainer returned (relative to train/, or absolute);
    the next round, evaluation and the checkpoint engineer use that folder."""
    import time as _time

    from envengineer.store.rundir import RunDir

    run = RunDir(tmp_path / "run")
    assert run.checkpoint(0) == tmp_path / "run" / "round-00" / "train" / "checkpoint"  # before the step: the convention
    run.record("train", 0, _time.monotonic(), checkpoint="hf/final")
    assert run.checkpoint(0) == tmp_path / "run" / "round-00" / "train" / "hf" / "final"
    run.record("train", 1, _time.monotonic(), checkpoint=str(tmp_path / "shared" / "round-1"))
    assert run.checkpoint(1) == tmp_path / "shared" / "round-1"
    assert RunDir(tmp_path / "run").checkpoint(0) == tmp_path / "run" / "round-00" / "train" / "hf" / "final"  # read back


def test_run_steps_are_one_enumeration_and_a_typo_is_an_error(tmp_path):
    """Every step the loop records is a Step; asking for an unknown one fails instead of reading as "not done"."""
    from envengineer.store.rundir import STEPS, RunDir, Step, clock

    assert STEPS == ("pretrain", "base_eval", "generate", "train", "eval", "bench", "design", "round_end")
    folder = RunDir(tmp_path)
    line = folder.record(Step.ROUND_END, 0, clock())
    assert line["step"] == "round_end" and type(line["step"]) is str  # plain JSON in history.jsonl
    assert folder.done("round_end", 0) == folder.done(Step.ROUND_END, 0) == line
    assert RunDir(tmp_path).done(Step.ROUND_END, 0)["step"] == "round_end"  # read back from the file
    with pytest.raises(ValueError, match="unknown run step 'round-end'"):
        folder.done("round-end", 0)
    with pytest.raises(ValueError, match="unknown run step"):
        folder.record("trian", 0, clock())
