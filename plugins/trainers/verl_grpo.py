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
``curves.jsonl`` the reports read, while the job runs. A non-zero exit fails the round with
the tail of ``verl.log``. The saved model becomes the round's checkpoint: the next round
starts from it and uses it as its reference model, as in the paper.

Everything up to the launch (overrides, data, reward, checkpoint hand-off, metrics) is tested
on CPU against the installed verl; the training itself needs CUDA GPUs and vLLM.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from envengineer.components import Trainer
from envengineer.errors import ConfigError, EnvEngineerError
from envengineer.training import CURVE_KEYS, TrainRequest, TrainResult, reward_text

#: Named sets of option values; a preset fills the options a user did not set.
PRESETS: dict[str, dict[str, Any]] = {
    # The paper's setup: Qwen3-4B, GRPO, 4×H100 (one node).
    # Batch reading: the paper's "1024 samples per mini-batch, 8 accumulation steps, micro-batch 4,
    # 4 GPUs" fits a rollout of train_batch_size 128 prompts × n 8 = 1024 responses, split into
    # optimiser steps of ppo_mini_batch_size 16 prompts (128 responses: 4 GPUs × micro-batch 4 × 8
    # accumulation steps). For the literal reading (one optimiser step over all 1024 responses,
    # 64 accumulation steps per GPU) set ppo_mini_batch_size: 128.
    "paper-4xh100": {
        "nnodes": 1,
        "n_gpus_per_node": 4,
        "learning_rate": 2e-6,
        "lr_scheduler_type": "constant",
        "lr_warmup_steps": 0,
        "use_kl_loss": True,
        "kl_loss_type": "low_var_kl",
        "kl_loss_coef": 0.001,
        "entropy_coeff": 0.0,
        "num_generations": 8,
        "max_prompt_length": 1536,
        "max_response_length": 5120,
        "epochs": 3,
        "train_batch_size": 128,
        "ppo_mini_batch_size": 16,
        "ppo_micro_batch_size_per_gpu": 4,
        "log_prob_micro_batch_size_per_gpu": 4,
        "tensor_model_parallel_size": 2,
        "gpu_memory_utilization": 0.55,
        "ref_param_offload": True,
        "gradient_checkpointing": True,
    },
}

#: verl's file-logger keys -> curves.jsonl keys (the first key present wins).
METRIC_KEYS: dict[str, tuple[str, ...]] = {
    "reward_mean": ("critic/score/mean", "critic/rewards/mean"),
    "kl": ("actor/kl_loss",),
    "completion_length": ("response_length/mean",),
    "loss": ("actor/pg_loss",),
    "learning_rate": ("actor/lr",),
    # beyond CURVE_KEYS: diagnostics
    "grad_norm": ("actor/grad_norm",),
    "throughput": ("perf/throughput",),
    "step_seconds": ("timing_s/step",),
    "epoch": ("training/epoch",),
}

REWARD_MODULE = "envengineer.plugins.trainers.verl_data"
ENV_PREFIX = "+ray_kwargs.ray_init.runtime_env.env_vars."
INSTALL_HINT = 'pip install "envengineer[train,verl]" (verl 0.9.1 with vLLM and TransferQueue; CUDA machines)'
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9_./:@+-]*$")


