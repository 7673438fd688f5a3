"""Every example run config is valid: it parses, and every plugin section resolves."""

from pathlib import Path

import pytest
import yaml

from envengineer.loop.runconfig import load_run_config, parse_run_config, resolve

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
#: Run configs have a name; a suite manifest (suite.yaml) or a generator config beside them has none.
RUN_CONFIGS = sorted(p for p in EXAMPLES.rglob("*.yaml") if "engineers" not in p.parts and "name" in (yaml.safe_load(p.read_text()) or {}))


def register_arith(pm, monkeypatch):
    """The arith example task (examples/envengineer-arith, a package of its own) in the plugin manager ``pm``."""
    monkeypatch.syspath_prepend(str(EXAMPLES / "envengineer-arith"))
    import envengineer_arith.plugin

    pm.register(envengineer_arith.plugin, name="arith")


@pytest.mark.parametrize("path", RUN_CONFIGS, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_example_run_config_resolves(path, pm, tmp_path, monkeypatch):
    from envengineer.registry import Registry

    raw = yaml.safe_load(path.read_text())
    task = raw.get("task")
    if "envengineer-arith" in path.parts or (task.get("name") if isinstance(task, dict) else task) == "arith":  # the example task's plugin
        register_arith(pm, monkeypatch)
    registry = Registry(pm)
    config = load_run_config(path, registry=registry)  # as `envengineer run` reads it: its paths from its folder
    resolved = resolve(config, registry, base_dir=tmp_path)
    assert resolved.engineer.name == config.engineer["name"]


def test_there_are_paper_presets_for_every_variant():
    names = {p.stem for p in RUN_CONFIGS}
    assert {"v1", "v2", "v3", "v4", "v5", "v6", "baseline-fixed", "baseline-random", "baseline-curriculum",
            "engineer-gpt", "engineer-gemini", "engineer-kimi", "engineer-base", "engineer-checkpoint"} <= names


PAPER = sorted((EXAMPLES / "paper").glob("*.yaml"))


@pytest.mark.parametrize("path", PAPER, ids=lambda p: p.stem)
def test_paper_presets_train_as_the_paper_did(path, registry, tmp_path):
    """verl on 4 GPUs: Qwen3 without thinking; GRPO n=8, lr 2e-6 constant, KL loss low_var_kl 1e-3; 3 epochs over
    4000 instances, 3 rounds; vLLM for evaluation."""
    config = parse_run_config(yaml.safe_load(path.read_text()), str(path))
    resolved = resolve(config, registry, base_dir=tmp_path)
    assert (config.rounds, config.budget) == (3, 4000)
    assert resolved.policy.name == "vllm" and resolved.policy.options.chat_template_kwargs == {"enable_thinking": False}
    assert resolved.trainer.name == "verl"
    o = resolved.trainer.options
    assert (o.num_generations, o.learning_rate, o.lr_scheduler_type, o.use_kl_loss, o.kl_loss_type, o.kl_loss_coef, o.entropy_coeff, o.epochs) == (
        8, 2e-6, "constant", True, "low_var_kl", 1e-3, 0, 3)
    assert (o.max_prompt_length, o.max_response_length, o.gradient_checkpointing, o.ref_param_offload) == (1536, 5120, True, True)
    assert (o.nnodes * o.n_gpus_per_node, o.tensor_model_parallel_size, o.gpu_memory_utilization) == (4, 2, 0.55)
    # the reading each file states, verl's words: one update over the rollout's 1024 responses, micro-batch 4
    batches = o.batches()
    assert o.batch_reading == "mini-batch" and "batch_reading: mini-batch" in path.read_text()
    assert (batches["responses_per_optimizer_step"], batches["responses_per_rollout"], batches["gradient_accumulation_steps"]) == (1024, 1024, 64)
    assert "accumulation (128 per update" in path.read_text()  # the other readings are named beside it
    # token-bounded passes, chunked entropy, the reference in bf16 (the memory plan fits 4 × 80 GB: tests/test_plan.py)
    assert (o.use_dynamic_bsz, o.max_token_len_per_gpu, o.entropy_chunking, o.ref_dtype) == (True, 16384, True, "bf16")
    assert resolved.trainer.planned_steps(config.budget) == 93


def test_the_one_gpu_trl_example_trains_as_the_paper_did(registry, tmp_path):
    """The paper's recipe on one GPU with TRL: the same hyperparameters, the 4 GPUs folded into accumulation steps."""
    path = EXAMPLES / "qwen3-one-gpu-trl.yaml"
    config = parse_run_config(yaml.safe_load(path.read_text()), str(path))
    resolved = resolve(config, registry, base_dir=tmp_path)
    assert (config.rounds, config.budget) == (3, 4000)
    assert resolved.policy.options.chat_template_kwargs == {"enable_thinking": False}
    trainer = resolved.trainer.describe()
    assert (trainer["num_generations"], trainer["learning_rate"], trainer["lr_schedule"], trainer["kl_coef"], trainer["epochs"]) == (8, 2e-6, "constant", 1e-3, 3)
    assert trainer["max_completion_length"] == 5120 and trainer["gradient_checkpointing"] is True
    assert (trainer["completions_per_step"], trainer["generation_batch_size"], trainer["optimizer_steps_per_generation"]) == (128, 1024, 8)
    assert "128 per optimiser step" in path.read_text()
    # what fits one 80 GB GPU (tests/test_plan.py): float32 weights under bf16 autocast, bf16 reference, colocated vLLM
    o = resolved.trainer.options
    assert (o.model_dtype, o.compute_dtype, o.ref_dtype, o.generation, o.optim) == ("float32", "bfloat16", "bfloat16", "vllm", "adamw_bnb_8bit")
    assert trainer["dtypes"] == "weights float32, compute bfloat16, reference bfloat16"


def test_trainee_to_trainer_warm_starts_the_policy_on_the_task_it_trains(pm, monkeypatch, tmp_path):
    """examples/trainee-to-trainer.yaml (docs/smollm2.md): SmolLM2 warm-started on the arith example task's reference
    answers, GRPO on arith, the policy's own checkpoint as the structured engineer, validated on arith-val; the
    warm start's pairs are the task's own, every answer right."""
    import re

    from envengineer.registry import Registry

    register_arith(pm, monkeypatch)
    path = EXAMPLES / "trainee-to-trainer.yaml"
    config = parse_run_config(yaml.safe_load(path.read_text()), str(path))
    resolved = resolve(config, Registry(pm), base_dir=tmp_path)
    assert (config.task["name"], config.policy["name"], config.trainer["name"]) == ("arith", "transformers", "trl")
    assert config.engineer["name"] == "checkpoint" and config.engineer["structured"] is True
    assert config.eval.validation == "arith-val" and Registry(pm).benchmark("arith-val").task == "arith"
    options = resolved.policy.options
    assert options.path == "smollm2-135m-instruct" and options.warm_start is not None
    generator, validator = resolved.generator, resolved.validator
    pairs = generator.warm_start_pairs(n=options.warm_start.instances, seed=options.warm_start.seed, style=options.prompt_style)
    assert len(pairs) == options.warm_start.instances
    records = generator.generate(generator.default_config(), n=len(pairs), seed=options.warm_start.seed).records
    for (prompt, answer), record in zip(pairs, records):
        assert prompt.startswith("Compute ") and re.fullmatch(r"<answer>\d+</answer>", answer), (prompt, answer)
        assert validator.score(record, answer).valid
