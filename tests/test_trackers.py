"""Experiment trackers: the lifecycle hooks' payloads, the built-in TensorBoard, W&B and MLflow trackers read
back with each tool's own reader (EventAccumulator, ``wandb leet inspect`` on the offline run, MlflowClient
on the store), the trl trainer's step metrics joined across rounds in the same tracker runs, the verl
trainer's loggers checked against verl's own config, and a tracker that fails never failing the run."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from envengineer import hookimpl
from envengineer.errors import ConfigError, UnknownComponentError
from envengineer.components import Tracker

ROOT = Path(__file__).resolve().parents[1]


SIM = {"name": "sim", "rounds": 2, "budget": 40, "task": {"name": "mapf-frozenlake"}, "engineer": "heuristic",
       "policy": "simulated", "trainer": "simulated", "eval": {"limit": 24, "benchmarks": ["mapf-3agents"]}}


class Recorder:
    """A plugin implementing every lifecycle hook, keeping each payload."""

    def __init__(self):
        self.events = []

    @hookimpl
    def on_run_start(self, config, info):
        self.events.append(("start", None, info))

    @hookimpl
    def on_benchmark_end(self, round, benchmark):
        self.events.append(("benchmark", round, benchmark))

    @hookimpl
    def on_design_end(self, round, design):
        self.events.append(("design", round, design))

    @hookimpl
    def on_round_end(self, round, metrics):
        self.events.append(("round", round, metrics))

    @hookimpl
    def on_run_end(self, metrics):
        self.events.append(("end", None, metrics))

    def of(self, kind):
        return [(r, p) for k, r, p in self.events if k == kind]


def _loop(config: dict, *plugins, console=None):
    from rich.console import Console

    from envengineer.loop.steps import Loop
    from envengineer.plugin_manager import create_plugin_manager
    from envengineer.registry import Registry
    from envengineer.loop.runconfig import parse_run_config, resolve

    pm = create_plugin_manager(entry_points=False, environ={})
    for index, plugin in enumerate(plugins):
        pm.register(plugin, name=f"test-plugin-{index}")
    registry = Registry(pm)
    return Loop(resolve(parse_run_config(config), registry), registry, console or Console(file=open("/dev/null", "w")))


def _tracker_warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING and r.getMessage().startswith("tracker ")]


# ------------------------------------------------------------------ the run config


def test_trackers_field_names_its_errors(registry):
    from envengineer.loop.runconfig import load_run_config, parse_run_config, resolve

    config = parse_run_config({**SIM, "trackers": ["tensorboard", {"name": "wandb", "project": "p"}]})
    assert [t.name for t in resolve(config, registry).trackers] == ["tensorboard", "wandb"]
    with pytest.raises(UnknownComponentError, match=r"trackers\[1\]: unknown tracker 'tensorbord' \(registered: mlflow, tensorboard, wandb"):
        resolve(parse_run_config({**SIM, "trackers": ["wandb", "tensorbord"]}), registry)
    with pytest.raises(ConfigError, match=r"trackers\[0\]\.wandb\.projct: Extra inputs are not permitted"):
        resolve(parse_run_config({**SIM, "trackers": [{"name": "wandb", "projct": "p"}]}), registry)
    with pytest.raises(ConfigError, match="trackers: .*wandb is listed twice"):
        parse_run_config({**SIM, "trackers": ["wandb", {"name": "wandb"}]})
    with pytest.raises(ConfigError, match=r"trackers: .*trackers\[0\] must be a mapping with a 'name'"):
        parse_run_config({**SIM, "trackers": [3]})


def test_trackers_as_a_dotted_override_and_never_a_different_run(tmp_path, registry):
    from envengineer.loop.steps import run_identity
    from envengineer.loop.runconfig import load_run_config

    path = tmp_path / "sim.yaml"
    path.write_text(yaml.safe_dump(SIM))
    config = load_run_config(path, ["trackers=[tensorboard, mlflow]"], registry)
    assert config.trackers == ["tensorboard", "mlflow"]
    assert load_run_config(path, ["trackers=wandb"], registry).trackers == ["wandb"]
    plain = load_run_config(path, [], registry)
    assert plain.trackers == [] and run_identity(config.model_dump(mode="json")) == run_identity(plain.model_dump(mode="json"))


# ------------------------------------------------------------------ the hooks' payloads (simulated student: seconds)


@pytest.fixture(scope="module")
def simulated(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sim")
    recorder = Recorder()
    loop = _loop({**SIM, "output": str(tmp / "run"), "suite": {"table": "tbl", "row": "arm"}}, recorder)
    rows = loop.run_all()
    return tmp / "run", recorder, rows


def test_every_payload_is_plain_json(simulated):
    _, recorder, _ = simulated
    assert [k for k, _, _ in recorder.events] == ["start", "benchmark", "benchmark", "design", "round", "benchmark", "round", "end"]
    for kind, round, payload in recorder.events:
        assert json.loads(json.dumps(payload, allow_nan=False)) == payload, kind


def test_run_start_payload(simulated):
    out, recorder, _ = simulated
    [(_, info)] = recorder.of("start")
    assert info["name"] == "sim" and info["run_dir"] == str(out) and info["resumed"] is False
    assert info["config"] == yaml.safe_load((out / "run.yaml").read_text())
    assert info["suite"] == {"table": "tbl", "row": "arm", "order": 0} and "suite" not in info["config"]
    assert (info["task"], info["engineer"], info["policy"], info["trainer"]) == ("mapf-frozenlake", "heuristic", "simulated", "simulated")
    assert info["validation"] == "mapf-2agents-val" and info["benchmarks"] == ["mapf-3agents"] and info["trackers"] == []
    assert info["knob_table"] == "sizes" and {k["name"] for k in info["knobs"]} >= {"ratio", "hole_ratio", "wait_ratio"}


def test_round_end_payload_says_what_the_files_say(simulated):
    out, recorder, _ = simulated
    rounds = dict(recorder.of("round"))
    assert sorted(rounds) == [0, 1]
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    train = {line["round"]: line for line in history if line["step"] == "train"}
    for round, metrics in rounds.items():
        folder = out / f"round-{round:02d}"
        summary = json.loads((folder / "eval/summary.json").read_text())
        assert metrics["round"] == round and metrics["valid_rate"] == summary["overall"]["valid_rate"]
        assert metrics["validation"]["overall"] == summary["overall"] and metrics["validation"]["by"] == summary["by"]
        assert metrics["validation"]["name"] == "mapf-2agents-val"
        assert metrics["validation"]["aggregate"]["key"] == "sum_over_subsets"
        assert metrics["validation"]["aggregate"]["values"] == summary["sum_over_subsets"]
        assert metrics["signal"] == json.loads((folder / "train/signal.json").read_text())
        assert metrics["config"] == yaml.safe_load((folder / "config.yaml").read_text())
        assert metrics["config_yaml"] == (folder / "config.yaml").read_text()
        assert metrics["knob_values"]["3x3"] == {k: metrics["config"]["sizes"]["3x3"][k] for k in ("ratio", "hole_ratio", "wait_ratio")}
        assert metrics["train"]["optimizer_steps"] == train[round]["steps"]
        assert metrics["train"]["kept_prompts"] == train[round]["trained_prompts"]
        assert metrics["train"]["metrics"]["prompts_used"] == train[round]["prompts_used"]
        assert metrics["curves"] == [json.loads(line) for line in (folder / "train/curves.jsonl").read_text().splitlines()]
    assert rounds[0]["fallback"] is False and rounds[1]["fallback"] is None  # the last round has no design step
    assert rounds[0]["train"]["step_offset"] == 0
    assert rounds[1]["train"]["step_offset"] == rounds[0]["train"]["global_step"] == train[0]["steps"]


def test_design_payload(simulated):
    out, recorder, _ = simulated
    [(round, design)] = recorder.of("design")
    projection = yaml.safe_load((out / "round-00/engineer/projection.yaml").read_text())
    assert round == 0 and design["engineer"] == "heuristic" and design["fallback"] is False and design["halted"] is False
    assert design["notes"] == (out / "round-00/engineer/summary.md").read_text().strip()
    assert design["config"] == yaml.safe_load((out / "round-01/config.yaml").read_text()) == projection["config"]
    assert design["accepted"] == projection["accepted"] and design["changes"] == projection["changes"]
    assert design["proposal"] == yaml.safe_load((out / "round-00/engineer/proposal.yaml").read_text())
    assert design["tokens"] is None and design["calls"] >= 1 and design["seconds"] >= 0  # a baseline reports no tokens
    assert set(design["knob_values"]) == set(design["config"]["sizes"])


def test_design_payload_sums_the_engineers_tokens(tmp_path):
    from envengineer.loop.lifecycle import design_info
    from envengineer.store.rundir import RunDir

    run = RunDir(tmp_path)
    folder = run.engineer_dir(2)
    folder.mkdir(parents=True)
    calls = [{"model": "gpt-x", "attempt": 1, "usage": {"prompt_tokens": 1000, "completion_tokens": 200, "reasoning_tokens": 50},
              "latency_s": 2.5, "error": None, "design_attempt": 1},
             {"model": "gpt-x", "attempt": 1, "usage": {"prompt_tokens": 300, "completion_tokens": 40}, "latency_s": 0.5,
              "error": None, "summary": True}]
    (folder / "calls.jsonl").write_text("".join(json.dumps(c) + "\n" for c in calls))
    (folder / "projection.yaml").write_text(yaml.safe_dump({"fallback": True, "reason": "r", "accepted": [], "changes": [], "config": {"a": 1}}))
    design = design_info(run, 2, {"engineer": "openai", "fallback": True, "reason": "r", "projection_changes": 0, "duration_s": 4.0}, None)
    assert design["tokens"] == {"prompt": 1300, "completion": 240, "reasoning": 50, "total": 1540}
    assert (design["model"], design["calls"], design["engineer_seconds"], design["seconds"]) == ("gpt-x", 2, 3.0, 4.0)
    assert design["notes"] is None and design["proposal"] is None and design["fallback"] is True


def test_benchmark_and_run_end_payloads(simulated):
    out, recorder, rows = simulated
    benchmarks = recorder.of("benchmark")
    assert [(r, b["name"], b["role"]) for r, b in benchmarks] == [
        (None, "mapf-2agents-val", "validation"), (None, "mapf-3agents", "benchmark"), (1, "mapf-3agents", "benchmark")]
    summary = json.loads((out / "round-01/bench/mapf-3agents/summary.json").read_text())
    _, last = benchmarks[-1]
    assert last["overall"] == summary["overall"] and last["subsets"] == "subset" and last["label"] == "3 agents"
    assert last["aggregate"]["values"] == summary["sum_over_subsets"] and last["summary"] == str(out / "round-01/bench/mapf-3agents/summary.json")
    assert benchmarks[0][1]["overall"] == json.loads((out / "base/eval/summary.json").read_text())["overall"]
    [(_, end)] = recorder.of("end")
    assert end["status"] == "finished" and end["error"] is None and end["rounds"] == rows


def test_a_resumed_run_repeats_no_finished_event(simulated):
    out, _, _ = simulated
    recorder = Recorder()
    _loop({**SIM, "output": str(out), "suite": {"table": "tbl", "row": "arm"}}, recorder).run_all()
    assert [k for k, _, _ in recorder.events] == ["start", "end"] and recorder.events[0][2]["resumed"] is True


def test_a_run_that_stops_ends_with_status_failed(tmp_path):
    class Boom(Exception):
        pass

    class Breaks:
        @hookimpl
        def on_step_end(self, step, round):
            if (step, round) == ("eval", 1):
                raise Boom("the disk is full")

    recorder = Recorder()
    with pytest.raises(Boom):
        _loop({**SIM, "output": str(tmp_path / "run")}, Breaks(), recorder).run_all()
    [(_, end)] = recorder.of("end")
    assert end["status"] == "failed" and end["error"] == "the disk is full" and [row["round"] for row in end["rounds"]] == ["base", 0, 1]


# ------------------------------------------------------------------ the payloads' models: the contract


HOOK_KIND = {"start": "on_run_start", "benchmark": "on_benchmark_end", "design": "on_design_end", "round": "on_round_end",
             "end": "on_run_end"}


def test_every_payload_is_its_models_dump(simulated):
    from envengineer.api import PAYLOADS

    _, recorder, _ = simulated
    for kind, _, payload in recorder.events:
        _, model = PAYLOADS[HOOK_KIND[kind]]
        assert model.model_validate(payload).model_dump(mode="json", exclude_unset=True) == payload, kind


def test_a_renamed_or_missing_key_fails_where_the_payload_is_built(simulated):
    from pydantic import ValidationError

    from envengineer.loop.payloads import RoundPayload, build

    _, recorder, _ = simulated
    metrics = dict(recorder.of("round")[0][1])
    assert build(RoundPayload, metrics) == metrics
    renamed = {("valid_rat" if k == "valid_rate" else k): v for k, v in metrics.items()}
    with pytest.raises(ValidationError, match=r"(?s)valid_rate\n  Field required.*\nvalid_rat\n  Extra inputs are not permitted"):
        build(RoundPayload, renamed)
    inner = {**metrics, "train": {**metrics["train"], "steps": metrics["train"]["optimizer_steps"]}}
    with pytest.raises(ValidationError, match=r"train\.steps\n  Extra inputs are not permitted"):
        build(RoundPayload, inner)


def test_the_guard_records_each_undeclared_read(simulated):
    from envengineer.loop.payloads import RoundPayload, watched

    _, recorder, _ = simulated
    misses: list[str] = []
    metrics = watched(RoundPayload, recorder.of("round")[0][1], misses)
    assert metrics["valid_rate"] == metrics.get("valid_rate") and metrics["validation"]["overall"].get("n") and misses == []
    assert metrics["signal"]["by"]["size"]["3x3"].get("kept") is not None and misses == []
    assert metrics["config"].get("anything") is None and misses == []  # a free-form part: the task's own config
    metrics.get("valid_rat")
    "steps" in metrics["train"]
    metrics["validation"]["by"]["size"]["3x3"].get("valid_frac")
    metrics["signal"]["overall"].get("success_rate")
    assert misses == ["RoundPayload.valid_rat", "RoundPayload.train.steps", "RoundPayload.validation.by.size.3x3.valid_frac",
                      "RoundPayload.signal.overall.success_rate"]


@pytest.mark.parametrize("name", ["tensorboard", "wandb", "mlflow"])
def test_every_built_in_tracker_reads_only_declared_fields(simulated, name, tmp_path, monkeypatch):
    """Each built-in tracker, on a whole run's payloads (and a design step that reports tokens), reads no key
    its payload's model does not declare: a key read but never built would be a chart that is never drawn.
    The reads counted are envengineer's (the trackers and their helpers), not the libraries they hand data to."""
    pytest.importorskip(name)
    from envengineer.loop.payloads import PAYLOADS, watched
    from envengineer.registry import load_registry
    from envengineer.store.rundir import RunDir
    from envengineer.loop.trackers import TrackerSet

    for variable in ("WANDB_RUN_ID", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_ID"):
        monkeypatch.delenv(variable, raising=False)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    _, recorder, _ = simulated
    events = list(recorder.events)
    design = dict(recorder.of("design")[0][1])
    design["tokens"] = {"prompt": 1300, "completion": 240, "reasoning": 50, "total": 1540}
    events.insert(events.index(("design", 0, recorder.of("design")[0][1])) + 1, ("design", 0, design))
    tracker = load_registry().create("tracker", name, {})
    trackers = TrackerSet([tracker])
    run_dir = RunDir(tmp_path / "run")
    run_dir.path.mkdir()
    misses: list[str] = []
    for kind, round, payload in events:
        hook = HOOK_KIND[kind]
        argument, model = PAYLOADS[hook]
        trackers.call(hook, run_dir=run_dir, config=None, round=round, **{argument: watched(model, payload, misses, readers=("envengineer", __name__))})
    assert trackers.disabled == {} and trackers.names == [name]
    assert misses == []
    assert any(path.is_file() for path in run_dir.path.rglob("*"))  # it did log the run


def _doc_tables() -> dict[str, dict[str, str]]:
    """``{hook: {key: what}}`` of the payload tables in docs/writing-a-plugin.md (``\\`info\\` (\\`on_run_start\\`):``, then a table)."""
    import re

    text = (ROOT / "docs" / "writing-a-plugin.md").read_text(encoding="utf-8")
    section = text.split("## Lifecycle hooks and their payloads", 1)[1].split("\n## ", 1)[0]
    tables: dict[str, dict[str, str]] = {}
    for match in re.finditer(r"^`(\w+)` \(`(on_\w+)`[^\n]*:\n\n((?:\|[^\n]*\n)+)", section, re.M):
        rows = {}
        for line in match.group(3).splitlines()[2:]:
            first, what = line.strip("|").split("|", 1)
            for key in re.findall(r"`(\w+)`", first):
                rows[key] = what
        tables[match.group(2)] = rows
    return tables


def _nested_models(annotation) -> list:
    import typing

    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _nested_models(arg)]


