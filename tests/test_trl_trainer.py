"""The ``trl`` trainer: one GRPO round on CPU writes a checkpoint and curves; it renders prompts as evaluation does."""

import dataclasses
import json

import pytest

pytest.importorskip("trl")

from envengineer.components.training import CURVE_KEYS, TrainRequest  # noqa: E402


@pytest.fixture(scope="module")
def base(tiny_base):
    import torch

    torch.set_num_threads(2)
    return tiny_base


def test_options_are_checked(registry):
    from envengineer.errors import ConfigError

    with pytest.raises(ConfigError, match="trainer.trl.gradient_accumulation_steps: .*multiple of num_generations"):
        registry.create("trainer", "trl", {"num_generations": 3, "per_device_train_batch_size": 8})
    with pytest.raises(ConfigError, match="trainer.trl"):
        registry.create("trainer", "trl", {"learning_rat": 1e-4})
    micro4 = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 32}
    with pytest.raises(ConfigError, match="trainer.trl.generation_batch_size: .*multiple of num_generations"):
        registry.create("trainer", "trl", {**micro4, "generation_batch_size": 132})
    with pytest.raises(ConfigError, match="trainer.trl.generation_batch_size: .*multiple of per_device_train_batch_size"):
        registry.create("trainer", "trl", {"per_device_train_batch_size": 16, "generation_batch_size": 24})
    with pytest.raises(ConfigError, match="trainer.trl.generation_batch_size: .*multiple or a divisor .* 128 completions"):
        registry.create("trainer", "trl", {**micro4, "generation_batch_size": 192})
    with pytest.raises(ConfigError, match="trainer.trl.gradient_checkpointing"):
        registry.create("trainer", "trl", {"gradient_checkpointing": "yes"})


def test_grpo_config_passes_trl_fields_and_names_unknown_ones(registry, base, tmp_path):
    from envengineer.errors import ConfigError

    trainer = registry.create("trainer", "trl", {"grpo_config": {"adam_epsilon": "1e-4", "min_p": "5e-2", "warmup_steps": 3}, "learning_rate": 2e-5})
    config = trainer.grpo_config(tmp_path, 4, base)
    assert config.adam_epsilon == 1e-4 and config.min_p == 0.05 and config.warmup_steps == 3 and config.learning_rate == 2e-5 and config.seed == 4
    assert config.chat_template_kwargs == {"enable_thinking": False}  # the policy's default when the request has none
    assert trainer.grpo_config(tmp_path, 4, base, {"enable_thinking": True}).chat_template_kwargs == {"enable_thinking": True}
    with pytest.raises(ConfigError, match="'adam_epsilonn'"):
        registry.create("trainer", "trl", {"grpo_config": {"adam_epsilonn": 1e-4}}).grpo_config(tmp_path, 0, base)
    with pytest.raises(ConfigError, match="grpo_config.adam_epsilon"):
        registry.create("trainer", "trl", {"grpo_config": {"adam_epsilon": "tiny"}}).grpo_config(tmp_path, 0, base)
    # a field one of our options sets is refused there, naming the option
    for key, option in [("steps_per_generation", "generation_batch_size"), ("gradient_checkpointing", "gradient_checkpointing"),
                        ("chat_template_kwargs", "chat_template_kwargs"), ("per_device_train_batch_size", "per_device_train_batch_size")]:
        with pytest.raises(ConfigError, match=f"trainer.trl.grpo_config.{key}: set by .*{option}"):
            registry.create("trainer", "trl", {"grpo_config": {key: 4}}).grpo_config(tmp_path, 0, base)


