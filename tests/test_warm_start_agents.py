"""mapf-frozenlake's multi-agent warm start (``task.warm_start_agents``) and the loop's cache of
base-model evaluations (the arms of a suite share one base)."""

import hashlib
import json
from pathlib import Path

import pytest
from rich.console import Console

pytest.importorskip("torch")
pytest.importorskip("transformers")

from envengineer.errors import ConfigError  # noqa: E402
from envengineer.loop.steps import Loop  # noqa: E402
from envengineer.loop.runconfig import load_run_config, parse_run_config, resolve  # noqa: E402
from envengineer.tasks.mapf_frozenlake.warm_start import warm_start_pairs  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def test_the_default_pairs_are_those_the_shipped_base_was_trained_on():
    pairs = warm_start_pairs(n=400, seed=0)
    digest = hashlib.sha256(json.dumps(pairs).encode()).hexdigest()
    assert digest == "65e007763dee6cb6cce4eb23e6d9329c5f901af1c9dfcb963b9102025a681000"
    assert warm_start_pairs(n=400, seed=0, agents=[2]) == pairs


def test_agent_counts_are_drawn_in_turn_on_sizes_that_fit():
    counts = (2, 3, 2, 4, 2, 5)
    pairs = warm_start_pairs(n=120, seed=3, agents=counts)
    assert pairs == warm_start_pairs(n=120, seed=3, agents=counts)
    for index, (prompt, answer) in enumerate(pairs):
        words = prompt.split()
        k = counts[index % len(counts)]
        assert sum(w.startswith("S") for w in words) == k, prompt
        starts = [words[words.index(f"S{i}") + 1] for i in range(1, k + 1)]
        goals = [words[words.index(f"G{i}") + 1] for i in range(1, k + 1)]
        steps = [step.split() for step in answer.strip("| ").split(" | ")]
        assert all(len(step) == k for step in steps), answer
        assert steps[-1] == goals and steps[0] != starts  # the answer lists the moves after the start
    five = [p for i, (p, _) in enumerate(pairs) if counts[i % len(counts)] == 5]
    assert not any(p.startswith("N3 ") for p in five)  # a 3x3 map cannot hold 5 starts and goals
    assert {p.split()[0] for p in five} >= {"N4", "N10"}


def test_bad_agent_counts_are_refused_by_name(registry):
    base = REPO / "examples" / "cpu-paper" / "base.yaml"
    with pytest.raises(ConfigError, match=r"task.warm_start_agents: .*S1-S8.*, got \[9\]"):
        resolve(load_run_config(base, ["task.warm_start_agents=[2, 9]"]), registry)
    with pytest.raises(ConfigError, match="warm_start_agents"):
        resolve(load_run_config(base, ["task.warm_start_agents=[]"]), registry)


def test_the_agent_counts_enter_the_base_models_key_only_when_not_the_default(registry):
    quick = resolve(load_run_config(REPO / "examples" / "quickstart.yaml"), registry)
    assert "task_options" not in quick.policy.recipe(quick.generator)
    assert quick.policy.prebuilt_dir(quick.generator) is not None  # the shipped base still matches
    mixed = resolve(load_run_config(REPO / "examples" / "quickstart.yaml", ["task.warm_start_agents=[2, 3]"]), registry)
    assert mixed.policy.recipe(mixed.generator)["task_options"] == {"warm_start_agents": [2, 3]}
    assert mixed.policy.prebuilt_dir(mixed.generator) is None
    assert mixed.policy.cache_path(mixed.generator) != quick.policy.cache_path(quick.generator)


def small_run(tmp_path: Path, output: str, **policy) -> dict:
    return {
        "name": "cache", "task": {"name": "mapf-frozenlake", "agents": 2, "prompt_style": "compact", "warm_start_agents": [2, 3]},
        "rounds": 1, "seed": 0, "budget": 8, "engineer": {"name": "fixed"},
        "policy": {"name": "tiny", "instances": 60, "epochs": 1, "hidden_size": 32, "layers": 1, "ffn": 64,
                   "max_new_tokens": 40, "cache_dir": str(tmp_path / "tiny"), **policy},
        "trainer": {"name": "trl", "max_steps": 1, "num_generations": 2, "per_device_train_batch_size": 4, "max_completion_length": 32},
        "eval": {"validation": "mapf-2agents-val", "benchmarks": ["mapf-3agents"], "limit": 5},
        "output": str(tmp_path / output),
    }