def test_the_plugin_guide_lists_every_payload_field_and_no_other():
    import re

    from envengineer.loop.payloads import PAYLOADS, Evaluation

    tables = _doc_tables()
    assert set(tables) == set(PAYLOADS)
    for hook, (_, model) in PAYLOADS.items():
        assert set(tables[hook]) == set(model.model_fields), hook
        for key, field in model.model_fields.items():
            named = set(re.findall(r"\w+", " ".join(re.findall(r"`([^`]*)`", " ".join(tables[hook].values())))))
            todo = [m for m in _nested_models(field.annotation) if m is not Evaluation]  # Evaluation: the benchmark table
            while todo:
                nested = todo.pop()
                assert set(nested.model_fields) <= named, f"{hook}: {key}: {sorted(set(nested.model_fields) - named)} not in the guide"
                todo += [m for f in nested.model_fields.values() for m in _nested_models(f.annotation)]


# ------------------------------------------------------------------ a tracker that fails never fails the run


class Fragile(Tracker):
    name = "fragile"
    description = "a test tracker whose writer raises at the first round's end"
    seen: list = []

    @hookimpl
    def on_run_start(self, info):
        Fragile.seen.append("start")

    @hookimpl
    def on_round_end(self, round, metrics):
        Fragile.seen.append(("round", round))
        raise OSError(f"the writer's disk is gone (key {os.environ.get('TEST_API_KEY')})")

    @hookimpl
    def on_run_end(self, metrics):
        Fragile.seen.append("end")

    def close(self):
        Fragile.seen.append("closed")