# The paper: "1024 samples per mini-batch, 8 gradient-accumulation steps, per-GPU micro-batch 4, 4 GPUs", n = 8.
@pytest.mark.parametrize("options, per_step, per_rollout, steps_per_rollout, rollouts_per_step", [
    # 128 completions per optimiser step (4 GPUs x 4 x 8 accumulation), 1024 per rollout: 8 steps per rollout
    ({"per_device_train_batch_size": 4, "gradient_accumulation_steps": 32, "generation_batch_size": 1024}, 128, 1024, 8, 1),
    # 1024 completions per optimiser step, one rollout each
    ({"per_device_train_batch_size": 4, "gradient_accumulation_steps": 256, "generation_batch_size": 1024}, 1024, 1024, 1, 1),
    # ... or the same step from 8 rollouts of 128 (less generation memory, same update)
    ({"per_device_train_batch_size": 4, "gradient_accumulation_steps": 256, "generation_batch_size": 128}, 1024, 128, 1, 8),
    # no generation_batch_size: one rollout per optimiser step
    ({"per_device_train_batch_size": 8, "gradient_accumulation_steps": 8}, 64, 64, 1, 1),
])
def test_both_readings_of_the_paper_batch(registry, base, tmp_path, options, per_step, per_rollout, steps_per_rollout, rollouts_per_step):
    trainer = registry.create("trainer", "trl", {"num_generations": 8, **options})
    details = trainer.describe()
    assert (details["completions_per_step"], details["generation_batch_size"]) == (per_step, per_rollout)
    assert (details["prompts_per_step"], details["prompts_per_generation"]) == (per_step // 8, per_rollout // 8)
    assert (details["optimizer_steps_per_generation"], details["generations_per_optimizer_step"]) == (steps_per_rollout, rollouts_per_step)
    config = trainer.grpo_config(tmp_path, 0, base)
    # TRL counts steps_per_generation in micro-batches: a rollout feeds this many of them
    assert config.generation_batch_size == per_rollout
    assert config.steps_per_generation == per_rollout // options["per_device_train_batch_size"]
    assert config.per_device_train_batch_size * config.gradient_accumulation_steps == per_step


@pytest.mark.parametrize("options, steps", [
    ({"per_device_train_batch_size": 2, "gradient_accumulation_steps": 2, "generation_batch_size": 8}, 8),  # 2 steps per rollout
    ({"per_device_train_batch_size": 2, "gradient_accumulation_steps": 4, "generation_batch_size": 4}, 4),  # 2 rollouts per step
])
def test_an_epoch_samples_each_prompt_once_whatever_the_rollout_size(registry, base, tmp_path, options, steps):
    generator, validator = registry.task("mapf-frozenlake", {"agents": 2})
    records = generator.generate(generator.default_config(), n=16, seed=2).records
    trainer = registry.create("trainer", "trl", {"num_generations": 2, "max_completion_length": 6, "threads": 1, "epochs": 1, **options})
    result = trainer.train(TrainRequest(policy_path=base, records=records, generator=generator, validator=validator,
                                        out_dir=tmp_path / "round", prompt_style="compact"))
    assert result.metrics["steps"] == steps and result.metrics["completions"] == 16 * 2


def test_gradient_checkpointing_follows_the_parameter_count(registry, base, tmp_path):
    from transformers import AutoModelForCausalLM, Qwen3Config

    from envengineer.plugins.trainers.trl_grpo import GRADIENT_CHECKPOINTING_MIN_PARAMETERS, parameter_count

    assert parameter_count(base) == sum(p.numel() for p in AutoModelForCausalLM.from_pretrained(base).parameters())
    # a ~140 M-parameter Qwen3 described by its config.json alone: no weights are read
    large = tmp_path / "large"
    Qwen3Config(vocab_size=32000, hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                num_key_value_heads=4, head_dim=64).save_pretrained(large)
    assert not list(large.glob("*.safetensors")) and parameter_count(large) > GRADIENT_CHECKPOINTING_MIN_PARAMETERS
    auto = registry.create("trainer", "trl", {})
    assert auto.grpo_config(tmp_path, 0, base).gradient_checkpointing is False
    # on the CPU (here: no CUDA device) auto leaves it off at any size: RAM holds the activations, recomputing costs time
    assert auto.grpo_config(tmp_path, 0, large).gradient_checkpointing is False
    assert auto.checkpointing(large, use_cpu=False) is True and auto.checkpointing(base, use_cpu=False) is False
    assert auto.checkpointing(large, use_cpu=True) is False
    assert registry.create("trainer", "trl", {"gradient_checkpointing": False}).grpo_config(tmp_path, 0, large).gradient_checkpointing is False
    assert registry.create("trainer", "trl", {"gradient_checkpointing": True}).grpo_config(tmp_path, 0, base).gradient_checkpointing is True
    assert registry.create("trainer", "trl", {"gradient_checkpointing": True}).grpo_config(tmp_path, 0, large).gradient_checkpointing is True
    assert auto.describe()["gradient_checkpointing"].startswith("auto")


def test_negative_advantages_can_be_weighted(registry):
    import torch

    from envengineer.errors import ConfigError
    from envengineer.plugins.trainers.trl_round import weight_negative_advantages

    advantages = torch.tensor([2.0, -0.5, 0.0, -1.0])
    assert weight_negative_advantages(advantages, 0.25).tolist() == [2.0, -0.125, 0.0, -0.25]
    assert weight_negative_advantages(advantages, 1.0).tolist() == advantages.tolist()
    assert registry.create("trainer", "trl", {"negative_advantage_weight": 0.0}).describe()["negative_advantage_weight"] == 0.0
    with pytest.raises(ConfigError, match="negative_advantage_weight"):
        registry.create("trainer", "trl", {"negative_advantage_weight": 1.5})


def test_tokens_after_the_answer_are_found(registry):
    from envengineer.plugins.policies import tiny_model
    from envengineer.plugins.trainers.trl_round import answer_tokens

    generator, _ = registry.task("mapf-frozenlake", {"agents": 2})
    record = {"agents": [{"start": [0, 0], "goal": [0, 1]}, {"start": [1, 1], "goal": [1, 0]}]}
    tokenizer = tiny_model.build_tokenizer(generator.tiny_vocabulary("compact"))  # the task's word-level tokens

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
    from envengineer.plugins.policies.tiny_model import compact_reference

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
    assert result.metrics["gradient_checkpointing"] is False  # auto, for a tiny model


# ------------------------------------------------------- one chat rendering everywhere

# Qwen3's template in miniature: without enable_thinking=False the assistant turn opens bare
# (the model then thinks); with it, an empty thinking block is written for the model.
QWEN3_LIKE_TEMPLATE = (
    "{%- for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}{{ '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
)
THINK_BLOCK = "<think>\n\n</think>"


@pytest.fixture(scope="module")
def chat_model(tmp_path_factory, tiny_models):
    """A random 1-layer Qwen3 with a byte-level tokenizer (any text round-trips) and the template above."""
    from transformers import Qwen3Config, Qwen3ForCausalLM

    tokenizer = tiny_models.byte_chat_tokenizer(QWEN3_LIKE_TEMPLATE, think_tokens=True)
    config = Qwen3Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
                         num_key_value_heads=2, head_dim=8, max_position_embeddings=4096, tie_word_embeddings=True,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    path = tmp_path_factory.mktemp("chat-qwen3")
    Qwen3ForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.parametrize("style, chat_template_kwargs", [("full", None), ("full", {"enable_thinking": True}), ("compact", None)])
def test_training_prompts_are_the_evaluation_prompts(registry, base, chat_model, tmp_path, monkeypatch, style, chat_template_kwargs):
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    model = chat_model if style == "full" else base
    seen = []
    generate_and_score = GRPOTrainer._generate_and_score_completions

    def recording(self, inputs):  # TRL's own step, with what it fed the model kept
        out = generate_and_score(self, inputs)
        for row, example in enumerate(inputs):
            seen.append((int(example["record_index"]), out["prompt_ids"][row][out["prompt_mask"][row].bool()].tolist()))
        return out

    monkeypatch.setattr(GRPOTrainer, "_generate_and_score_completions", recording)
    generator, validator = registry.task("mapf-frozenlake", {"agents": 2})
    records = generator.generate(generator.default_config(), n=2, seed=3).records
    trainer = registry.create("trainer", "trl", {
        "max_steps": 1, "num_generations": 2, "per_device_train_batch_size": 4, "max_completion_length": 4, "threads": 1,
    })
    trainer.train(TrainRequest(policy_path=model, records=records, generator=generator, validator=validator, out_dir=tmp_path / "train",
                               prompt_style=style, chat_template_kwargs=chat_template_kwargs))
    policy_options = {"path": str(model), "prompt_style": style}
    if chat_template_kwargs is not None:
        policy_options["chat_template_kwargs"] = chat_template_kwargs
    policy = registry.create("policy", "transformers", policy_options)
    tokenizer = AutoTokenizer.from_pretrained(model)
    assert sorted({index for index, _ in seen}) == [0, 1]
    for index, ids in seen:
        text, special = policy._text(tokenizer, generator.render(records[index], style))  # what evaluation feeds generate
        assert ids == tokenizer(text, add_special_tokens=special)["input_ids"]
        if style == "full":
            assert (THINK_BLOCK in tokenizer.decode(ids)) == (chat_template_kwargs is None)


def test_the_checkpoint_engineer_renders_with_the_policys_options(registry, recorded_run, chat_model):
    from transformers import AutoTokenizer

    from envengineer.design.prompts import build_request
    from envengineer.design.evidence import load_evidence
    from envengineer.plugins.policies.transformers_policy import chat_text

    tokenizer = AutoTokenizer.from_pretrained(chat_model)
    evidence = load_evidence(recorded_run, 1, registry)
    counts = {}
    for kwargs in (None, {"enable_thinking": True}):
        request = build_request(evidence, registry, {"preset": "V6"}, policy_path=str(chat_model), chat_template_kwargs=kwargs)
        assert request.chat_template_kwargs == kwargs
        # a short prompt: at one token per byte the analysis prompt would be thousands of tokens
        request = dataclasses.replace(request, prompt="Propose the next config.")
        for name in ("checkpoint", "base"):
            request.base_policy_path = str(chat_model)
            reply = registry.create("engineer", name, {"backend": "transformers", "max_new_tokens": 2}).propose(request)
            expected = chat_text(tokenizer, request.messages, kwargs)
            assert reply.usage["prompt_tokens"] == len(tokenizer(expected, add_special_tokens=False)["input_ids"])
        counts[kwargs is None] = reply.usage["prompt_tokens"]
    assert counts[True] > counts[False]  # the empty thinking block is there only with the default options


def test_enable_thinking_is_one_setting_on_the_policy(registry):
    from envengineer.errors import ConfigError

    with pytest.raises(ConfigError, match="policy.transformers: .*enable_thinking: write chat_template_kwargs"):
        registry.create("policy", "transformers", {"enable_thinking": True}, where="policy.transformers")
    with pytest.raises(ConfigError, match="engineer.checkpoint: .*policy.<name>.chat_template_kwargs"):
        registry.create("engineer", "checkpoint", {"enable_thinking": False})
    assert registry.create("policy", "transformers", {}).describe()["chat_template_kwargs"] == {"enable_thinking": False}
