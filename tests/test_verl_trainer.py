"""The ``verl`` trainer on CPU: its overrides against the installed verl's own Hydra config and
``validate_config``, its exact command line through ``main_ppo --cfg job``, and the launch
boundary (subprocess, metrics, checkpoint hand-off, failure) with a stand-in that leaves what
verl leaves (tests/verl_replay). Training itself needs CUDA GPUs and vLLM."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytest.importorskip("verl")
pytest.importorskip("hydra")

from envengineer.errors import ConfigError  # noqa: E402
from envengineer.components.training import TrainRequest  # noqa: E402

REPLAY = Path(__file__).parent / "verl_replay"


def request(tmp_path, records=(), policy_path=None, **kw):
    return TrainRequest(policy_path=policy_path or tmp_path / "model", records=list(records), generator=None, validator=None,
                        out_dir=tmp_path / "round", seed=3, round=1, **kw)


def test_options_are_checked(registry):
    with pytest.raises(ConfigError, match="trainer.verl: .*train_batch_size \\(128\\) must be a multiple of ppo_mini_batch_size \\(48\\)"):
        registry.create("trainer", "verl", {"preset": "paper-4xh100", "ppo_mini_batch_size": 48})
    with pytest.raises(ConfigError, match="must divide among the 3 GPUs"):
        registry.create("trainer", "verl", {"n_gpus_per_node": 3, "train_batch_size": 16, "ppo_mini_batch_size": 16, "num_generations": 2,
                                            "ppo_micro_batch_size_per_gpu": 1})
    with pytest.raises(ConfigError, match="multiple of ppo_micro_batch_size_per_gpu \\(3\\)"):
        registry.create("trainer", "verl", {"preset": "paper-4xh100", "ppo_micro_batch_size_per_gpu": 3})
    with pytest.raises(ConfigError, match="tensor_model_parallel_size 2"):
        registry.create("trainer", "verl", {"n_gpus_per_node": 1, "tensor_model_parallel_size": 2, "train_batch_size": 4,
                                            "ppo_mini_batch_size": 4, "ppo_micro_batch_size_per_gpu": 4})
    with pytest.raises(ConfigError, match="trainer.verl.preset"):
        registry.create("trainer", "verl", {"preset": "paper-8xh100"})
    with pytest.raises(ConfigError, match="overrides: 'trainer.nnodes' is not a Hydra override"):
        registry.create("trainer", "verl", {"overrides": ["trainer.nnodes"]})
    with pytest.raises(ConfigError, match="trainer.verl.learning_rat"):
        registry.create("trainer", "verl", {"learning_rat": 1e-6})
    with pytest.raises(ConfigError, match="epochs: verl trains whole epochs"):
        registry.create("trainer", "verl", {"epochs": 1.5}).total_epochs()


def test_the_paper_preset_and_its_three_batch_readings(registry):
    paper = registry.create("trainer", "verl", {"preset": "paper-4xh100"})
    o = paper.options
    assert (o.learning_rate, o.lr_scheduler_type, o.kl_loss_type, o.kl_loss_coef, o.entropy_coeff, o.num_generations) == (2e-6, "constant", "low_var_kl", 0.001, 0, 8)
    assert (o.max_prompt_length, o.max_response_length, o.epochs, o.train_batch_size, o.ppo_micro_batch_size_per_gpu) == (1536, 5120, 3, 128, 4)
    assert (o.tensor_model_parallel_size, o.gpu_memory_utilization, o.n_gpus_per_node, o.ref_param_offload, o.gradient_checkpointing) == (2, 0.55, 4, True, True)
    assert (o.use_dynamic_bsz, o.max_token_len_per_gpu, o.entropy_chunking, o.ref_dtype) == (True, 16384, True, "bf16")
    # the default reading, verl's words: the paper's mini-batch of 1024 responses is ppo_mini_batch_size (128 prompts x 8),
    # its micro-batch 4 is ppo_micro_batch_size_per_gpu: one optimiser update per rollout, 64 accumulation steps per GPU
    assert o.batch_reading == "mini-batch"
    assert paper.options.batches() == {
        "gpus": 4, "responses_per_rollout": 1024, "optimizer_steps_per_rollout": 1, "responses_per_optimizer_step": 1024,
        "responses_per_gpu_per_optimizer_step": 256, "gradient_accumulation_steps": 64,
    }
    # 4 GPUs x micro-batch 4 x 8 accumulation steps = 128 responses per update: 8 updates per rollout
    accumulation = registry.create("trainer", "verl", {"preset": "paper-4xh100", "batch_reading": "accumulation"}).options.batches()
    assert (accumulation["optimizer_steps_per_rollout"], accumulation["responses_per_optimizer_step"], accumulation["gradient_accumulation_steps"]) == (8, 128, 8)
    # one update over the 1024 in 8 accumulation steps: micro-batches of 32 responses per GPU
    micro32 = registry.create("trainer", "verl", {"preset": "paper-4xh100", "batch_reading": "micro-batch-32"})
    assert micro32.options.ppo_micro_batch_size_per_gpu == 32
    assert (micro32.options.batches()["optimizer_steps_per_rollout"], micro32.options.batches()["gradient_accumulation_steps"]) == (1, 8)
    # a batch size given explicitly wins over the reading; the rest of the preset stays
    given = registry.create("trainer", "verl", {"preset": "paper-4xh100", "ppo_mini_batch_size": 16})
    assert given.options.batches()["optimizer_steps_per_rollout"] == 8 and given.options.learning_rate == 2e-6
    assert paper.planned_steps(4000) == 31 * 3  # the dataloader drops the last partial batch
    with pytest.raises(ConfigError, match="max_token_len_per_gpu .4096. must hold the longest sequence"):
        registry.create("trainer", "verl", {"preset": "paper-4xh100", "max_token_len_per_gpu": 4096})


@pytest.fixture(scope="module")
def composed(tmp_path_factory):
    """The paper preset's overrides composed by verl's Hydra config and validated (once: composing takes seconds)."""
    from envengineer.registry import load_registry

    tmp = tmp_path_factory.mktemp("compose")
    trainer = load_registry().create("trainer", "verl", {"preset": "paper-4xh100", "optimality_bonus": 0.5})
    req = request(tmp)
    overrides = trainer.overrides(req, 4000)
    return trainer, req, overrides, trainer.check(overrides)


def test_preset_overrides_compose_and_pass_validate_config(composed):
    trainer, req, overrides, cfg = composed
    a, r = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert cfg.algorithm.adv_estimator == "grpo" and cfg.algorithm.use_kl_in_reward is False
    assert (a.optim.lr, a.optim.lr_scheduler_type, a.optim.lr_warmup_steps) == (2e-6, "constant", 0)
    assert (a.use_kl_loss, a.kl_loss_type, a.kl_loss_coef, a.entropy_coeff) == (True, "low_var_kl", 0.001, 0)
    assert (a.ppo_mini_batch_size, a.ppo_micro_batch_size_per_gpu) == (128, 4)
    # token-bounded micro-batches in the update and both log-prob passes, chunked entropy, the reference in bf16
    ref = cfg.actor_rollout_ref.ref
    assert (a.use_dynamic_bsz, a.ppo_max_token_len_per_gpu) == (True, 16384)
    assert (r.log_prob_use_dynamic_bsz, r.log_prob_max_token_len_per_gpu) == (True, 16384)
    assert (ref.log_prob_use_dynamic_bsz, ref.log_prob_max_token_len_per_gpu) == (True, 16384)
    assert a.entropy_from_logits_with_chunking is True and ref.entropy_from_logits_with_chunking is True
    assert a.fsdp_config.entropy_from_logits_with_chunking is True  # what verl's engine reads
    assert ref.fsdp_config.model_dtype == "bf16" and a.fsdp_config.model_dtype == "fp32"
    assert (r.name, r.n, r.tensor_model_parallel_size, r.gpu_memory_utilization, r.log_prob_micro_batch_size_per_gpu, r.seed) == ("vllm", 8, 2, 0.55, 4, 3)
    assert cfg.actor_rollout_ref.ref.fsdp_config.param_offload is True and cfg.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu == 4
    assert (cfg.data.train_batch_size, cfg.data.max_prompt_length, cfg.data.max_response_length) == (128, 1536, 5120)
    assert cfg.data.apply_chat_template_kwargs.enable_thinking is False
    assert cfg.data.train_files.endswith("train.parquet") and cfg.data.val_files.endswith("validation.parquet")
    # the reward keys main_ppo 0.9.1 reads
    assert cfg.reward.custom_reward_function.path == "pkg://envengineer.plugins.trainers.verl_data"
    assert cfg.reward.custom_reward_function.name == "compute_score" and cfg.reward.reward_manager.name == "naive"
    assert cfg.reward.custom_reward_function.reward_kwargs.optimality_bonus == 0.5
    # the reward records each training response in the round's folder (rollouts.jsonl after the job)
    assert cfg.reward.custom_reward_function.reward_kwargs.outcomes == str(trainer.paths(req.out_dir)["outcomes"])
    # a fresh round, one save at the end as a Hugging Face model, metrics to the round's folder (also inside Ray)
    assert cfg.trainer.resume_mode == "disable" and list(a.checkpoint.save_contents) == ["hf_model"]
    assert cfg.trainer.save_freq == 93 and cfg.trainer.total_epochs == 3 and (cfg.trainer.nnodes, cfg.trainer.n_gpus_per_node) == (1, 4)
    assert "file" in cfg.trainer.logger and "wandb" not in cfg.trainer.logger
    logger_path = cfg.ray_kwargs.ray_init.runtime_env.env_vars.VERL_FILE_LOGGER_PATH
    assert logger_path == trainer.environment(req)["VERL_FILE_LOGGER_PATH"] == str(trainer.paths(req.out_dir)["metrics"])
    # no flash-attn here: sdpa, and no padding removal (packing needs flash-attn's varlen kernels)
    assert cfg.actor_rollout_ref.model.override_config.attn_implementation == "sdpa"
    assert cfg.actor_rollout_ref.model.use_remove_padding is False
    assert cfg.actor_rollout_ref.model.enable_gradient_checkpointing is True


def test_user_overrides_come_last_and_are_checked(composed, tmp_path):
    from envengineer.registry import load_registry

    registry = load_registry()
    trainer = registry.create("trainer", "verl", {"preset": "paper-4xh100", "overrides": ["actor_rollout_ref.rollout.gpu_memory_utilization=0.6", "trainer.logger=[console,wandb]"]})
    overrides = trainer.overrides(request(tmp_path), 4000)
    assert overrides[-2:] == ["actor_rollout_ref.rollout.gpu_memory_utilization=0.6", "trainer.logger=[console,wandb]"]
    assert sum(item.startswith("actor_rollout_ref.rollout.gpu_memory_utilization=") for item in overrides) == 1
    cfg = trainer.check(overrides)
    assert cfg.actor_rollout_ref.rollout.gpu_memory_utilization == 0.6
    # an unknown key fails with its name, before anything launches
    typo = registry.create("trainer", "verl", {"preset": "paper-4xh100", "overrides": ["actor_rollout_ref.actor.optim.lrr=1e-6"]})
    with pytest.raises(ConfigError, match="trainer.verl: verl's config refused .*lrr"):
        typo.check(typo.overrides(request(tmp_path), 4000))
    # a value verl's validate_config refuses
    bad = registry.create("trainer", "verl", {"preset": "paper-4xh100", "use_dynamic_bsz": False,  # (token-bounded: no micro-batch size needed)
                                                "overrides": ["actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=null"]})
    with pytest.raises(ConfigError, match="trainer.verl: verl's validate_config refused"):
        bad.check(bad.overrides(request(tmp_path), 4000))


def test_main_ppo_parses_our_exact_command_line(tmp_path, registry):
    """``python -m verl.trainer.main_ppo <our overrides> --cfg job``: verl's own entry point reads our command line,
    paths with spaces, commas and quotes included."""
    trainer = registry.create("trainer", "verl", {"preset": "paper-4xh100", "env": {"HF_HUB_OFFLINE": "1"}})
    odd = tmp_path / "runs, 'odd' dir"
    req = TrainRequest(policy_path=odd / "model=v1", records=[], generator=None, validator=None, out_dir=odd / "round", seed=0, round=0)
    command = trainer.command(trainer.overrides(req, 4000)) + ["--cfg", "job"]
    assert command[:3] == [sys.executable, "-m", "verl.trainer.main_ppo"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    cfg = yaml.safe_load(done.stdout)
    assert cfg["actor_rollout_ref"]["model"]["path"] == str((odd / "model=v1").resolve())
    assert cfg["data"]["train_files"] == str((odd / "round" / "data" / "train.parquet").resolve())
    assert cfg["trainer"]["default_local_dir"] == str((odd / "round" / "verl-checkpoints").resolve())
    assert cfg["ray_kwargs"]["ray_init"]["runtime_env"]["env_vars"] == {
        "VERL_FILE_LOGGER_PATH": str((odd / "round" / "verl-metrics.jsonl").resolve()), "HF_HUB_OFFLINE": "1"}
    assert cfg["reward"]["custom_reward_function"]["path"] == "pkg://envengineer.plugins.trainers.verl_data"


# ------------------------------------------------------------------ the launch boundary


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory, tiny_models):
    return tiny_models.char_model(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture()
def round_request(registry, tiny_model, tmp_path):
    generator, validator = registry.task("mapf-frozenlake", {"agents": 2})
    records = generator.generate(generator.default_config(), n=24, seed=1).records
    validation = generator.generate(generator.default_config(), n=8, seed=2).records
    return TrainRequest(policy_path=tiny_model, records=records, generator=generator, validator=validator, out_dir=tmp_path / "round",
                        seed=5, round=0, validation_records=validation, task={"name": "mapf-frozenlake", "agents": 2})


def replay_trainer(registry, **env):
    return registry.create("trainer", "verl", {
        "train_batch_size": 8, "ppo_mini_batch_size": 8, "ppo_micro_batch_size_per_gpu": 4, "num_generations": 4,
        "module": "replay_main_ppo", "env": {"PYTHONPATH": str(REPLAY), **env},
    })


def test_a_round_through_the_launch_boundary(registry, round_request):
    import pyarrow.parquet as pq
    from transformers import AutoModelForCausalLM

    trainer = replay_trainer(registry)
    result = trainer.train(round_request)
    out = Path(round_request.out_dir)
    # the data verl read
    assert pq.read_table(out / "data" / "train.parquet").num_rows == 24
    assert pq.read_table(out / "data" / "validation.parquet").num_rows == 8
    # training steps became curve lines, the validation-only line did not
    curves = [json.loads(line) for line in result.curves.read_text().splitlines()]
    assert [line["step"] for line in curves] == [1, 2, 3]
    assert [line["reward_mean"] for line in curves] == [0.125, 0.1875, 0.25]
    assert curves[1]["kl"] == 0.0004 and curves[0]["completion_length"] == 212.5 and curves[2]["learning_rate"] == 2e-6
    assert curves[0]["loss"] == -0.0021 and curves[0]["throughput"] == 1523.4
    assert result.metrics["steps"] == 3 and result.metrics["reward_mean"] == round((0.125 + 0.1875 + 0.25) / 3, 4)
    # the saved model is the round's checkpoint (and the next round's start); verl's folder is gone
    assert result.checkpoint == out / "checkpoint"
    AutoModelForCausalLM.from_pretrained(result.checkpoint)
    assert not (out / "verl-checkpoints").exists()
    assert (out / "verl.log").read_text().startswith("$ ")


def test_a_failed_job_fails_the_round_with_the_log_tail(registry, round_request):
    from envengineer.plugins.trainers.verl_launch import TrainingFailed

    with pytest.raises(TrainingFailed, match="(?s)exited with code 1.*CUDA out of memory"):
        replay_trainer(registry, REPLAY_FAIL="1").train(round_request)
    assert not (Path(round_request.out_dir) / "checkpoint").exists()


def test_too_few_instances_for_one_batch(registry, round_request):
    """verl would drop the partial batch and fail on an empty dataloader: one smaller batch instead (tests/test_verl_short_round.py)."""
    trainer = registry.create("trainer", "verl", {"train_batch_size": 32, "ppo_mini_batch_size": 8, "num_generations": 4})
    trainer.write_data(round_request)
    assert trainer.round_options(24).train_batch_size == 24 and "fewer than one train batch of 32" in trainer.short_note(24)["note"]


def test_metrics_follower_waits_for_whole_lines(tmp_path):
    from envengineer.plugins.trainers.verl_launch import MetricsFollower

    source, curves = tmp_path / "m.jsonl", tmp_path / "c.jsonl"
    follower = MetricsFollower(source, curves)
    assert follower.poll() == []
    line = json.dumps({"step": 1, "data": {"critic/score/mean": 0.5, "actor/pg_loss": 0.1}})
    source.write_text(line[:20])
    assert follower.poll() == []
    source.write_text(line + "\n" + "not json\n")
    [got] = follower.poll()
    assert got["step"] == 1 and got["reward_mean"] == 0.5 and got["zero_std_frac"] is None
    assert len(curves.read_text().splitlines()) == 1


def test_run_dry_run_writes_the_data_and_prints_the_exact_command(tiny_model, tmp_path):
    """``envengineer run CONFIG --dry-run`` with the verl trainer: round 0's data in verl's format and the
    checked command, nothing trained (the run then reuses the prepared steps)."""
    import shlex

    from typer.testing import CliRunner

    from envengineer.cli.commands import app
    from envengineer.fileio import read_jsonl

    config = tmp_path / "verl.yaml"
    config.write_text(yaml.safe_dump({
        "name": "verl-dry", "task": {"name": "mapf-frozenlake", "agents": 2}, "rounds": 2, "budget": 16,
        "engineer": {"name": "fixed"}, "policy": {"name": "transformers", "path": str(tiny_model)},
        "trainer": {"name": "verl", "preset": "paper-4xh100", "train_batch_size": 16, "ppo_mini_batch_size": 16},
        "eval": {"validation": "mapf-2agents-val", "limit": 8}, "output": str(tmp_path / "run"),
    }))
    result = CliRunner().invoke(app, ["run", str(config), "--dry-run", "seed=4"])
    assert result.exit_code == 0, result.output
    command = result.output.strip().splitlines()[-1]
    # the memory plan (as `envengineer plan`) from the model's own config.json, before the command
    assert "GPU memory per GPU" in result.output and f"config.json in {tiny_model}" in " ".join(result.output.split())
    argv = shlex.split(command)
    assert argv[:3] == [sys.executable, "-m", "verl.trainer.main_ppo"]
    values = dict(item.lstrip("+").split("=", 1) for item in argv[3:])
    assert values["actor_rollout_ref.model.path"] == str(Path(tiny_model).resolve())
    assert values["data.train_batch_size"] == "16" and values["trainer.save_freq"] == "3"  # 16 // 16 × 3 epochs
    assert Path(values["data.train_files"]).is_file() and Path(values["data.val_files"]).is_file()
    assert "VERL_FILE_LOGGER_PATH=" in result.output
    steps = [line["step"] for line in read_jsonl(tmp_path / "run" / "history.jsonl")]
    assert steps == ["pretrain", "generate"]  # nothing trained; a real run picks up from here


def test_plain_string_prompts_are_refused(registry, round_request):
    """verl applies the chat template to every prompt: a plain-string style would train on other prompts than evaluation's."""
    from dataclasses import replace

    trainer = registry.create("trainer", "verl", {"train_batch_size": 8, "ppo_mini_batch_size": 8, "num_generations": 4})
    with pytest.raises(ConfigError, match="prompt style 'compact' gives plain-string prompts"):
        trainer.write_data(replace(round_request, prompt_style="compact"))