class Steady(Tracker):
    name = "steady"
    description = "a test tracker that keeps every payload"
    seen: list = []

    @hookimpl
    def on_round_end(self, round, metrics):
        Steady.seen.append(round)

    @hookimpl
    def on_run_end(self, metrics):
        Steady.seen.append(metrics["status"])


class Misnamed(Tracker):
    name = "misnamed"
    description = "a test tracker with a hook name that no hook has"

    @hookimpl
    def on_round_ends(self, round, metrics):
        raise AssertionError("never called")


class TestTrackers:
    @hookimpl
    def register_trackers(self, register):
        for tracker in (Fragile, Steady, Misnamed):
            register(tracker)


def test_a_tracker_whose_writer_raises_is_disabled_with_one_warning(tmp_path, caplog, monkeypatch):
    monkeypatch.setenv("TEST_API_KEY", "sk-very-secret-value")
    Fragile.seen, Steady.seen = [], []
    caplog.set_level(logging.WARNING)
    loop = _loop({**SIM, "output": str(tmp_path / "run"), "trackers": ["fragile", "steady"]}, TestTrackers())
    rows = loop.run_all()
    assert [row["round"] for row in rows] == ["base", 0, 1]
    [warning] = _tracker_warnings(caplog)
    assert warning.startswith("tracker fragile disabled for the rest of the run: on_round_end raised OSError: the writer's disk is gone")
    assert "sk-very-secret-value" not in warning and "[REDACTED]" in warning
    assert Fragile.seen == ["start", ("round", 0), "closed"]  # not called again after it failed; closed once
    assert Steady.seen == [0, 1, "finished"]  # the other tracker saw everything


