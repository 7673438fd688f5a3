"""The ``trl`` trainer's dtype policy and generation settings reach TRL's real GRPOConfig and GRPOTrainer."""

from __future__ import annotations

import pytest

pytest.importorskip("trl")

from envengineer.components.training import TrainRequest  # noqa: E402


@pytest.fixture(scope="module")
def base(tiny_base):
    import torch

    torch.set_num_threads(2)
    return tiny_base


def test_the_options_become_grpo_config_fields(registry, base, tmp_path):
    from envengineer.errors import ConfigError

    trainer = registry.create("trainer", "trl", {
        "beta": 0.01, "model_dtype": "float32", "compute_dtype": "bfloat16", "ref_dtype": "bfloat16",
        "generation": "vllm", "vllm_gpu_memory_utilization": 0.25, "vllm_sleep": True, "prompt_tokens": 512, "max_completion_length": 256,
    })
    config = trainer.grpo_config(tmp_path, 0, base)
    assert config.bf16 is True  # autocast over the float32 weights
    assert config.model_init_kwargs == {"dtype": "bfloat16"}  # TRL builds the reference from these; the policy is loaded by us
    assert (config.use_vllm, config.vllm_mode, config.vllm_gpu_memory_utilization, config.vllm_enable_sleep_mode) == (True, "colocate", 0.25, True)
    assert config.vllm_max_model_length == 512 + 256
    # the defaults: TRL's own float32 load, stated; no vLLM; float32 compute on the CPU
    default = registry.create("trainer", "trl", {}).grpo_config(tmp_path, 0, base)
    assert default.model_init_kwargs == {"dtype": "float32"} and default.use_vllm is False and default.bf16 is False
    # grpo_config may not set them behind the options' back
    for key, option in [("bf16", "compute_dtype"), ("model_init_kwargs", "model_dtype"), ("use_vllm", "generation"),
                        ("vllm_gpu_memory_utilization", "vllm_gpu_memory_utilization")]:
        with pytest.raises(ConfigError, match=f"trainer.trl.grpo_config.{key}: set by .*{option}"):
            registry.create("trainer", "trl", {"grpo_config": {key: True}}).grpo_config(tmp_path, 0, base)


def test_the_reference_is_built_in_its_own_dtype_by_trls_trainer(registry, base, tmp_path):
    """TRL's GRPOTrainer, given our model and config: the policy in float32, the reference TRL builds in bfloat16."""
    import torch
    from datasets import Dataset
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    from envengineer.plugins.trainers.trl_memory import policy_model

    trainer = registry.create("trainer", "trl", {"beta": 0.01, "ref_dtype": "bfloat16", "num_generations": 2, "per_device_train_batch_size": 2,
                                                 "compute_dtype": "float32"})
    config = trainer.grpo_config(tmp_path, 0, base)
    tokenizer = AutoTokenizer.from_pretrained(str(base))
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    grpo = GRPOTrainer(model=policy_model(trainer.options, str(base)), reward_funcs=lambda completions, **_: [0.0] * len(completions),
                       args=config, train_dataset=Dataset.from_list([{"prompt": "1 2"}] * 4), processing_class=tokenizer)
    assert grpo.model.dtype == torch.float32
    assert grpo.ref_model is not None and grpo.ref_model.dtype == torch.bfloat16
    # the same dtype for both: TRL loads the policy from its path, as before
    same = registry.create("trainer", "trl", {"beta": 0.01})
    assert policy_model(same.options, str(base)) == str(base)


def test_generation_chunk_bounds_the_rows_per_generate_call(registry, base, tmp_path):
    """A real round on CPU: 8 completions per rollout in generate calls of at most 4 rows (two calls), trained as usual."""
    generator, validator = registry.task("mapf-frozenlake", {"agents": 2})
    records = generator.generate(generator.default_config(), n=4, seed=2).records

    def round_with(options, name):
        trainer = registry.create("trainer", "trl", {"max_steps": 1, "num_generations": 2, "per_device_train_batch_size": 8,
                                                     "max_completion_length": 8, "threads": 2, **options})
        return trainer.train(TrainRequest(policy_path=base, records=records, generator=generator, validator=validator,
                                          out_dir=tmp_path / name, seed=0, round=0, prompt_style="compact")).metrics

    whole, chunked = round_with({}, "whole"), round_with({"generation_chunk": 4}, "chunked")
    calls = lambda m: m["rollouts_fast"] + m["rollouts_generate"]  # noqa: E731
    assert calls(whole) == 1 and calls(chunked) == 2
    assert chunked["steps"] == whole["steps"] == 1 and chunked["completions"] == 8