def test_the_default_options_compose_and_validate(registry, tmp_path):
    trainer = registry.create("trainer", "verl", {})
    cfg = trainer.check(trainer.overrides(request(tmp_path), 256))
    assert (cfg.trainer.n_gpus_per_node, cfg.actor_rollout_ref.rollout.tensor_model_parallel_size, cfg.trainer.total_epochs) == (1, 1, 1)
    assert cfg.trainer.save_freq == 2 and cfg.data.max_prompt_length == 1536


def test_launching_main_ppo_needs_transfer_queue_and_vllm(composed):
    """Plain ``pip install verl`` lacks TransferQueue, which main_ppo imports when training starts: say so before launching."""
    import importlib.util

    trainer, _, _, cfg = composed
    if importlib.util.find_spec("transfer_queue") is None:
        with pytest.raises(ConfigError, match="TransferQueue.*envengineer\\[train,verl\\]"):
            trainer.preflight(cfg)
    elif importlib.util.find_spec("vllm") is None:
        with pytest.raises(ConfigError, match="vLLM .* is not installed"):
            trainer.preflight(cfg)
    else:
        trainer.preflight(cfg)


def test_the_loop_with_verl_rounds(tiny_model, tmp_path):
    """Two rounds of the loop through the launch boundary: each round's saved model is the next round's start
    (and so its reference model), its curves reach the run's table, and the validation set is verl's."""
    import shlex

    from envengineer.fileio import read_jsonl
    from envengineer.loop.steps import run

    config = tmp_path / "verl.yaml"
    config.write_text(yaml.safe_dump({
        "name": "verl-loop", "task": {"name": "mapf-frozenlake", "agents": 2}, "rounds": 2, "budget": 8, "seed": 1,
        "engineer": {"name": "fixed"}, "policy": {"name": "transformers", "path": str(tiny_model), "max_new_tokens": 4},
        "trainer": {"name": "verl", "train_batch_size": 8, "ppo_mini_batch_size": 8, "num_generations": 4,
                    "module": "replay_main_ppo", "env": {"PYTHONPATH": str(REPLAY)}},
        "eval": {"validation": "mapf-2agents-val", "limit": 4}, "output": str(tmp_path / "run"),
    }))
    rows = run(config)
    assert [row["round"] for row in rows] == ["base", 0, 1]
    run_dir = tmp_path / "run"
    starts = []
    for round in (0, 1):
        argv = shlex.split((run_dir / f"round-{round:02d}" / "train" / "verl.log").read_text().splitlines()[0][2:])
        starts.append(dict(item.lstrip("+").split("=", 1) for item in argv[3:])["actor_rollout_ref.model.path"])
    assert starts[0] == str(Path(tiny_model).resolve())
    assert Path(starts[1]).name == "checkpoint" and Path(starts[1]).parent.name == "train" and "round-00" in starts[1]
    assert (run_dir / "round-00" / "train" / "checkpoint" / "config.json").exists()
    train_lines = [line for line in read_jsonl(run_dir / "history.jsonl") if line["step"] == "train"]
    assert [line["steps"] for line in train_lines] == [3, 3]


