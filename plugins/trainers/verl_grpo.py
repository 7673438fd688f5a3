"""GRPO at scale through verl: one round = one ``python -m verl.trainer.main_ppo`` run.

The round's training and validation sets are written as parquet in the schema verl's
``RLHFDataset`` reads (:mod:`envengineer.plugins.trainers.verl_data`); the reward is our
``compute_score`` (the task validator's R_acc, plus ``optimality_bonus`` for an optimal
answer), which verl's naive reward manager calls through
``reward.custom_reward_function.path=pkg://envengineer.plugins.trainers.verl_data``.
Rollouts run on vLLM inside verl; the actor and the reference model on FSDP.

The command line is three layers of Hydra overrides, checked together before anything is
launched: our base (the things a round always needs: data, reward, a fresh start with
``resume_mode=disable``, one save at the last step as a full Hugging Face model directory,
a file logger in the round's folder), the options below (with a ``preset`` filling the ones
a user did not give, e.g. ``paper-4xh100``), and the user's own ``overrides`` list, last.
The composed config must pass verl's own ``validate_config`` and our divisibility checks,
so a typo or an impossible batch fails in seconds with the key's name, not an hour into a
job on a cluster.

verl's metrics (its file logger, ``{"step": N, "data": {...}}`` lines) become the same
``curves.jsonl`` the reports read, while the job runs. Our reward function also records each
training response's reward and validity in the round's ``verl-outcomes`` folder
(``reward_kwargs.outcomes``); after the job they become ``rollouts.jsonl``, one line per training
prompt, as the ``trl`` trainer writes it (on several nodes the round's folder must be on storage
the reward workers see, as verl's checkpoint folder already must be). A non-zero exit fails the round with
the tail of ``verl.log``. The saved model becomes the round's checkpoint: the next round
starts from it and uses it as its reference model, as in the paper.

verl's training dataloader drops a partial batch (``drop_last``) and its job fails on an empty
one, so a round with fewer instances than ``train_batch_size`` trains one smaller batch of them
instead (:meth:`VerlGrpoTrainer.round_options`, said in the metrics' ``note``), as the ``trl``
trainer trains one smaller step; a round whose instances no batch can split among the GPUs
trains nothing and hands on its starting weights, without launching verl. verl also drops every prompt longer
than ``max_prompt_length``; they are counted before launch with verl's own dataset
(:meth:`VerlGrpoTrainer.count_kept`) and the round is planned on the prompts it keeps, its
``total_training_steps`` included, so that verl reaches its last step, where it saves.

Before launch the Python that runs verl is probed (flash-attn, vLLM, TransferQueue:
:mod:`envengineer.plugins.trainers.verl_doctor`), and on several nodes every Ray node; the job runs
in a process group of its own, ended whole when it fails, stalls or the loop is interrupted
(:mod:`envengineer.plugins.trainers.verl_launch`).

Everything up to the launch (overrides, data, reward, checkpoint hand-off, metrics) is tested
on CPU against the installed verl; the training itself needs CUDA GPUs and vLLM.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import time
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, Field

from envengineer.api import ROLLOUTS_FILE, ConfigError, Resources, TrainRequest, TrainResult, Trainer, reward_text
from envengineer.plugins.trainers.verl_config import (
    ENV_PREFIX,
    REWARD_MODULE,
    VerlOptions,
    check_overrides,
    hydra_string,
    hydra_value,
    override_key,
)
from envengineer.plugins.trainers.verl_data import OUTCOMES_DIR
from envengineer.plugins.trainers.verl_doctor import PreLaunch
from envengineer.plugins.trainers.verl_launch import LaunchOptions, run_job


#: The run's trackers verl's own ``Tracking`` (verl/utils/tracking.py) can write to, by the same names.
TRACKER_LOGGERS = ("tensorboard", "wandb", "mlflow")


class VerlGrpoOptions(VerlOptions, LaunchOptions):
    """The ``verl`` trainer's section: verl's settings (:class:`VerlOptions`) and how the job is launched and watched."""

    max_model_len: int | None = Field(
        None, ge=32, description="vLLM context length (unset: verl takes the model's max_position_embeddings, e.g. 40960 for "
        "Qwen3-4B; max_prompt_length + max_response_length is enough)",
    )


class VerlGrpoTrainer(PreLaunch, Trainer):
    name: ClassVar[str] = "verl"
    description: ClassVar[str] = "GRPO with verl (FSDP actor, vLLM rollouts) on one or more GPU nodes through Ray"
    Options: ClassVar[type[BaseModel]] = VerlGrpoOptions
    options: VerlGrpoOptions

    @property
    def epochs(self) -> float:
        return self.options.epochs

    @property
    def sampling_temperature(self) -> float:
        return self.options.temperature

    def describe(self) -> dict[str, Any]:
        o = self.options
        return {
            "algorithm": "GRPO (verl, group-normalised advantages)",
            **({"preset": o.preset} if o.preset else {}),
            "learning_rate": o.learning_rate,
            "lr_schedule": o.lr_scheduler_type + (f", {o.lr_warmup_steps} warm-up steps" if o.lr_warmup_steps else ""),
            "kl": f"{o.kl_loss_type} loss, coefficient {o.kl_loss_coef}" if o.use_kl_loss else "none",
            "entropy_coeff": o.entropy_coeff,
            "num_generations": o.num_generations,
            "temperature": o.temperature,
            "max_prompt_length": o.max_prompt_length,
            "max_response_length": o.max_response_length,
            "epochs": o.epochs,
            "train_batch_size": o.train_batch_size,
            "ppo_mini_batch_size": o.ppo_mini_batch_size,
            "micro_batch_size_per_gpu": o.ppo_micro_batch_size_per_gpu,
            **o.batches(),
            "gradient_checkpointing": o.gradient_checkpointing,
            "rollout": f"vLLM, tensor parallel {o.tensor_model_parallel_size}, gpu_memory_utilization {o.gpu_memory_utilization}",
            "reward": reward_text(o.reward, o.optimality_bonus),
            **({"total_training_steps": o.total_training_steps} if o.total_training_steps else {}),
        }

    # ------------------------------------------------------------------ the command

    def round_options(self, prompts: int) -> VerlOptions | None:
        """The options a round of ``prompts`` training prompts runs with.

        These options when one ``train_batch_size`` fits. Otherwise verl's dataloader, which drops
        a partial batch, would give the job no batch at all ("Train dataloader is empty!"), so the
        round takes one smaller batch, as the ``trl`` trainer takes one smaller step: as many of the
        prompts as the GPUs can split evenly (all of them unless a GPU count forbids it), its
        optimiser steps of at most ``ppo_mini_batch_size`` prompts (the largest that divides the
        batch and the GPUs) in micro-batches of at most ``ppo_micro_batch_size_per_gpu``; every
        other option as given. None when not even a one-prompt batch divides among the GPUs: the
        round trains nothing (:meth:`train` hands on the starting weights)."""
        o = self.options
        if prompts >= o.train_batch_size:
            return o
        gpus, group = o.nnodes * o.n_gpus_per_node, o.num_generations
        for batch in range(prompts, 0, -1):
            for mini in range(min(batch, o.ppo_mini_batch_size), 0, -1):
                if batch % mini or (mini * group) % gpus:
                    continue
                per_gpu = mini * group // gpus
                micro = max(m for m in range(1, min(per_gpu, o.ppo_micro_batch_size_per_gpu) + 1) if per_gpu % m == 0)
                return type(o).model_validate({**o.model_dump(), "train_batch_size": batch, "ppo_mini_batch_size": mini,
                                               "ppo_micro_batch_size_per_gpu": micro})
        return None

    def short_note(self, prompts: int) -> dict[str, Any]:
        """What a round of ``prompts`` prompts records when they are fewer than one ``train_batch_size`` (else nothing)."""
        o = self.options
        if prompts >= o.train_batch_size:
            return {}
        fitted = self.round_options(prompts)
        if fitted is None:
            gpus = o.nnodes * o.n_gpus_per_node
            return {"short_batch_prompts": 0, "note": (
                f"{prompts} prompts, fewer than one train batch of {o.train_batch_size}, and no batch of them divides among the "
                f"{gpus} GPUs (× {o.num_generations} responses): nothing trained, the starting weights are the checkpoint")}
        dropped = prompts - fitted.train_batch_size
        return {"short_batch_prompts": fitted.train_batch_size, "note": (
            f"{prompts} prompts, fewer than one train batch of {o.train_batch_size}: one batch of {fitted.train_batch_size} "
            f"(optimiser steps of {fitted.ppo_mini_batch_size} prompts, micro-batches of {fitted.ppo_micro_batch_size_per_gpu})"
            + (f"; {dropped} left out so the batch divides among the GPUs" if dropped else ""))}

    def resources(self) -> Resources:
        """The job's GPUs (``nnodes`` × ``n_gpus_per_node``) and a CPU for each GPU's worker plus one for the loop."""
        o = self.options
        return Resources(gpus_per_node=o.n_gpus_per_node, nodes=o.nnodes, cpus=o.n_gpus_per_node + 1)

    def planned_steps(self, prompts: int) -> int:
        """verl's training steps (one rollout of ``train_batch_size`` prompts each) for ``prompts`` prompts; the last partial
        batch is dropped (fewer prompts than one batch: the smaller batch of :meth:`round_options`, or 0 steps)."""
        o = self.round_options(prompts)
        if o is None:
            return 0
        per_epoch = prompts // o.train_batch_size
        steps = int(per_epoch * self.total_epochs())
        return min(steps, o.total_training_steps) if o.total_training_steps else steps

    def total_epochs(self) -> int:
        epochs = self.options.epochs
        if epochs != int(epochs):
            raise ConfigError(f"trainer.verl.epochs: verl trains whole epochs, got {epochs}; use total_training_steps for a part")
        return int(epochs)

    def attention(self) -> tuple[str, bool]:
        """The attention implementation and whether verl may remove padding (packing needs flash-attn's varlen kernels);
        ``auto``: flash_attention_2 when flash-attn imports in the job's Python."""
        choice = self.options.attention
        if choice == "auto":
            choice = "flash_attention_2" if self.job_facts()["flash_attn"]["imports"] else "sdpa"
        return choice, choice == "flash_attention_2"

    def paths(self, out_dir: Path) -> dict[str, Path]:
        out_dir = Path(out_dir).resolve()
        return {
            "train": out_dir / "data" / "train.parquet",
            "validation": out_dir / "data" / "validation.parquet",
            "metrics": out_dir / "verl-metrics.jsonl",
            "log": out_dir / "verl.log",
            "checkpoints": out_dir / "verl-checkpoints",
            "checkpoint": out_dir / "checkpoint",
            "curves": out_dir / "curves.jsonl",
            "outcomes": out_dir / OUTCOMES_DIR,
            "rollouts": out_dir / ROLLOUTS_FILE,
        }

    def overrides(self, request: TrainRequest, prompts: int) -> list[str]:
        """The whole command line after ``-m MODULE``: our base, the options (their batches fitted to
        ``prompts``: :meth:`round_options`), the user's overrides."""
        o = self.round_options(prompts) or self.options
        paths = self.paths(request.out_dir)
        seed = o.seed if o.seed is not None else request.seed
        steps = self.planned_steps(prompts)
        attention, remove_padding = self.attention()
        kwargs = request.chat_template_kwargs
        if kwargs is None:
            from envengineer.plugins.policies.transformers_policy import DEFAULT_CHAT_TEMPLATE_KWARGS

            kwargs = DEFAULT_CHAT_TEMPLATE_KWARGS
        a, r = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
        items: dict[str, Any] = {
            "algorithm.adv_estimator": "grpo",
            "algorithm.use_kl_in_reward": False,
            "critic.enable": False,  # GRPO: no value model
            "data.train_files": str(paths["train"]),
            "data.val_files": str(paths["validation"]),
            "data.train_batch_size": o.train_batch_size,
            "data.max_prompt_length": o.max_prompt_length,
            "data.max_response_length": o.max_response_length,
            "data.filter_overlong_prompts": True,
            "data.truncation": "error",
            "data.seed": seed,
            **{f"+data.apply_chat_template_kwargs.{k}": v for k, v in kwargs.items()},
            "actor_rollout_ref.model.path": str(Path(request.policy_path).resolve()),
            "actor_rollout_ref.model.enable_gradient_checkpointing": o.gradient_checkpointing,
            "actor_rollout_ref.model.use_remove_padding": remove_padding,
            "+actor_rollout_ref.model.override_config.attn_implementation": attention,
            f"{a}.optim.lr": o.learning_rate,
            f"{a}.optim.lr_warmup_steps": o.lr_warmup_steps,
            f"{a}.optim.lr_scheduler_type": o.lr_scheduler_type,
            f"{a}.ppo_mini_batch_size": o.ppo_mini_batch_size,
            f"{a}.ppo_micro_batch_size_per_gpu": o.ppo_micro_batch_size_per_gpu,
            f"{a}.use_kl_loss": o.use_kl_loss,
            f"{a}.kl_loss_coef": o.kl_loss_coef,
            f"{a}.kl_loss_type": o.kl_loss_type,
            f"{a}.entropy_coeff": o.entropy_coeff,
            f"{a}.fsdp_config.param_offload": o.actor_param_offload,
            f"{a}.fsdp_config.optimizer_offload": o.optimizer_offload,
            f"{a}.checkpoint.save_contents": ["hf_model"],
            "actor_rollout_ref.ref.fsdp_config.param_offload": o.ref_param_offload,
            "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": o.log_prob_micro_batch_size_per_gpu,
            **self.memory_overrides(o),
            f"{r}.name": "vllm",
            f"{r}.n": o.num_generations,
            f"{r}.temperature": o.temperature,
            f"{r}.top_p": o.top_p,
            f"{r}.tensor_model_parallel_size": o.tensor_model_parallel_size,
            f"{r}.gpu_memory_utilization": o.gpu_memory_utilization,
            f"{r}.enforce_eager": o.enforce_eager,
            f"{r}.log_prob_micro_batch_size_per_gpu": o.log_prob_micro_batch_size_per_gpu,
            f"{r}.seed": seed,
            **({f"{r}.max_model_len": o.max_model_len} if o.max_model_len else {}),
            "reward.reward_manager.name": "naive",
            "reward.custom_reward_function.path": f"pkg://{REWARD_MODULE}",
            "reward.custom_reward_function.name": "compute_score",
            "+reward.custom_reward_function.reward_kwargs.optimality_bonus": float(o.optimality_bonus),
            # only when not the default, so a default round's command line stays as it was
            **({"+reward.custom_reward_function.reward_kwargs.reward": o.reward} if o.reward != "valid" else {}),
            "+reward.custom_reward_function.reward_kwargs.outcomes": str(paths["outcomes"]),
            "trainer.nnodes": o.nnodes,
            "trainer.n_gpus_per_node": o.n_gpus_per_node,
            "trainer.total_epochs": self.total_epochs(),
            # the steps this round takes, not the option itself: verl saves only at its last step (or a multiple of save_freq),
            # and a total_training_steps beyond what its filtered dataloader holds is never reached, so nothing would be saved
            **({"trainer.total_training_steps": steps} if o.total_training_steps else {}),
            "trainer.save_freq": max(1, steps),  # and verl always saves the last step: one save
            "trainer.test_freq": max(1, steps) if o.verl_validation else -1,
            "trainer.val_before_train": o.verl_validation,
            "trainer.resume_mode": "disable",  # auto would resume from whatever an old run left there
            "trainer.default_local_dir": str(paths["checkpoints"]),
            "trainer.logger": [*dict.fromkeys([*o.loggers, *self.tracker_loggers(request), "file"])],
            "trainer.project_name": (request.trackers.get("wandb") or {}).get("project") or o.project_name,
            "trainer.experiment_name": self.experiment_name(request),
            f"{ENV_PREFIX}VERL_FILE_LOGGER_PATH": str(paths["metrics"]),
            **{f"{ENV_PREFIX}{k}": v for k, v in sorted({**self.tracker_env(request), **o.env}.items())},
            **({"+ray_kwargs.ray_init.address": o.ray_address} if o.ray_address else {}),
        }
        ours = [f"{key}={hydra_string(value) if key.startswith(ENV_PREFIX) else hydra_value(value)}" for key, value in items.items()]
        mine = {override_key(item) for item in o.overrides}
        # the user's overrides replace ours for the same key (Hydra refuses a key given twice)
        return [item for item in ours if override_key(item) not in mine] + list(o.overrides)

    @staticmethod
    def memory_overrides(o: VerlOptions) -> dict[str, Any]:
        """Token-bounded micro-batches, chunked entropy and the reference's dtype: only when not verl's defaults,
        so a default round's command line stays as it was."""
        a, r, ref = "actor_rollout_ref.actor", "actor_rollout_ref.rollout", "actor_rollout_ref.ref"
        items: dict[str, Any] = {}
        if o.use_dynamic_bsz:
            for section, prefix in ((a, "ppo_"), (r, "log_prob_"), (ref, "log_prob_")):
                items[f"{section}.{'use_dynamic_bsz' if section == a else 'log_prob_use_dynamic_bsz'}"] = True
                items[f"{section}.{prefix}max_token_len_per_gpu"] = o.max_token_len_per_gpu
        if o.entropy_chunking:
            items[f"{a}.entropy_from_logits_with_chunking"] = True
            items[f"{ref}.entropy_from_logits_with_chunking"] = True
        if o.ref_dtype != "fp32":
            items[f"{ref}.fsdp_config.model_dtype"] = o.ref_dtype
        return items

    def memory_plan(self, model: Any, gpu_bytes: float) -> Any:
        from envengineer.plugins.trainers.verl_memory import verl_memory

        return verl_memory(self.options, model, gpu_bytes)

    def command(self, overrides: list[str]) -> list[str]:
        return [self.options.python or sys.executable, "-m", self.options.module, *overrides]

    def environment(self, request: TrainRequest) -> dict[str, str]:
        """Variables set for verl (the file logger's path and the trackers' settings also go into Ray's runtime env)."""
        paths = self.paths(request.out_dir)
        return {"VERL_FILE_LOGGER_PATH": str(paths["metrics"]), "RAY_USAGE_STATS_ENABLED": "0", **self.tracker_env(request),
                **self.options.env}

    # ------------------------------------------------------------------ the run's trackers

    def tracker_loggers(self, request: TrainRequest) -> list[str]:
        """verl's own loggers for the run's live trackers (verl's ``Tracking`` has tensorboard, wandb and mlflow)."""
        return [name for name in TRACKER_LOGGERS if name in request.trackers]

    def experiment_name(self, request: TrainRequest) -> str:
        """verl's ``trainer.experiment_name``: ``round-NN``, or ``<arm>/seed-<s>/round-NN`` when trackers log it
        (the W&B or MLflow run verl starts for the round)."""
        round_name = f"round-{request.round:02d}"
        if not self.tracker_loggers(request):
            return round_name
        names = [settings.get("name") for settings in request.trackers.values() if settings.get("name")]
        return f"{names[0]}/{round_name}" if names else round_name

    def tracker_env(self, request: TrainRequest) -> dict[str, str]:
        """Where verl's loggers write for the run's trackers. verl counts its steps from 1 each round and cannot
        start from the round's offset, so each round is a run of its own beside the tracker's (TensorBoard:
        ``<tb>/verl/round-NN``; W&B: a run in the tracker's group, job type ``verl-round``; MLflow: a run in the
        tracker's store); the tracker's own run gets the round's ``curves.jsonl`` at the round's offset. Never a key:
        verl's workers read those from their own environment."""
        env: dict[str, str] = {}
        tb = request.trackers.get("tensorboard")
        if tb and tb.get("log_dir"):
            env["TENSORBOARD_DIR"] = str(Path(tb["log_dir"]) / "verl" / f"round-{request.round:02d}")
        wandb = request.trackers.get("wandb")
        if wandb:
            env.update({"WANDB_RUN_GROUP": str(wandb.get("group") or wandb.get("name") or ""), "WANDB_JOB_TYPE": "verl-round"})
            env.update({key: str(wandb[field]) for key, field in (("WANDB_DIR", "dir"), ("WANDB_MODE", "mode"), ("WANDB_ENTITY", "entity"))
                        if wandb.get(field)})
        mlflow = request.trackers.get("mlflow")
        if mlflow and mlflow.get("tracking_uri") and "@" not in str(mlflow["tracking_uri"]):  # a URI with credentials stays in the environment
            env["MLFLOW_TRACKING_URI"] = str(mlflow["tracking_uri"])
        return {k: v for k, v in env.items() if v}

    def check(self, overrides: list[str]) -> Any:
        """The overrides composed with verl's Hydra config and checked by verl's ``validate_config``."""
        return check_overrides(overrides)

    # ------------------------------------------------------------------ data

    def write_data(self, request: TrainRequest) -> dict[str, Any]:
        from envengineer.plugins.trainers.verl_data import verl_rows, write_parquet

        if not request.records:
            raise ConfigError("trainer.verl: the round has no training instances")
        o = self.options
        if isinstance(request.generator.render(request.records[0], request.prompt_style), str):
            raise ConfigError(
                f"trainer.verl: the policy's prompt style {request.prompt_style!r} gives plain-string prompts, and verl applies "
                "the chat template to every prompt, so training would see other prompts than evaluation; use a chat "
                "prompt style (e.g. full)"
            )
        paths = self.paths(request.out_dir)
        task = request.task
        train = verl_rows(request.records, request.generator, split="train", style=request.prompt_style, task=task)
        validation_records = request.validation_records or request.records[: o.train_batch_size]
        validation = verl_rows(validation_records, request.generator, split="validation", style=request.prompt_style, task=task)
        write_parquet(train, paths["train"])
        write_parquet(validation, paths["validation"])
        return {"train": str(paths["train"]), "train_rows": len(train), "validation": str(paths["validation"]), "validation_rows": len(validation)}

    def count_kept(self, request: TrainRequest, data: dict[str, Any]) -> dict[str, int]:
        """The round's prompts that verl's length filter keeps (:func:`verl_data.kept_rows`, verl's own dataset), and how
        many it drops: the batches, the steps and the save are planned on the kept ones. Every prompt dropped fails here,
        before launch."""
        from envengineer.plugins.trainers.verl_data import kept_rows

        rows = data["train_rows"]
        kept = kept_rows(self.check(self.overrides(request, rows)))
        if kept == 0:
            raise ConfigError(
                f"trainer.verl.max_prompt_length: all {rows} of the round's prompts are longer than {self.options.max_prompt_length} "
                "tokens with the chat template, and verl's filter_overlong_prompts drops them all; raise max_prompt_length"
            )
        return {"kept_rows": kept, "dropped_prompts": rows - kept}

    def plan(self, request: TrainRequest) -> dict[str, Any]:
        """Write the round's data and return the exact command, checked against verl (nothing is launched)."""
        data = self.write_data(request)
        data.update(self.count_kept(request, data))
        prompts = data["kept_rows"]
        fitted, note = self.round_options(prompts), self.short_note(prompts)
        if fitted is None:  # nothing to launch: the round hands on its starting weights
            return {"data": data, "steps": 0, **note}
        overrides = self.overrides(request, prompts)
        self.check(overrides)
        env = self.environment(request)
        return {
            "command": shlex.join(self.command(overrides)),
            "env": env,
            "data": data,
            "steps": self.planned_steps(prompts),
            "batches": fitted.batches(),
            **note,
        }

    # ------------------------------------------------------------------ one round

    def train(self, request: TrainRequest) -> TrainResult:
        from envengineer.plugins.trainers.verl_checkpoint import hand_off

        out_dir = Path(request.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = self.paths(out_dir)
        started = time.perf_counter()
        data = self.write_data(request)
        data.update(self.count_kept(request, data))
        prompts = data["kept_rows"]
        if self.round_options(prompts) is None:
            return self.carry_forward(request, paths, data, started)
        overrides = self.overrides(request, prompts)
        cfg = self.check(overrides)
        self.preflight(cfg)
        steps = self.planned_steps(prompts)
        launch = {**self.launch_record(), "prompts_dropped": data["dropped_prompts"]}
        if self.options.nnodes > 1 and self.options.check_nodes:
            launch["nodes"] = self.check_nodes(Path(request.policy_path), out_dir)
        self.warn_slow_attention(launch)
        shutil.rmtree(paths["outcomes"], ignore_errors=True)  # an earlier attempt's responses are not this round's
        paths["outcomes"].mkdir(parents=True)
        lines = self.launch(self.command(overrides), {**os.environ, **self.environment(request)}, paths, steps)
        checkpoint = hand_off(paths["checkpoints"], paths["checkpoint"], keep=self.options.keep_verl_checkpoint)
        metrics = self.round_metrics(lines, data, started)
        metrics.update(self.write_rollouts(request, paths))
        return TrainResult(checkpoint=checkpoint, curves=paths["curves"], metrics=metrics, launch=launch)

    def carry_forward(self, request: TrainRequest, paths: dict[str, Path], data: dict[str, Any], started: float) -> TrainResult:
        """A round no batch fits (:meth:`round_options` None): verl is not launched, the starting model is copied as
        the round's checkpoint, the curves are empty, and the metrics say so (as the ``trl`` trainer's round that
        kept no prompt)."""
        from envengineer.api import write_jsonl
        from envengineer.plugins.trainers.rollouts import prompt_line

        checkpoint = paths["checkpoint"]
        shutil.rmtree(checkpoint, ignore_errors=True)
        shutil.copytree(Path(request.policy_path), checkpoint)
        paths["curves"].write_text("")
        record_id = request.generator.record_id
        write_jsonl(paths["rollouts"], [prompt_line(record_id(r)) for r in request.records])
        metrics = {"prompts_given": data["train_rows"], "prompts_dropped": data["dropped_prompts"], "prompts_used": 0,
                   "trained_prompts": 0, "steps": 0, "completions": 0, "seconds": round(time.perf_counter() - started, 2),
                   **self.short_note(data["kept_rows"])}
        return TrainResult(checkpoint=checkpoint, curves=paths["curves"], metrics=metrics)

    def write_rollouts(self, request: TrainRequest, paths: dict[str, Path]) -> dict[str, Any]:
        """``rollouts.jsonl`` from the outcomes our reward function recorded (the folder is then removed); the metrics it gives."""
        from envengineer.api import write_jsonl
        from envengineer.plugins.trainers.verl_data import read_rollouts

        lines = read_rollouts(paths["outcomes"], request.records, request.generator, self.options.num_generations)
        shutil.rmtree(paths["outcomes"], ignore_errors=True)
        if lines is None:
            return {"rollouts": f"none recorded: no training response reached {paths['outcomes']}"}
        write_jsonl(paths["rollouts"], lines)
        return {"trained_prompts": sum(line["kept"] for line in lines), "rollout_samples": sum(line["samples"] for line in lines)}

    def launch(self, command: list[str], env: dict[str, str], paths: dict[str, Path], steps: int) -> list[dict[str, Any]]:
        """Run verl, its output to ``verl.log``, its metrics into ``curves.jsonl`` as they come; the curve lines."""
        o = self.options
        return run_job(command, env, paths, steps, o.module, stall_timeout_s=o.stall_timeout_s, grace_s=o.kill_grace_seconds)

    def round_metrics(self, lines: list[dict[str, Any]], data: dict[str, Any], started: float) -> dict[str, Any]:
        def mean(key: str) -> float | None:
            values = [line[key] for line in lines if line.get(key) is not None]
            return round(sum(values) / len(values), 4) if values else None

        step_seconds = [line["step_seconds"] for line in lines if line.get("step_seconds") is not None]
        prompts = data["kept_rows"]
        fitted = self.round_options(prompts) or self.options
        batches = fitted.batches()
        return {
            "prompts_given": data["train_rows"],
            "prompts_dropped": data["dropped_prompts"],  # longer than max_prompt_length: verl's filter
            "prompts_used": prompts if fitted is self.options else fitted.train_batch_size,
            "steps": lines[-1]["step"],
            "seconds": round(time.perf_counter() - started, 2),
            "train_seconds": round(sum(step_seconds), 2) if step_seconds else None,
            "completions": lines[-1]["step"] * batches["responses_per_rollout"],
            "reward_mean": mean("reward_mean"),
            "completion_length": mean("completion_length"),
            "throughput_tokens_per_gpu_s": mean("throughput"),
            "last_reward_mean": lines[-1].get("reward_mean"),
            **self.short_note(prompts),
        }