def base_eval(tmp_path: Path, registry, output: str, **policy) -> tuple[Loop, str]:
    console = Console(record=True, width=250)
    loop = Loop(resolve(parse_run_config(small_run(tmp_path, output, **policy)), registry), registry, console)
    loop.start()
    loop.pretrain()
    loop.base_eval()
    return loop, console.export_text()


def test_a_base_evaluation_is_reused_for_the_same_weights_records_and_options(tmp_path, registry, monkeypatch):
    monkeypatch.setenv("ENVENGINEER_CACHE", str(tmp_path / "cache"))
    first, said = base_eval(tmp_path, registry, "a")
    assert "reused" not in said
    assert len(list((tmp_path / "cache" / "evals").iterdir())) == 2  # validation and the benchmark
    second, said = base_eval(tmp_path, registry, "b")
    assert said.count("reused from") == 2
    for relative in ("base/eval", "base/bench/mapf-3agents"):
        for name in ("verdicts.jsonl", "responses.jsonl", "summary.json"):
            a = first.dir.path / relative / name
            assert a.read_bytes() == (second.dir.path / relative / name).read_bytes(), a
    history = [json.loads(line) for line in second.dir.history_path.read_text().splitlines()]
    assert [h["step"] for h in history] == ["pretrain", "base_eval"]
    # other sampling options are other answers: evaluated afresh
    _, said = base_eval(tmp_path, registry, "c", max_new_tokens=24)
    assert "reused" not in said and len(list((tmp_path / "cache" / "evals").iterdir())) == 4


def test_the_reuse_key_covers_every_module_of_the_tasks_package(tmp_path, registry, monkeypatch):
    """Not only the validator's own file: an edit to MAPF's answer.py or prompts.py, or the fast sampler, is a new key."""
    from envengineer.loop import evaluation
    from envengineer.loop.evaluation import code_fingerprint, package_roots, reuse_key

    monkeypatch.setenv("ENVENGINEER_CACHE", str(tmp_path / "cache"))
    loop, _ = base_eval(tmp_path, registry, "a")
    policy = loop.run.policy.with_path(loop.base_path()) if hasattr(loop.run.policy, "with_path") else loop.run.policy
    key = reuse_key(loop.run, policy)
    assert key["code"] == code_fingerprint((loop.run.validator, loop.run.generator, policy, evaluation))
    roots = {root for obj in (loop.run.validator, policy) for root in package_roots(obj)}
    covered = [path for root in roots for path in root.rglob("*.py")]
    names = {path.name for path in covered}
    assert {"answer.py", "prompts.py", "fast_sampler.py", "metrics.py"} <= names


def test_a_fingerprint_changes_with_any_module_of_the_package(tmp_path, monkeypatch):
    import importlib
    import sys

    from envengineer.loop.evaluation import FINGERPRINT_MAX_BYTES, code_fingerprint

    package = tmp_path / "stale_task_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "validator.py").write_text("from stale_task_pkg.answer import parse\n\nclass V:\n    pass\n")
    (package / "answer.py").write_text("def parse(text):\n    return text.strip()\n")
    (package / "weights.bin").write_bytes(b"\0" * (FINGERPRINT_MAX_BYTES + 1))
    monkeypatch.syspath_prepend(str(tmp_path))
    validator = importlib.import_module("stale_task_pkg.validator").V()
    before = code_fingerprint([validator])
    assert code_fingerprint([validator]) == before  # deterministic
    (package / "weights.bin").write_bytes(b"\1" * (FINGERPRINT_MAX_BYTES + 1))  # large data: not code
    assert code_fingerprint([validator]) == before
    (package / "answer.py").write_text("def parse(text):\n    return text\n")  # a module the validator calls
    assert code_fingerprint([validator]) != before
    sys.modules.pop("stale_task_pkg.validator", None)
    sys.modules.pop("stale_task_pkg.answer", None)
    sys.modules.pop("stale_task_pkg", None)
