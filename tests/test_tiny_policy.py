"""The embedded tiny policy: tokenizer, model directory, a miniature warm start."""

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from envengineer.plugins.policies import tiny_model  # noqa: E402
from envengineer.tasks.mapf_frozenlake.prompts import compact_answer, compact_to_answer  # noqa: E402


@pytest.fixture(scope="module")
def task():
    from envengineer.registry import load_registry

    return load_registry(entry_points=False).task("mapf-frozenlake", {"agents": 2})


@pytest.fixture(scope="module")
def warm(tmp_path_factory, task):
    """A base model from a 40-instance, 1-epoch warm start (seconds on CPU)."""
    import torch

    torch.set_num_threads(2)
    from envengineer.registry import load_registry

    policy = load_registry(entry_points=False).create(
        "policy", "tiny", {"instances": 40, "epochs": 1, "cache_dir": str(tmp_path_factory.mktemp("tiny-cache")), "max_new_tokens": 24}
    )
    calls = []
    path = policy.prepare(generator=task[0], progress=lambda stage, done, total: calls.append((stage, done, total)))
    return policy, path, calls


def test_tokenizer_round_trips_compact_prompts_and_answers(task):
    generator, _ = task
    tokenizer = tiny_model.build_tokenizer()
    records = generator.generate(generator.default_config(), n=24, seed=3).records
    for record in records:
        prompt = generator.render(record, "compact")
        answer = tiny_model.compact_reference(generator, record)
        for text in (prompt, answer):
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
            assert tokenizer.unk_token_id not in ids
            assert tokenizer.decode(ids) == text
        # the decoded completion (EOS skipped) scores as the optimal answer
        ids = tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        decoded = tokenizer.decode(ids, skip_special_tokens=True)
        verdict = task[1].score(record, generator.decode_response(record, decoded, "compact"))
        assert verdict.valid and verdict.optimal


def test_compact_reference_matches_the_prompt_helpers():
    paths = [[(0, 0), (0, 1)], [(1, 1), (1, 1), (1, 0)]]
    text = compact_answer(paths)
    assert text == "| 0_1 1_1 | 0_1 1_0"  # from t = 1: the starts are in the prompt
    assert "Agent 2: (1,1) -> (1,1) -> (1,0)" in compact_to_answer(text, [(0, 0), (1, 1)])
    assert "Agent 1: (0,0) -> (0,1) -> (0,1)" in compact_to_answer(text, [(0, 0), (1, 1)])
    assert "Agent" not in compact_to_answer("| 0_1", [(0, 0), (1, 1)])  # wrong arity: parse failure


def test_compact_answer_ends_where_every_agent_stands_on_its_goal(task):
    starts, goals = [(0, 0), (1, 1)], [(0, 1), (1, 0)]
    # reaches both goals at t = 2, then stalls and never emits a well-formed tail: the plan ends at t = 2
    text = "| 0_1 1_1 | 0_1 1_0 | 0_1 1_0 | 0_1 1_0 | 0_1"
    answer = compact_to_answer(text, starts, goals)
    assert "Agent 1: (0,0) -> (0,1) -> (0,1)\n" in answer
    assert "Agent 2: (1,1) -> (1,1) -> (1,0)\n" in answer
    assert "Agent" not in compact_to_answer(text, starts)  # without goals the broken tail is a parse failure
    # an agent passing over its goal before the other arrives does not end the plan
    text = "| 0_0 1_0 | 0_0 1_1 | 0_1 1_0 | 9_9 9_9"
    assert answer_lines(compact_to_answer(text, starts, goals)) == [
        "Agent 1: (0,0) -> (0,0) -> (0,0) -> (0,1)", "Agent 2: (1,1) -> (1,0) -> (1,1) -> (1,0)"]
    # a plan that never gets there is unchanged, and malformed steps before the goal still fail to parse
    assert compact_to_answer("| 0_1 1_1", starts, goals) == compact_to_answer("| 0_1 1_1", starts)
    assert "Agent" not in compact_to_answer("| 0_1 | 0_1 1_0", starts, goals)
    # all agents already on their goals: the plan is the start cells, whatever follows
    assert answer_lines(compact_to_answer("| 5_5 5_5 garbage", goals, goals)) == ["Agent 1: (0,1)", "Agent 2: (1,0)"]
    # through the task: the cut answer scores valid, and no costlier than the same plan without the stall
    generator, validator = task
    record = next(r for r in generator.generate(generator.default_config(), n=40, seed=5).records if r["size"] >= 5)
    optimal = tiny_model.compact_reference(generator, record)
    stalled = optimal + " " + optimal.split("|")[-1].join(["|", ""]) * 3 + " | 0_0"
    verdict = validator.score(record, generator.decode_response(record, stalled, "compact"))
    assert verdict.valid and verdict.optimal


def answer_lines(answer: str) -> list[str]:
    return [line for line in answer.splitlines() if line.startswith("Agent")]


def test_warm_start_writes_a_standard_model_directory(warm):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    policy, path, calls = warm
    assert (path / "config.json").exists() and (path / "warm_start.json").exists()
    model = AutoModelForCausalLM.from_pretrained(path)
    tokenizer = AutoTokenizer.from_pretrained(path)
    assert model.config.model_type == "qwen3"
    assert 0.8e6 < sum(p.numel() for p in model.parameters()) < 1.3e6
    assert tokenizer.decode(tokenizer("N3 H S1 0_0 G1 2_2 P")["input_ids"]) == "N3 H S1 0_0 G1 2_2 P"
    assert calls and calls[-1][0] == "warm start" and calls[-1][1] == calls[-1][2]
    info = policy.warm_start_info()
    assert info["instances"] == 40 and info["train"]["steps"] >= 1


def test_prepare_is_cached_by_options(warm, task):
    import time

    policy, path, _ = warm
    stamp = (path / "warm_start.json").stat().st_mtime
    time.sleep(0.01)
    assert policy.prepare(generator=task[0]) == path
    assert (path / "warm_start.json").stat().st_mtime == stamp  # not rebuilt
    other = type(policy)(policy.options.model_copy(update={"epochs": 2.0}))
    assert other.base_dir() != path


def test_tiny_without_a_base_model_says_what_to_do(tmp_path):
    from envengineer.errors import ConfigError
    from envengineer.registry import load_registry

    policy = load_registry(entry_points=False).create("policy", "tiny", {"cache_dir": str(tmp_path)})
    with pytest.raises(ConfigError, match="pretrain"):
        policy.sample(["N3 H S1 0_0 G1 2_2 P"])