def test_a_tracker_with_a_misnamed_hook_is_left_out_with_one_warning(tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    _loop({**SIM, "rounds": 1, "output": str(tmp_path / "run"), "trackers": ["misnamed"]}, TestTrackers()).run_all()
    [warning] = _tracker_warnings(caplog)
    assert "tracker misnamed disabled" in warning and "did you mean on_round_end?" in warning


def test_a_missing_package_disables_the_tracker_with_the_extra_to_install(tmp_path, caplog, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # import mlflow raises ImportError
    monkeypatch.setitem(sys.modules, "mlflow.tracking", None)
    caplog.set_level(logging.WARNING)
    rows = _loop({**SIM, "rounds": 1, "output": str(tmp_path / "run"), "trackers": ["mlflow"]}).run_all()
    assert [row["round"] for row in rows] == ["base", 0]
    assert _tracker_warnings(caplog) == [
        'tracker mlflow disabled for the rest of the run: mlflow is not installed (pip install "envengineer[mlflow]") '
        "(the run goes on; its directory holds everything)"]


def test_wandb_online_without_a_key_is_disabled_never_prompting(tmp_path, caplog, monkeypatch):
    pytest.importorskip("wandb")
    for name in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "netrc").write_text("")
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    monkeypatch.setattr("sys.stdin", open("/dev/null"))
    caplog.set_level(logging.WARNING)
    _loop({**SIM, "rounds": 1, "output": str(tmp_path / "run"), "trackers": ["wandb"]}).run_all()
    [warning] = _tracker_warnings(caplog)
    assert warning.startswith("tracker wandb disabled for the rest of the run: no W&B API key: set WANDB_API_KEY")
    assert "WANDB_MODE=offline" in warning and not (tmp_path / "run" / "wandb").exists()


# ------------------------------------------------------------------ the three trackers end to end (tiny policy, TRL)


def tiny_base(cache: Path) -> dict:
    """The smallest run that does every step (as tests/test_cpu_paper.py's): a 1-layer tiny policy warm-started on
    120 answers, one GRPO step a round, 6 instances of each evaluation set."""
    return {
        "name": "mini", "task": {"name": "mapf-frozenlake", "agents": 2, "prompt_style": "compact"}, "rounds": 2, "budget": 8,
        "context": {"preset": "V6"}, "engineer": {"name": "heuristic"},
        "policy": {"name": "tiny", "instances": 120, "epochs": 1, "hidden_size": 32, "layers": 1, "ffn": 64,
                   "max_new_tokens": 48, "cache_dir": str(cache)},
        "trainer": {"name": "trl", "max_steps": 1, "num_generations": 2, "per_device_train_batch_size": 4,
                    "max_completion_length": 32, "threads": 1},
        "eval": {"validation": "mapf-2agents-val", "benchmarks": ["mapf-3agents"], "limit": 6},
    }


def _wandb_records(run_dir: Path) -> list[dict]:
    """The offline run's ``.wandb`` transaction log, read by wandb's own reader (``wandb leet inspect --json``)."""
    [folder] = sorted((run_dir / "wandb").glob("offline-run-*"))
    done = subprocess.run([sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(folder)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


@pytest.fixture(scope="module")
def tracked(tmp_path_factory):
    """The smallest run that does every step (1-layer tiny policy, one GRPO step a round), logged to all three."""
    pytest.importorskip("trl")
    pytest.importorskip("tensorboard")
    pytest.importorskip("wandb")
    pytest.importorskip("mlflow")
    tmp = tmp_path_factory.mktemp("tracked")
    patch = pytest.MonkeyPatch()
    patch.setenv("WANDB_MODE", "offline")
    patch.setenv("WANDB_API_KEY", "x" * 40)  # never written anywhere (checked below)
    patch.setenv("WANDB_SILENT", "true")
    for name in ("WANDB_RUN_ID", "MLFLOW_TRACKING_URI", "MLFLOW_EXPERIMENT_NAME", "MLFLOW_RUN_ID"):
        patch.delenv(name, raising=False)
    recorder = Recorder()
    config = {**tiny_base(tmp / "cache"), "output": str(tmp / "run"), "seed": 3, "suite": {"table": "trackers", "row": "heuristic"},
              "trackers": ["tensorboard", "wandb", "mlflow"]}
    try:
        rows = _loop(config, recorder).run_all()
    finally:
        patch.undo()
    return tmp / "run", recorder, rows


def test_the_trl_trainer_wrote_its_steps_to_every_tracker(tracked):
    out, recorder, _ = tracked
    rounds = dict(recorder.of("round"))
    assert [rounds[r]["train"]["live_trackers"] for r in (0, 1)] == [["tensorboard", "wandb", "mlflow"]] * 2
    assert rounds[1]["train"]["step_offset"] == 1  # one optimizer step a round


def test_tensorboard_event_files_read_back(tracked):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out, recorder, _ = tracked
    rounds = dict(recorder.of("round"))
    acc = EventAccumulator(str(out / "tb"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    scalars = lambda tag: [(e.step, round(e.value, 6)) for e in acc.Scalars(tag)]  # noqa: E731
    assert scalars("validation/valid_rate") == [(r, round(rounds[r]["valid_rate"], 6)) for r in (0, 1)]
    assert scalars("validation/sum_over_subsets/valid") == [(r, round(rounds[r]["validation"]["aggregate"]["values"]["valid"], 6)) for r in (0, 1)]
    assert scalars("config/3x3/hole_ratio") == [(r, round(rounds[r]["knob_values"]["3x3"]["hole_ratio"], 6)) for r in (0, 1)]
    assert scalars("round/optimizer_steps") == [(0, 1.0), (1, 1.0)] and scalars("round/global_step") == [(0, 1.0), (1, 2.0)]
    assert [step for step, _ in scalars("signal/success")] == [0, 1]
    assert [step for step, _ in scalars("engineer/projection_changes")] == [0]
    assert [step for step, _ in scalars("bench/mapf-3agents/valid_rate")] == [1]
    assert [step for step, _ in scalars("base/bench/mapf-3agents/sum_over_subsets/valid")] == [0]
    assert [step for step, _ in scalars("base/validation/valid_rate")] == [0]
    # TRL's own step metrics, joined: round 0's step 1, round 1's step 1 at global step 2
    assert [step for step, _ in scalars("train/reward")] == [1, 2] and [step for step, _ in scalars("train/loss")] == [1, 2]
    assert not [t for t in acc.Tags()["scalars"] if t.startswith("curves/")]  # TRL wrote them: no second copy
    texts = {tag: acc.Tensors(tag) for tag in ("engineer/notes", "config/yaml", "run/config")}
    notes = texts["engineer/notes"][0].tensor_proto.string_val[0].decode()
    assert recorder.of("design")[0][1]["notes"] in notes
    assert [e.step for e in texts["config/yaml"]] == [0, 1]
    assert "sizes:" in texts["config/yaml"][1].tensor_proto.string_val[0].decode()
    assert "_hparams_/session_start_info" in acc.PluginTagToContent("hparams")


def test_tensorboards_server_serves_the_rates_and_trls_loss_to_its_dashboard(tracked):
    """TensorBoard's own server (``tensorboard --logdir``'s) on the run's files answers the Scalars
    dashboard's requests with the per-round validation rate and TRL's loss at the joined steps
    (scripts/tensorboard_figure.py draws the same answers)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("tensorboard_figure", ROOT / "scripts" / "tensorboard_figure.py")
    figure = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(figure)
    out, recorder, _ = tracked
    rounds = dict(recorder.of("round"))
    served = figure.scalars(figure.serve(out / "tb"), ["validation/valid_rate", "train/loss"])
    (rates,) = served["validation/valid_rate"].values()
    assert [(step, round(value, 6)) for step, value in rates] == [(r, round(rounds[r]["valid_rate"], 6)) for r in (0, 1)]
    (loss,) = served["train/loss"].values()
    assert [step for step, _ in loss] == [1, 2]
    with pytest.raises(SystemExit, match="no run holds the tag 'train/nothing'.*validation/valid_rate"):
        figure.scalars(figure.serve(out / "tb"), ["train/nothing"], attempts=2)


def test_wandb_offline_run_reads_back(tracked):
    out, recorder, _ = tracked
    records = _wandb_records(out)
    [run] = [r["run"] for r in records if r["type"] == "run"]
    assert run["display_name"] == "heuristic/seed-3" and run["run_group"] == "trackers" and run["project"] == "envengineer"
    assert run["config"]["update"]["run"]["name"] == "mini"
    assert json.loads((out / "trackers/wandb.json").read_text())["run_id"] == run["run_id"]
    history = [r["history"]["item"] for r in records if r["type"] == "history"]
    rounds = dict(recorder.of("round"))
    valid = [(row["round"], row["validation/valid_rate"]) for row in history if "validation/valid_rate" in row]
    assert valid == [(r, rounds[r]["valid_rate"]) for r in (0, 1)]
    knobs = [(row["round"], row["config/3x3/wait_ratio"]) for row in history if "config/3x3/wait_ratio" in row]
    assert knobs == [(r, rounds[r]["knob_values"]["3x3"]["wait_ratio"]) for r in (0, 1)]
    assert [(row["round"], row["engineer/notes._type"]) for row in history if "engineer/notes._type" in row] == [(0, "table-file")]
    assert [row["round"] for row in history if "bench/mapf-3agents/valid_rate" in row] == [1]
    assert [row["train/global_step"] for row in history if "train/reward" in row] == [1, 2]
    metrics = {r["metric"].get("glob_name") or r["metric"].get("name"): r["metric"].get("step_metric") for r in records if r["type"] == "metric"}
    assert metrics["validation/*"] == "round" and metrics["config/*"] == "round" and metrics["*"] == "train/global_step"  # the last, TRL's
    assert any(r["type"] == "exit" and r["exit"].get("exit_code", 0) == 0 for r in records)
    table = [p for p in (out / "wandb").glob("offline-run-*/files/media/table/engineer/notes_*.table.json")]
    assert table and recorder.of("design")[0][1]["notes"] in json.loads(table[-1].read_text())["data"][0][4]


def test_mlflow_store_reads_back(tracked):
    from mlflow.tracking import MlflowClient

    out, recorder, _ = tracked
    state = json.loads((out / "trackers/mlflow.json").read_text())
    assert state["tracking_uri"] == f"sqlite:///{out / 'mlflow' / 'mlflow.db'}"
    client = MlflowClient(state["tracking_uri"])
    run = client.get_run(state["run_id"])
    assert run.info.status == "FINISHED" and run.info.run_name == "heuristic/seed-3"
    tags = run.data.tags
    assert (tags["envengineer.table"], tags["envengineer.arm"], tags["envengineer.seed"], tags["envengineer.status"]) == ("trackers", "heuristic", "3", "finished")
    params = run.data.params
    assert params["name"] == "mini" and params["trainer.name"] == "trl" and params["suite.table"] == "trackers" and params["trackers"] == '["tensorboard", "wandb", "mlflow"]'
    history = lambda key: [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, key)]  # noqa: E731
    rounds = dict(recorder.of("round"))
    assert history("validation/valid_rate") == [(r, rounds[r]["valid_rate"]) for r in (0, 1)]
    assert history("config/3x3/ratio") == [(r, rounds[r]["knob_values"]["3x3"]["ratio"]) for r in (0, 1)]
    assert [s for s, _ in history("reward")] == [1, 2]  # TRL's MLflow callback, joined
    assert [s for s, _ in history("bench/mapf-3agents/optimal_rate")] == [1]
    artifacts = {a.path for folder in ("", "config", "engineer") for a in client.list_artifacts(run.info.run_id, folder or None)}
    assert {"run.yaml", "config/round-00.yaml", "config/round-01.yaml", "engineer/round-00.md"} <= artifacts
    assert yaml.safe_load(Path(client.download_artifacts(run.info.run_id, "config/round-01.yaml", str(out.parent / "dl"))).read_text()) == rounds[1]["config"]


def test_no_key_reaches_a_file(tracked):
    out, _, _ = tracked
    for path in out.rglob("*"):
        if path.is_file():
            assert b"x" * 40 not in path.read_bytes(), path


# ------------------------------------------------------------------ verl: its own loggers, checked against its schema


def test_verl_logs_to_the_run_trackers_through_its_own_loggers(tmp_path):
    pytest.importorskip("verl")
    pytest.importorskip("hydra")
    from envengineer.plugins.trainers.verl_config import ENV_PREFIX
    from envengineer.registry import load_registry
    from envengineer.components.training import TrainRequest

    trainer = load_registry().create("trainer", "verl", {"preset": "paper-4xh100", "env": {"WANDB_MODE": "offline"}})
    trackers = {
        "tensorboard": {"log_dir": str(tmp_path / "run" / "tb"), "name": "arm/seed-0"},
        "wandb": {"run_id": "abc12345", "project": "proj", "entity": None, "group": "tbl", "name": "arm/seed-0",
                  "dir": str(tmp_path / "run"), "mode": "online"},
        "mlflow": {"tracking_uri": f"sqlite:///{tmp_path}/run/mlflow/mlflow.db", "run_id": "r1", "experiment_id": "1", "name": "arm/seed-0"},
        "mine": {"anything": 1},  # a third-party tracker: verl has no logger for it
    }
    req = TrainRequest(policy_path=tmp_path / "model", records=[], generator=None, validator=None, out_dir=tmp_path / "round",
                       seed=0, round=2, trackers=trackers, step_offset=10)
    overrides = trainer.overrides(req, 4000)
    cfg = trainer.check(overrides)  # verl's Hydra config and validate_config accept it
    assert list(cfg.trainer.logger) == ["console", "tensorboard", "wandb", "mlflow", "file"]
    assert cfg.trainer.project_name == "proj" and cfg.trainer.experiment_name == "arm/seed-0/round-02"
    env = dict(cfg.ray_kwargs.ray_init.runtime_env.env_vars)
    assert env["TENSORBOARD_DIR"] == str(tmp_path / "run" / "tb" / "verl" / "round-02")
    assert (env["WANDB_RUN_GROUP"], env["WANDB_JOB_TYPE"], env["WANDB_DIR"]) == ("tbl", "verl-round", str(tmp_path / "run"))
    assert env["WANDB_MODE"] == "offline"  # the trainer's own env wins, and each key is given once
    assert sum(item.startswith(f"{ENV_PREFIX}WANDB_MODE=") for item in overrides) == 1
    assert env["MLFLOW_TRACKING_URI"] == trackers["mlflow"]["tracking_uri"]
    assert trainer.environment(req)["TENSORBOARD_DIR"] == env["TENSORBOARD_DIR"]
    # no tracker: the command line is as it was
    plain = trainer.overrides(TrainRequest(policy_path=tmp_path / "model", records=[], generator=None, validator=None,
                                           out_dir=tmp_path / "round", seed=0, round=2), 4000)
    assert "trainer.logger=[console,file]" in plain and "trainer.experiment_name=round-02" in plain
    assert not [item for item in plain if any(key in item for key in ("TENSORBOARD_DIR", "WANDB_RUN_GROUP", "WANDB_DIR", "MLFLOW_"))]
    # a tracking URI holding credentials stays out of the command line
    secret = {**trackers, "mlflow": {**trackers["mlflow"], "tracking_uri": "https://user:pw@mlflow.example"}}
    assert "MLFLOW_TRACKING_URI" not in trainer.tracker_env(TrainRequest(
        policy_path=tmp_path / "model", records=[], generator=None, validator=None, out_dir=tmp_path / "round", trackers=secret))


def test_a_resumed_run_continues_the_same_tracker_runs(tmp_path, monkeypatch):
    """Killed after round 0, then resumed: the same MLflow run (its id kept in trackers/mlflow.json), each round's
    metrics once, and TensorBoard's event files of both processes read as one run. Each run in a process logs to its
    own store (MLflow exports the URI it is given; the tracker takes it back)."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    pytest.importorskip("mlflow")
    pytest.importorskip("tensorboard")
    from mlflow.tracking import MlflowClient
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    class Killed(BaseException):
        """Stands for the process dying."""

    class KillAt:
        @hookimpl
        def on_step_end(self, step, round):
            if (step, round) == ("train", 1):
                raise Killed()

    config = {**SIM, "output": str(tmp_path / "run"), "trackers": ["tensorboard", "mlflow"]}
    with pytest.raises(Killed):
        _loop(config, KillAt()).run_all()
    first = json.loads((tmp_path / "run/trackers/mlflow.json").read_text())
    assert first["tracking_uri"] == f"sqlite:///{tmp_path / 'run' / 'mlflow' / 'mlflow.db'}" and "MLFLOW_TRACKING_URI" not in os.environ
    client = MlflowClient(first["tracking_uri"])
    assert client.get_run(first["run_id"]).info.status == "KILLED"  # on_run_end said interrupted
    _loop(config).run_all()
    state = json.loads((tmp_path / "run/trackers/mlflow.json").read_text())
    assert state["run_id"] == first["run_id"]
    run = client.get_run(state["run_id"])
    assert run.info.status == "FINISHED" and len(client.search_runs([run.info.experiment_id])) == 1
    assert [m.step for m in client.get_metric_history(state["run_id"], "validation/valid_rate")] == [0, 1]
    assert [m.step for m in client.get_metric_history(state["run_id"], "engineer/fallback")] == [0]
    acc = EventAccumulator(str(tmp_path / "run/tb"), size_guidance={"scalars": 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("validation/valid_rate")] == [0, 1]
    assert [e.step for e in acc.Scalars("base/validation/valid_rate")] == [0]


def test_a_trainer_that_did_not_report_gets_its_curves_logged_at_the_global_steps(tmp_path):
    """verl (or any trainer that wrote no step metrics to the tracker): the tracker logs the round's curves.jsonl
    as curves/* at the step offset plus the step within the round."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from envengineer.plugins.trackers.tensorboard_tracker import TensorBoardTracker
    from envengineer.store.rundir import RunDir
    from envengineer.loop.trackers import curve_points

    curves = [{"step": 1, "reward_mean": 0.25, "kl": None, "seconds": 3.0}, {"step": 2, "reward_mean": 0.5, "kl": 0.01, "seconds": 6.0}]
    metrics = {"round": 3, "train": {"step_offset": 40, "live_trackers": []}, "curves": curves}
    assert curve_points(metrics) == [(41, {"curves/reward_mean": 0.25}), (42, {"curves/reward_mean": 0.5, "curves/kl": 0.01})]
    tracker = TensorBoardTracker()
    tracker.on_run_start(RunDir(tmp_path), {"name": "r", "seed": 0, "config": {"name": "r"}})
    assert tracker.trainer_settings() == {"log_dir": str(tmp_path / "tb"), "name": "r/seed-0"}
    tracker.on_round_end(3, metrics)
    tracker.on_round_end(4, {"round": 4, "train": {"step_offset": 42, "live_trackers": ["tensorboard"]}, "curves": curves})
    tracker.on_run_end({"status": "finished"})
    acc = EventAccumulator(str(tmp_path / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    assert [(e.step, e.value) for e in acc.Scalars("curves/reward_mean")] == [(41, 0.25), (42, 0.5)]  # round 4's trainer wrote its own


# ------------------------------------------------------------------ a tracker named on a finished run: its steps replayed, once


class Keeper(Tracker):
    name = "keeper"
    description = "a test tracker that keeps every payload it is given"
    seen: list = []

    @hookimpl
    def on_benchmark_end(self, round, benchmark):
        Keeper.seen.append(("benchmark", round, benchmark))

    @hookimpl
    def on_design_end(self, round, design):
        Keeper.seen.append(("design", round, design))

    @hookimpl
    def on_round_end(self, round, metrics):
        Keeper.seen.append(("round", round, metrics))

    @hookimpl
    def on_run_end(self, metrics):
        Keeper.seen.append(("end", None, metrics))


class KeeperPlugin:
    @hookimpl
    def register_trackers(self, register):
        register(Keeper)


def test_a_tracker_named_on_a_finished_run_gets_the_recorded_steps_once(tmp_path):
    """Added to a finished run's command, a tracker is given the steps the run directory records, with the very
    payloads the steps gave, each once: a second run of the same command replays nothing; plugins' hooks (which saw
    the steps) are not called again."""
    from envengineer.loop.trackers import read_logged

    live = Recorder()
    config = {**SIM, "output": str(tmp_path / "run")}
    _loop(config, live).run_all()
    assert read_logged(tmp_path / "run") is None  # no tracker, no record
    Keeper.seen = []
    plugin = Recorder()
    _loop({**config, "trackers": ["keeper"]}, KeeperPlugin(), plugin).run_all()
    assert [k for k, _, _ in plugin.events] == ["start", "end"]
    assert Keeper.seen[:-1] == [event for event in live.events if event[0] not in ("start", "end")]  # the same payloads, in order
    assert Keeper.seen[-1][0] == "end"
    logged = read_logged(tmp_path / "run")
    assert logged == {"keeper": ["validation/base/mapf-2agents-val", "benchmark/base/mapf-3agents", "design/0", "round/0",
                                 "benchmark/1/mapf-3agents", "round/1"]}
    Keeper.seen = []
    _loop({**config, "trackers": ["keeper"]}, KeeperPlugin()).run_all()
    assert [k for k, _, _ in Keeper.seen] == ["end"] and read_logged(tmp_path / "run") == logged


def test_a_run_recorded_before_the_record_replays_to_the_trackers_it_did_not_name(tmp_path):
    """A run directory without trackers/logged.json (recorded by an earlier version): the trackers its run.yaml names
    (the last process's) or that keep a state file there count as having logged it; any other is replayed."""
    from envengineer.loop.trackers import logged_path

    config = {**SIM, "rounds": 1, "output": str(tmp_path / "run"), "trackers": ["keeper"]}
    _loop(config, KeeperPlugin()).run_all()
    logged_path(tmp_path / "run").unlink()
    Keeper.seen = []
    _loop(config, KeeperPlugin()).run_all()
    assert [k for k, _, _ in Keeper.seen] == ["end"]  # run.yaml named it
    logged_path(tmp_path / "run").unlink()
    run_yaml = tmp_path / "run" / "run.yaml"
    run_yaml.write_text(yaml.safe_dump({**yaml.safe_load(run_yaml.read_text()), "trackers": []}))
    Keeper.seen = []
    _loop(config, KeeperPlugin()).run_all()
    assert [k for k, _, _ in Keeper.seen] == ["benchmark", "benchmark", "benchmark", "round", "end"]  # base: validation, bench; round 0: bench


def test_tensorboard_added_to_a_finished_run_shows_its_rounds(tmp_path):
    """docs/trackers.md's quickstart in TensorBoard, after the quickstart ran without trackers: the dashboard has
    every round's rates, the base policy's, the knobs and the training signal, once each however often the
    command is run (the curves of a trainer that wrote none live: test_a_trainer_that_did_not_report...); scripts/tensorboard_figure.py reads them from TensorBoard's server."""
    pytest.importorskip("tensorboard")
    import importlib.util

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    live = Recorder()
    config = {**SIM, "output": str(tmp_path / "run")}
    _loop(config, live).run_all()
    assert not (tmp_path / "run" / "tb").exists()
    for _ in range(2):
        _loop({**config, "trackers": ["tensorboard"]}).run_all()
    rounds = dict(live.of("round"))
    acc = EventAccumulator(str(tmp_path / "run" / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    scalars = lambda tag: [(e.step, round(e.value, 6)) for e in acc.Scalars(tag)]  # noqa: E731
    assert scalars("validation/valid_rate") == [(r, round(rounds[r]["valid_rate"], 6)) for r in (0, 1)]
    assert [s for s, _ in scalars("base/validation/valid_rate")] == [0]
    assert [s for s, _ in scalars("bench/mapf-3agents/valid_rate")] == [1] and [s for s, _ in scalars("engineer/projection_changes")] == [0]
    assert scalars("config/3x3/hole_ratio") == [(r, round(rounds[r]["knob_values"]["3x3"]["hole_ratio"], 6)) for r in (0, 1)]
    assert [s for s, _ in scalars("signal/success")] == [0, 1]
    spec = importlib.util.spec_from_file_location("tensorboard_figure", ROOT / "scripts" / "tensorboard_figure.py")
    figure = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(figure)
    served = figure.scalars(figure.serve(tmp_path / "run" / "tb"), ["validation/valid_rate", "signal/success"])
    assert [s for run in served["validation/valid_rate"].values() for s, _ in run] == [0, 1]