@pytest.mark.parametrize("options", [
    # the one-GPU recipe (docs/verl.md, "One GPU"): offload while vLLM is awake, 8,192-token passes
    {"n_gpus_per_node": 1, "tensor_model_parallel_size": 1, "gpu_memory_utilization": 0.4, "actor_param_offload": True,
     "optimizer_offload": True, "max_token_len_per_gpu": 8192},
    {"batch_reading": "accumulation"},
    {"batch_reading": "micro-batch-32"},
    {"batch_reading": "micro-batch-32", "use_dynamic_bsz": False, "entropy_chunking": False, "ref_dtype": "fp32"},
], ids=["one-gpu", "accumulation", "micro-batch-32", "micro-batch-32-by-responses"])
def test_the_recipes_and_readings_compose_and_pass_validate_config(registry, tmp_path, options):
    trainer = registry.create("trainer", "verl", {"preset": "paper-4xh100", **options})
    overrides = trainer.overrides(request(tmp_path), 4000)
    cfg = trainer.check(overrides)
    a, ref = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.ref
    o = trainer.options
    assert (a.ppo_mini_batch_size, a.ppo_micro_batch_size_per_gpu) == (o.ppo_mini_batch_size, o.ppo_micro_batch_size_per_gpu)
    assert a.use_dynamic_bsz is o.use_dynamic_bsz and ref.log_prob_use_dynamic_bsz is o.use_dynamic_bsz
    if o.use_dynamic_bsz:
        assert a.ppo_max_token_len_per_gpu == ref.log_prob_max_token_len_per_gpu == o.max_token_len_per_gpu
    assert a.fsdp_config.param_offload is o.actor_param_offload and a.fsdp_config.optimizer_offload is o.optimizer_offload
    assert ref.fsdp_config.model_dtype == o.ref_dtype and a.entropy_from_logits_with_chunking is o.entropy_chunking
