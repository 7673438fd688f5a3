"""The `verl` trainer's options, its presets, and its command line as Hydra overrides.

:class:`VerlOptions` is the run config's ``trainer: {name: verl, ...}`` section; a preset fills the
options a user did not set. :func:`check_overrides` composes a command line with the installed
verl's own Hydra config and runs verl's ``validate_config``, so a typo or an impossible batch
fails before anything is launched.
"""

from __future__ import annotations

import importlib.util
import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from envengineer.api import ConfigError

#: The paper's "1024 samples per mini-batch, 8 gradient-accumulation steps, per-GPU micro-batch 4,
#: 4 GPUs" (8 responses per prompt, 128 prompts per rollout) read three ways; ``batch_reading`` picks
#: one and fills ``ppo_mini_batch_size`` and ``ppo_micro_batch_size_per_gpu`` unless they are given.
#: mini-batch: verl's own words (its mini-batch is ``ppo_mini_batch_size``, its micro-batch
#: ``ppo_micro_batch_size_per_gpu``): one optimiser update over all 1024 responses per rollout, in
#: micro-batches of 4 (64 accumulation steps on each of 4 GPUs). accumulation: the product 4 GPUs x
#: micro-batch 4 x 8 steps = 128 responses per update, 8 updates per rollout. micro-batch-32: one
#: update over the 1024 responses in 8 accumulation steps, so micro-batches of 32 responses per GPU.
BATCH_READINGS: dict[str, dict[str, int]] = {
    "mini-batch": {"ppo_mini_batch_size": 128, "ppo_micro_batch_size_per_gpu": 4},
    "accumulation": {"ppo_mini_batch_size": 16, "ppo_micro_batch_size_per_gpu": 4},
    "micro-batch-32": {"ppo_mini_batch_size": 128, "ppo_micro_batch_size_per_gpu": 32},
}

#: Named sets of option values; a preset fills the options a user did not set.
PRESETS: dict[str, dict[str, Any]] = {
    # The paper's setup: Qwen3-4B, GRPO, 4×H100 (one node); the batch reading: BATCH_READINGS.
    # Micro-batches bounded by tokens (16,384 per GPU: two sequences of the longest prompt and response, or many shorter ones),
    # entropy from chunked logits, the reference model in bf16 (verl 0.9.1 loads every FSDP model in
    # fp32 by default; 0.6.1, the paper's version, loaded the reference in bf16).
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
        "batch_reading": "mini-batch",
        "log_prob_micro_batch_size_per_gpu": 4,
        "use_dynamic_bsz": True,
        "max_token_len_per_gpu": 16384,
        "entropy_chunking": True,
        "ref_dtype": "bf16",
        "tensor_model_parallel_size": 2,
        "gpu_memory_utilization": 0.55,
        "ref_param_offload": True,
        "gradient_checkpointing": True,
    },
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
    batch_reading: Literal["mini-batch", "accumulation", "micro-batch-32"] | None = Field(
        None, description="fills ppo_mini_batch_size and ppo_micro_batch_size_per_gpu from a reading of the paper's batch "
        "(BATCH_READINGS) unless they are given",
    )
    use_dynamic_bsz: bool = Field(False, description="micro-batches bounded by tokens (max_token_len_per_gpu), not by responses, "
                                  "in the actor's update and the log-prob passes")
    max_token_len_per_gpu: int = Field(16384, ge=1, description="use_dynamic_bsz: tokens (prompt + response) per micro-batch on one GPU")
    # -- memory
    gradient_checkpointing: bool = True
    actor_param_offload: bool = Field(False, description="the actor's weights (and gradients) on the CPU between its passes")
    optimizer_offload: bool = Field(False, description="the optimizer state on the CPU between updates")
    ref_param_offload: bool = Field(False, description="keep the reference model's weights on the CPU")
    ref_dtype: Literal["fp32", "bf16"] = Field("fp32", description="the reference model's weights (verl 0.9.1's default: fp32)")
    entropy_chunking: bool = Field(False, description="entropy from the logits in chunks (verl's entropy_from_logits_with_chunking)")
    attention: Literal["auto", "flash_attention_2", "sdpa", "eager"] = Field(
        "auto", description="auto: flash_attention_2 with padding removal when flash-attn is installed, else sdpa without it",
    )
    # -- launch
    seed: int | None = Field(None, description="data shuffling and rollout seed (default: the loop's seed for the round)")
    verl_validation: bool = Field(False, description="let verl also score the validation set before and after training (the loop evaluates anyway)")
    loggers: list[str] = Field(default_factory=lambda: ["console"], description="verl loggers (console, wandb, tensorboard, mlflow); file is always added, and the run's trackers that verl knows")
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
        if isinstance(data, dict) and data.get("batch_reading") in BATCH_READINGS:
            data = {**BATCH_READINGS[data["batch_reading"]], **data}
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
        longest = self.max_prompt_length + self.max_response_length
        if self.use_dynamic_bsz and self.max_token_len_per_gpu < longest:
            raise ValueError(
                f"max_token_len_per_gpu ({self.max_token_len_per_gpu}) must hold the longest sequence, max_prompt_length + "
                f"max_response_length ({longest}): a micro-batch bounded by tokens takes whole sequences"
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


def check_overrides(overrides: list[str]) -> Any:
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