def hydra_value(value: Any) -> str:
    """``value`` written as a Hydra override value (quoted when it holds characters Hydra reads)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    text = str(value)
    if text and _SAFE_VALUE.match(text) and text.lower() not in ("true", "false", "null") and not _number(text):
        return text
    return _quoted(text)


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def hydra_string(value: Any) -> str:
    """``value`` as a Hydra override value that always reads back as a string (Ray wants string env vars)."""
    return _quoted(str(value))


def _quoted(text: str) -> str:
    """Hydra's quoted string: a backslash escapes only a quote or the closing quote, so only the
    backslashes before a quote or the end are doubled."""
    return "'" + re.sub(r"(\\*)('|$)", lambda m: m.group(1) * 2 + ("\\'" if m.group(2) else ""), text) + "'"


def override_key(item: str) -> str:
    """The key of an override (``+a.b=1`` -> ``a.b``)."""
    return item.split("=", 1)[0].lstrip("+~")


class VerlOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    preset: Literal["paper-4xh100"] | None = Field(None, description="fills every option not given here (see PRESETS)")
    # -- cluster
    nnodes: int = Field(1, ge=1, description="nodes of the Ray cluster")
    n_gpus_per_node: int = Field(1, ge=1)
    ray_address: str | None = Field(None, description="an existing Ray cluster (e.g. 'auto' on its head node); default: verl starts a local one")
    # -- optimiser and loss
    learning_rate: float = Field(1e-6, gt=0)
    lr_scheduler_type: Literal["constant", "cosine"] = "constant"
    lr_warmup_steps: int = Field(0, ge=0)
    use_kl_loss: bool = Field(True, description="KL to the round's starting model as a loss term (GRPO)")
    kl_loss_type: Literal["kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3", "full"] = "low_var_kl"
    kl_loss_coef: float = Field(0.001, ge=0)
    entropy_coeff: float = Field(0.0, ge=0)
    optimality_bonus: float = Field(0.0, ge=0, description="added to R_acc for an optimal answer (0: off)")
    reward: Literal["valid", "score"] = Field(
        "valid", description="valid: R_acc (1 for a valid answer, 0 otherwise); score: the validator's graded score in [0, 1]",
    )
    # -- rollout
    num_generations: int = Field(8, ge=2, description="responses per prompt (rollout n: the GRPO group)")
    temperature: float = Field(1.0, gt=0, le=2.0)
    top_p: float = Field(1.0, gt=0, le=1.0)
    max_prompt_length: int = Field(1536, ge=16, description="tokens; longer prompts are dropped (filter_overlong_prompts)")
    max_response_length: int = Field(2048, ge=1)
    tensor_model_parallel_size: int = Field(1, ge=1, description="vLLM tensor parallelism")
    gpu_memory_utilization: float = Field(0.5, gt=0, le=1)
    enforce_eager: bool = Field(False, description="no CUDA graphs in vLLM (faster start, slower decoding: short runs)")
    max_model_len: int | None = Field(None, ge=32, description="vLLM context length (default: prompt + response length)")
    # -- batches (counted in prompts, as verl counts them)
    epochs: float = Field(1, gt=0, description="passes over the round's training set (whole passes: verl's total_epochs)")
    train_batch_size: int = Field(128, ge=1, description="prompts per rollout (× num_generations responses)")
    ppo_mini_batch_size: int = Field(16, ge=1, description="prompts per optimiser step")
    ppo_micro_batch_size_per_gpu: int = Field(4, ge=1, description="responses per forward/backward pass on one GPU")
    log_prob_micro_batch_size_per_gpu: int = Field(4, ge=1, description="responses per log-prob pass (rollout and reference)")
    total_training_steps: int | None = Field(None, ge=1, description="stop after this many steps (default: epochs × batches)")
    # -- memory
    gradient_checkpointing: bool = True
    actor_param_offload: bool = False
    optimizer_offload: bool = False
    ref_param_offload: bool = Field(False, description="keep the reference model's weights on the CPU")
    attention: Literal["auto", "flash_attention_2", "sdpa", "eager"] = Field(
        "auto", description="auto: flash_attention_2 with padding removal when flash-attn is installed, else sdpa without it",
    )
    # -- launch
    seed: int | None = Field(None, description="data shuffling and rollout seed (default: the loop's seed for the round)")
    verl_validation: bool = Field(False, description="let verl also score the validation set before and after training (the loop evaluates anyway)")
    loggers: list[str] = Field(default_factory=lambda: ["console"], description="verl loggers (console, wandb, tensorboard); file is always added")
    project_name: str = Field("envengineer", description="verl's trainer.project_name (wandb project)")
    overrides: list[str] = Field(default_factory=list, description="your own Hydra overrides for verl, applied last and checked like ours")
    module: str = Field("verl.trainer.main_ppo", description="the entry point run as python -m MODULE (a recipe's own main works too)")
    python: str | None = Field(None, description="the Python that runs verl (default: this one)")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment variables for verl (and its Ray workers)")
    keep_verl_checkpoint: bool = Field(False, description="keep verl's checkpoint folder (FSDP shards) besides the round's model")

    @model_validator(mode="before")
    @classmethod
    def _apply_preset(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("preset") is not None:
            preset = PRESETS.get(data["preset"])
            if preset is not None:  # an unknown name is refused by the Literal
                data = {**preset, **data}
        return data

    @model_validator(mode="after")
    def _batches_divide(self) -> "VerlOptions":
        gpus = self.nnodes * self.n_gpus_per_node
        if self.train_batch_size % self.ppo_mini_batch_size:
            raise ValueError(
                f"train_batch_size ({self.train_batch_size}) must be a multiple of ppo_mini_batch_size "
                f"({self.ppo_mini_batch_size}): a rollout splits into whole optimiser steps"
            )
        responses = self.ppo_mini_batch_size * self.num_generations
        if responses % gpus:
            raise ValueError(
                f"ppo_mini_batch_size × num_generations ({responses} responses per optimiser step) must divide "
                f"among the {gpus} GPUs (nnodes × n_gpus_per_node)"
            )
        if (responses // gpus) % self.ppo_micro_batch_size_per_gpu:
            raise ValueError(
                f"each GPU's {responses // gpus} responses per optimiser step must be a multiple of "
                f"ppo_micro_batch_size_per_gpu ({self.ppo_micro_batch_size_per_gpu})"
            )
        if gpus % self.tensor_model_parallel_size:
            raise ValueError(f"{gpus} GPUs cannot hold vLLM engines of tensor_model_parallel_size {self.tensor_model_parallel_size}")
        if (self.train_batch_size * self.num_generations) % gpus:
            raise ValueError(
                f"train_batch_size × num_generations ({self.train_batch_size * self.num_generations}) must divide among the {gpus} GPUs"
            )
        for item in self.overrides:
            if "=" not in item or not override_key(item):
                raise ValueError(f"overrides: {item!r} is not a Hydra override (key=value, +key=value or ~key)")
        return self

    def batches(self) -> dict[str, int]:
        """The batch arithmetic, in prompts and responses."""
        gpus = self.nnodes * self.n_gpus_per_node
        per_gpu = self.ppo_mini_batch_size * self.num_generations // gpus
        return {
            "gpus": gpus,
            "responses_per_rollout": self.train_batch_size * self.num_generations,
            "optimizer_steps_per_rollout": self.train_batch_size // self.ppo_mini_batch_size,
            "responses_per_optimizer_step": self.ppo_mini_batch_size * self.num_generations,
            "responses_per_gpu_per_optimizer_step": per_gpu,
            "gradient_accumulation_steps": per_gpu // self.ppo_micro_batch_size_per_gpu,
        }


def flash_attn_available() -> bool:
    return importlib.util.find_spec("flash_attn") is not None


class VerlGrpoTrainer(Trainer):
    name: ClassVar[str] = "verl"
    description: ClassVar[str] = "GRPO with verl (FSDP actor, vLLM rollouts) on one or more GPU nodes through Ray"
    Options: ClassVar[type[BaseModel]] = VerlOptions
    options: VerlOptions

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

    def planned_steps(self, prompts: int) -> int:
        """verl's training steps (one rollout of ``train_batch_size`` prompts each) for ``prompts`` prompts; the last partial batch is dropped."""
        o = self.options
        per_epoch = prompts // o.train_batch_size
        steps = int(per_epoch * self.total_epochs())
        return min(steps, o.total_training_steps) if o.total_training_steps else steps

    def total_epochs(self) -> int:
        epochs = self.options.epochs
        if epochs != int(epochs):
            raise ConfigError(f"trainer.verl.epochs: verl trains whole epochs, got {epochs}; use total_training_steps for a part")
        return int(epochs)

    def attention(self) -> tuple[str, bool]:
        """The attention implementation and whether verl may remove padding (packing needs flash-attn's varlen kernels)."""
        choice = self.options.attention
        if choice == "auto":
            choice = "flash_attention_2" if flash_attn_available() else "sdpa"
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
        }

    def overrides(self, request: TrainRequest, prompts: int) -> list[str]:
        """The whole command line after ``-m MODULE``: our base, the options, the user's overrides."""
        o = self.options
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
            "trainer.nnodes": o.nnodes,
            "trainer.n_gpus_per_node": o.n_gpus_per_node,
            "trainer.total_epochs": self.total_epochs(),
            **({"trainer.total_training_steps": o.total_training_steps} if o.total_training_steps else {}),
            "trainer.save_freq": max(1, steps),  # and verl always saves the last step: one save
            "trainer.test_freq": max(1, steps) if o.verl_validation else -1,
            "trainer.val_before_train": o.verl_validation,
            "trainer.resume_mode": "disable",  # auto would resume from whatever an old run left there
            "trainer.default_local_dir": str(paths["checkpoints"]),
            "trainer.logger": [*dict.fromkeys([*o.loggers, "file"])],
            "trainer.project_name": o.project_name,
            "trainer.experiment_name": f"round-{request.round:02d}",
            f"{ENV_PREFIX}VERL_FILE_LOGGER_PATH": str(paths["metrics"]),
            **{f"{ENV_PREFIX}{k}": v for k, v in sorted(o.env.items())},
            **({"+ray_kwargs.ray_init.address": o.ray_address} if o.ray_address else {}),
        }
        ours = [f"{key}={hydra_string(value) if key.startswith(ENV_PREFIX) else hydra_value(value)}" for key, value in items.items()]
        mine = {override_key(item) for item in o.overrides}
        # the user's overrides replace ours for the same key (Hydra refuses a key given twice)
        return [item for item in ours if override_key(item) not in mine] + list(o.overrides)

    def command(self, overrides: list[str]) -> list[str]:
        return [self.options.python or sys.executable, "-m", self.options.module, *overrides]

    def environment(self, request: TrainRequest) -> dict[str, str]:
        """Variables set for verl (the file logger's path also goes into Ray's runtime env)."""
        paths = self.paths(request.out_dir)
        return {"VERL_FILE_LOGGER_PATH": str(paths["metrics"]), "RAY_USAGE_STATS_ENABLED": "0", **self.options.env}

    def check(self, overrides: list[str]) -> Any:
        """Compose ``overrides`` with verl's Hydra config and run verl's own ``validate_config``.

        Returns the composed config; any problem is a :class:`ConfigError` naming the key.
        """
        try:
            import importlib.resources as resources

            from hydra import compose, initialize_config_dir
            from hydra.errors import HydraException
            from omegaconf.errors import OmegaConfBaseException
        except ImportError:
            raise ConfigError(f"trainer.verl: verl and hydra-core are not installed: {INSTALL_HINT}") from None
        if importlib.util.find_spec("verl") is None:
            raise ConfigError(f"trainer.verl: verl is not installed: {INSTALL_HINT}")
        config_dir = str(resources.files("verl") / "trainer" / "config")
        try:
            with initialize_config_dir(config_dir=config_dir, version_base=None):
                cfg = compose(config_name="ppo_trainer", overrides=overrides)
        except (HydraException, OmegaConfBaseException, ValueError) as exc:
            raise ConfigError(f"trainer.verl: verl's config refused the overrides: {' '.join(str(exc).split())}") from None
        from verl.trainer.ppo.utils import need_critic, need_reference_policy
        from verl.utils.config import validate_config

        try:
            validate_config(config=cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
        except (AssertionError, ValueError, TypeError, KeyError, OmegaConfBaseException) as exc:
            raise ConfigError(f"trainer.verl: verl's validate_config refused the settings: {' '.join(str(exc).split()) or type(exc).__name__}") from None
        return cfg

    def preflight(self, cfg: Any) -> None:
        """What verl's own entry point needs installed to launch (not for the checks above); another
        ``module`` (a recipe's main) is trusted to know its own needs."""
        if not self.options.module.startswith("verl."):
            return
        if cfg.trainer.get("use_v1", False) and importlib.util.find_spec("transfer_queue") is None:
            raise ConfigError(
                "trainer.verl: verl's main_ppo imports TransferQueue (trainer.use_v1 is true) and it is not installed; "
                f"plain `pip install verl` does not bring it: {INSTALL_HINT}, or pip install 'TransferQueue>=0.1.10'"
            )
        if importlib.util.find_spec("vllm") is None:
            raise ConfigError(f"trainer.verl: vLLM (verl's rollout engine) is not installed: {INSTALL_HINT}")

    # ------------------------------------------------------------------ data

    def write_data(self, request: TrainRequest) -> dict[str, Any]:
        from envengineer.plugins.trainers.verl_data import verl_rows, write_parquet

        if not request.records:
            raise ConfigError("trainer.verl: the round has no training instances")
        o = self.options
        if len(request.records) < o.train_batch_size:
            raise ConfigError(
                f"trainer.verl.train_batch_size: {o.train_batch_size} prompts per step but the round has only "
                f"{len(request.records)} instances (budget): verl drops the last partial batch, so nothing would train"
            )
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

    def plan(self, request: TrainRequest) -> dict[str, Any]:
        """Write the round's data and return the exact command, checked against verl (nothing is launched)."""
        data = self.write_data(request)
        overrides = self.overrides(request, data["train_rows"])
        self.check(overrides)
        env = self.environment(request)
        return {
            "command": shlex.join(self.command(overrides)),
            "env": env,
            "data": data,
            "steps": self.planned_steps(data["train_rows"]),
            "batches": self.options.batches(),
        }

    # ------------------------------------------------------------------ one round

    def train(self, request: TrainRequest) -> TrainResult:
        from envengineer.plugins.trainers.verl_checkpoint import hand_off

        out_dir = Path(request.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = self.paths(out_dir)
        started = time.perf_counter()
        data = self.write_data(request)
        overrides = self.overrides(request, data["train_rows"])
        cfg = self.check(overrides)
        self.preflight(cfg)
        steps = self.planned_steps(data["train_rows"])
        lines = self.launch(self.command(overrides), {**os.environ, **self.environment(request)}, paths, steps)
        checkpoint = hand_off(paths["checkpoints"], paths["checkpoint"], keep=self.options.keep_verl_checkpoint)
        return TrainResult(checkpoint=checkpoint, curves=paths["curves"], metrics=self.round_metrics(lines, data, started))

    def launch(self, command: list[str], env: dict[str, str], paths: dict[str, Path], steps: int) -> list[dict[str, Any]]:
        """Run verl, its output to ``verl.log``, its metrics into ``curves.jsonl`` as they come; the curve lines."""
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        for key in ("metrics", "curves"):
            paths[key].unlink(missing_ok=True)
        paths["curves"].write_text("")
        follower = MetricsFollower(paths["metrics"], paths["curves"])
        with paths["log"].open("wb") as log, Progress(
            TextColumn("verl GRPO"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[reward]}"), TimeElapsedColumn(),
            transient=True,
        ) as progress:
            log.write(("$ " + shlex.join(command) + "\n").encode())
            log.flush()
            task = progress.add_task("train", total=steps or None, reward="")
            process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(paths["log"].parent))
            try:
                while process.poll() is None:
                    time.sleep(1.0)
                    self._advance(progress, task, follower.poll())
            except BaseException:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                raise
            self._advance(progress, task, follower.poll())
        if process.returncode != 0:
            raise TrainingFailed(
                f"trainer.verl: {self.options.module} exited with code {process.returncode}; the end of {paths['log']}:\n"
                + log_tail(paths["log"])
            )
        if not follower.lines:
            raise TrainingFailed(f"trainer.verl: verl finished but logged no training step to {paths['metrics']}; see {paths['log']}")
        return follower.lines

    @staticmethod
    def _advance(progress: Any, task: Any, new: list[dict[str, Any]]) -> None:
        if new:
            reward = new[-1].get("reward_mean")
            progress.update(task, completed=new[-1]["step"], reward="" if reward is None else f"reward {reward:.3f}")

    def round_metrics(self, lines: list[dict[str, Any]], data: dict[str, Any], started: float) -> dict[str, Any]:
        def mean(key: str) -> float | None:
            values = [line[key] for line in lines if line.get(key) is not None]
            return round(sum(values) / len(values), 4) if values else None

        step_seconds = [line["step_seconds"] for line in lines if line.get("step_seconds") is not None]
        batches = self.options.batches()
        return {
            "prompts_given": data["train_rows"],
            "prompts_used": data["train_rows"],
            "steps": lines[-1]["step"],
            "seconds": round(time.perf_counter() - started, 2),
            "train_seconds": round(sum(step_seconds), 2) if step_seconds else None,
            "completions": lines[-1]["step"] * batches["responses_per_rollout"],
            "reward_mean": mean("reward_mean"),
            "completion_length": mean("completion_length"),
            "throughput_tokens_per_gpu_s": mean("throughput"),
            "last_reward_mean": lines[-1].get("reward_mean"),
        }


class TrainingFailed(EnvEngineerError):
    """The training job failed (its log's tail is in the message)."""


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def curve_line(step: int, data: dict[str, Any]) -> dict[str, Any]:
    """One line of curves.jsonl from one line of verl's file logger."""
    line: dict[str, Any] = {"step": int(step)}
    for key in CURVE_KEYS[1:]:
        line[key] = None
    for target, sources in METRIC_KEYS.items():
        for source in sources:
            value = data.get(source)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                line[target] = float(value)
                break
    return line


class MetricsFollower:
    """Reads verl's file-logger lines as they are written and appends curve lines to ``curves.jsonl``.

    Only training steps become curve lines: validation-only lines (``val-core/...`` keys and
    no training metrics) are skipped. A line still being written (no newline yet) waits.
    """

    def __init__(self, source: Path, curves: Path) -> None:
        self.source, self.curves = Path(source), Path(curves)
        self.offset = 0
        self.lines: list[dict[str, Any]] = []

    def poll(self) -> list[dict[str, Any]]:
        if not self.source.exists():
            return []
        with self.source.open("rb") as handle:
            handle.seek(self.offset)
            chunk = handle.read()
        end = chunk.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        new = []
        for raw in chunk[: end + 1].splitlines():
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            data, step = entry.get("data"), entry.get("step")
            if not isinstance(data, dict) or not isinstance(step, int):
                continue
            line = curve_line(step, data)
            if line["reward_mean"] is None and line["loss"] is None:
                continue  # validation only
            new.append(line)
        if new:
            with self.curves.open("a") as handle:
                for line in new:
                    handle.write(json.dumps(line) + "\n")
            self.lines.extend(new)
        return new
