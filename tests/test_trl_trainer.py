"""The ``trl`` trainer: one GRPO round on CPU writes a checkpoint and curves."""

import json

import pytest

pytest.importorskip("trl")

from envengineer.training import CURVE_KEYS, TrainRequest  # noqa: E402


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    import torch

    torch.set_num_threads(2)
    from envengineer.plugins.policies import tiny

    tokenizer = tiny.build_tokenizer()
    model = tiny.build_model(tokenizer, hidden_size=32, layers=1, ffn=64, seed=0)
    path = tmp_path_factory.mktemp("base")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_options_are_checked(registry):
    from envengineer.errors import ConfigError

    with pytest.raises(ConfigError, match="trainer.trl"):
        registry.create("trainer", "trl", {"num_generations": 3, "per_device_train_batch_size": 8})
    with pytest.raises(ConfigError, match="trainer.trl"):
        registry.create("trainer", "trl", {"learning_rat": 1e-4})


def test_grpo_config_passes_trl_fields_and_names_unknown_ones(registry, tmp_path):
    from envengineer.errors import ConfigError

    trainer = registry.create("trainer", "trl", {"grpo_config": {"adam_epsilon": "1e-4", "min_p": "5e-2", "warmup_steps": 3}, "learning_rate": 2e-5})
    config = trainer.grpo_config(tmp_path, seed=4)
    assert config.adam_epsilon == 1e-4 and config.min_p == 0.05 and config.warmup_steps == 3 and config.learning_rate == 2e-5 and config.seed == 4
    with pytest.raises(ConfigError, match="'adam_epsilonn'"):
        registry.create("trainer", "trl", {"grpo_config": {"adam_epsilonn": 1e-4}}).grpo_config(tmp_path, seed=0)
    with pytest.raises(ConfigError, match="grpo_config.adam_epsilon"):
        registry.create("trainer", "trl", {"grpo_config": {"adam_epsilon": "tiny"}}).grpo_config(tmp_path, seed=0)


def test_negative_advantages_can_be_weighted(registry):
    import torch

    from envengineer.errors import ConfigError
    from envengineer.plugins.trainers.trl_grpo import weight_negative_advantages

    advantages = torch.tensor([2.0, -0.5, 0.0, -1.0])
    assert weight_negative_advantages(advantages, 0.25).tolist() == [2.0, -0.125, 0.0, -0.25]
    assert weight_negative_advantages(advantages, 1.0).tolist() == advantages.tolist()
    assert registry.create("trainer", "trl", {"negative_advantage_weight": 0.0}).describe()["negative_advantage_weight"] == 0.0
    with pytest.raises(ConfigError, match="negative_advantage_weight"):
        registry.create("trainer", "trl", {"negative_advantage_weight": 1.5})


def test_tokens_after_the_answer_are_found(registry):
    from envengineer.plugins.policies import tiny
    from envengineer.plugins.trainers.trl_grpo import answer_tokens

    generator, _ = registry.task("mapf-frozenlake", {"agents": 2})
    record = {"agents": [{"start": [0, 0], "goal": [0, 1]}, {"start": [1, 1], "goal": [1, 0]}]}
    tokenizer = tiny.build_tokenizer()

    def keep(text: str) -> int | None:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        return answer_tokens(tokenizer, ids, lambda t: generator.answer_end(record, t, "compact"), [tokenizer.eos_token_id])

    assert keep("| 0_1 1_1 | 0_1 1_0 | 0_1 1_0 | 0_1") == 6  # the stall after the goal step leaves the loss
    assert keep("| 0_1 1_1 | 0_1 1_0 </s> | 0_1 1_0") == 7  # ... but a stop right after it stays in
    assert keep("| 0_1 1_1 | 0_1 1_0 </s>") is None  # nothing after the answer
    assert keep("| 0_1 1_1 | 0_0 1_1 | 5_5") is None  # never reaches the goals: all of it counts
    assert generator.answer_end(record, "| 0_1 1_0 | 3_3 3_3", "full") is None


def test_describe_for_the_t_module(registry):
    details = registry.create("trainer", "trl", {"beta": 0.001, "learning_rate": 1e-4}).describe()
    assert details["kl_coef"] == 0.001 and details["learning_rate"] == 1e-4
    assert {"algorithm", "optimizer", "num_generations", "batch_size", "epochs"} <= set(details)


def test_reward_is_the_validator_on_decoded_answers(registry, tmp_path):
    from envengineer.plugins.policies.tiny import compact_reference

    generator, validator = registry.task("mapf-frozenlake", {"agents": 2})
    records = generator.generate(generator.default_config(), n=4, seed=1).records
    request = TrainRequest(policy_path=tmp_path, records=records, generator=generator, validator=validator,
                           out_dir=tmp_path, prompt_style="compact")
    good = compact_reference(generator, records[0])
    plain = registry.create("trainer", "trl", {}).reward_fn(request, records)
    assert plain(prompts=["p"] * 2, completions=[good, "| 9_9"], record_index=[0, 0]) == [1.0, 0.0]
    bonus = registry.create("trainer", "trl", {"optimality_bonus": 0.5}).reward_fn(request, records)
    assert bonus(prompts=["p"], completions=[good], record_index=[0]) == [1.5]


def test_one_round_on_cpu_writes_checkpoint_and_curves(registry, base, tmp_path):
    from transformers import AutoModelForCausalLM

    generator, validator = registry.task("mapf-frozenlake", {"agents": 2})
    records = generator.generate(generator.default_config(), n=8, seed=2).records
    trainer = registry.create("trainer", "trl", {
        "max_steps": 2, "num_generations": 4, "per_device_train_batch_size": 8, "max_completion_length": 12,
        "learning_rate": 1e-3, "beta": 0.01, "threads": 2, "negative_advantage_weight": 0.5,
    })
    result = trainer.train(TrainRequest(policy_path=base, records=records, generator=generator, validator=validator,
                                        out_dir=tmp_path / "round-00", seed=0, round=0, prompt_style="compact"))
    assert (result.checkpoint / "config.json").exists()
    assert AutoModelForCausalLM.from_pretrained(result.checkpoint).config.model_type == "qwen3"
    lines = [json.loads(line) for line in result.curves.read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    assert set(CURVE_KEYS) <= set(lines[0])
    assert lines[0]["reward_mean"] is not None and lines[0]["kl"] is not None
    assert result.metrics["steps"] == 2 and result.metrics["prompts_used"] == 8
