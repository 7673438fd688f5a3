"""GRPO through TRL's ``GRPOTrainer``: one round on one machine (CPU, or one GPU).

The reward is the task validator's R_acc on the response decoded from the prompt
style's answer format (``generator.decode_response``), plus ``optimality_bonus`` for an
optimal answer when that option is set. Each logged step becomes one line of
``curves.jsonl`` (reward mean and std, share of zero-variance groups, KL, completion
length, loss, learning rate). A round is budgeted by work (``epochs``, ``max_steps``,
``max_prompts``), never by seconds, so the same config trains the same weights on any machine.

Batches are counted in completions: an optimiser step takes ``per_device_train_batch_size ×
gradient_accumulation_steps`` of them, and one rollout (one ``generate`` call) samples
``generation_batch_size`` of them, which may span several optimiser steps or be one of several
rollouts in a step. Chat prompts are rendered with the policy's ``chat_template_kwargs`` (TRL's
option of that name), plain-string prompts are tokenized as they are, both exactly as evaluation does.

Optionally (``prefilter_samples > 0``) the round's prompts are first sampled with the
current policy and only those where it is neither always right nor always wrong are
kept: all-equal groups give GRPO no signal and cost a full rollout each. With the run's
``budget_mode: kept_prompts`` the prefilter always runs (``prefilter_samples`` samples per
prompt, or ``num_generations`` when that is 0: the group GRPO would see) and draws fresh
instances until the budget's worth of prompts are kept (:func:`envengineer.components.training.fill_kept`).

The round writes ``rollouts.jsonl`` beside the checkpoint (:mod:`envengineer.loop.signal`): one line
per prompt the prefilter judged or GRPO trained on, counting every completion scored for it,
the GRPO groups' rewards as the reward function saw them. A round whose prefilter keeps no
prompt trains nothing and hands on its starting weights; one that keeps fewer prompts than an
optimiser step takes trains one smaller step on them (TRL's sampler would drop them all).
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, ValidationInfo, field_validator

from envengineer.api import (
    ROLLOUTS_FILE,
    ConfigError,
    Drawn,
    Resources,
    TrainRequest,
    TrainResult,
    Trainer,
    fill_kept,
    retired_options,
    reward_text,
    reward_value,
    score_response,
    screening_samples,
)
from envengineer.plugins._shared.cpu_heap import keep_freed_memory
from envengineer.plugins.trainers.rollouts import Groups, prompt_line
from envengineer.plugins.trainers.trl_memory import OWN_FIELDS, TrlMemoryOptions, grpo_settings, policy_model
from envengineer.plugins.trainers.trl_padding_free import Positions
from envengineer.plugins.trainers.trl_round import curves_callback, round_trainer
from envengineer.plugins.trainers.trl_rollouts import RolloutLog

#: ``gradient_checkpointing: auto`` recomputes activations for models with at least this many
#: parameters (Qwen3-0.6B and up) when training on an accelerator; the ~1 M-parameter tiny policy has
#: no activation memory worth saving, and on the CPU (RAM, not GPU memory, holds the activations) it
#: stays off at any size: recomputing cost SmolLM2-135M 2.5x the training CPU seconds there
#: (docs/performance.md, bench/smollm2_round.py).
GRADIENT_CHECKPOINTING_MIN_PARAMETERS = 100_000_000

#: GRPOConfig fields that an option of ours sets: ``grpo_config`` may not set them behind its back
_OWN_GRPO_FIELDS = {
    "num_train_epochs": "epochs", "steps_per_generation": "generation_batch_size",
    "activation_checkpointing": "gradient_checkpointing",
    "chat_template_kwargs": "the policy section's chat_template_kwargs",
    **OWN_FIELDS,
}


def parameter_count(model_dir: str | Path) -> int:
    """Parameters of the model in ``model_dir``, from its config.json alone (built on the meta device: no weights read)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(model_dir))
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    return sum(p.numel() for p in model.parameters())


#: TRL log keys -> curves.jsonl keys


class TrlGrpoOptions(TrlMemoryOptions):
    model_config = ConfigDict(extra="forbid")

    epochs: float = Field(1.0, gt=0, description="passes over the round's training prompts")
    num_generations: int = Field(8, ge=2, description="completions per prompt (the GRPO group)")
    beta: float = Field(0.0, ge=0, description="KL coefficient (0: no reference model)")
    learning_rate: float = Field(1e-4, gt=0)
    lr_scheduler_type: str = Field("constant", description="transformers scheduler name")
    optim: str = Field("adamw_torch", description="transformers optimizer name (adamw_torch, sgd, adafactor, ...)")
    max_grad_norm: float = Field(1.0, gt=0, description="gradient norm clipping")
    max_completion_length: int = Field(128, ge=1)
    temperature: float = Field(1.0, gt=0, le=2.0, description="rollout sampling temperature")
    top_p: float = Field(1.0, gt=0, le=1.0)
    per_device_train_batch_size: int = Field(32, ge=1, description="completions per forward/backward pass (micro-batch)")
    gradient_accumulation_steps: int = Field(
        1, ge=1, validate_default=True, description="micro-batches per optimiser step: a step takes per_device_train_batch_size × this many completions",
    )
    generation_batch_size: int | None = Field(
        None, ge=1,
        description="completions sampled per rollout (one generate call; num_generations per prompt); a multiple of the "
        "optimiser step's completions (several steps per rollout) or a divisor of it (several rollouts per step); "
        "default: one optimiser step's completions",
    )
    gradient_checkpointing: Literal["auto"] | StrictBool = Field(
        "auto", description=f"recompute activations in the backward pass; auto: on for models with at least "
        f"{GRADIENT_CHECKPOINTING_MIN_PARAMETERS:,} parameters (counted from config.json) trained on an accelerator, "
        "off on the CPU",
    )
    loss_type: Literal["grpo", "dapo", "dr_grpo", "bnpo"] = "dapo"
    scale_rewards: Literal["group", "batch", "none"] = "group"
    optimality_bonus: float = Field(0.0, ge=0, description="added to R_acc for an optimal answer (0: off)")
    reward: Literal["valid", "score"] = Field(
        "valid", description="valid: R_acc (1 for a valid answer, 0 otherwise); score: the validator's graded score in [0, 1]",
    )
    negative_advantage_weight: float = Field(
        1.0, ge=0, le=1,
        description="multiplies negative advantages after group normalisation (1: plain GRPO; <1 weights "
        "the completions that beat their group's mean more than those below it; 0: positive samples only)",
    )
    max_steps: int | None = Field(None, ge=1, description="stop after this many optimiser steps")
    max_prompts: int | None = Field(None, ge=1, description="use at most this many of the round's instances")
    prefilter_samples: int = Field(
        0, ge=0, description="sample each prompt this many times first; keep prompts with mixed outcomes (0: off; "
        "budget_mode kept_prompts always prefilters, with num_generations samples when this is 0)",
    )
    use_cpu: Literal["auto"] | bool = Field("auto", description="auto: CPU when no CUDA device is available")
    threads: int | None = Field(
        None, ge=1,
        description="torch CPU threads during the round (default: 1 on the CPU, torch's default with a GPU); more "
        "threads can be faster on an idle machine (two were 1.56x faster on an idle 2-core machine) but collapse when "
        "another process competes for the cores (5-30x slower measured), and they change float rounding, not the "
        "tables, as measured",
    )
    fast_rollouts: Literal["auto"] | StrictBool = Field(
        "auto",
        description="GRPO's rollouts and the prefilter's samples through the fast sampler (envengineer.plugins.policies.fast_sampler: "
        "generate's tokens and random draws for CPU float32 Qwen3 models, checked against generate on first use per architecture and thread count); "
        "auto: where it applies and its self-check passes, else generate; true: an error where it does not; false: generate",
    )
    padding_free: StrictBool = Field(
        True,
        description="the policy's and the reference's log-probability passes without padding (each row's real tokens, "
        "in sub-batches of similar lengths, at the positions TRL gives them; envengineer.plugins.trainers.trl_padding_free): "
        "the same arithmetic in matmuls of other shapes, so float rounding differs from TRL's padded pass; false: TRL's pass",
    )
    shared_prefix: StrictBool = Field(
        True,
        description="with padding_free: a prompt's tokens go through the model once for the completions that share it "
        "(GRPO's group), each completion then with the prompt's keys and values as its cache (trl_padding_free."
        "shared_prefix_logps; sdpa or eager full attention, no gradient checkpointing); the same numbers up to float rounding; "
        "false: every row computes its prompt",
    )
    seed: int | None = Field(None, description="default: the loop's seed for the round")
    logging_steps: int = Field(1, ge=1)
    mask_after_answer: bool = Field(
        True, description="leave a completion's tokens after the end of its answer (the task's answer_end) out of the loss",
    )
    grpo_config: dict[str, Any] = Field(
        default_factory=dict,
        description="further TRL GRPOConfig fields passed as they are (e.g. adam_beta2, adam_epsilon, "
        "weight_decay, top_k; warmup_steps needs a scheduler with warm-up, such as lr_scheduler_type "
        "constant_with_warmup); checked against the installed TRL's GRPOConfig",
    )

    _retired = retired_options(
        time_budget_s="was removed: a wall-clock budget makes the trained weights depend on the machine's speed "
        "and load; budget a round by max_steps, epochs or max_prompts",
    )

    @field_validator("gradient_accumulation_steps")
    @classmethod
    def _whole_groups_per_step(cls, value: int, info: ValidationInfo) -> int:
        micro, group = info.data.get("per_device_train_batch_size"), info.data.get("num_generations")
        if micro is not None and group is not None and (micro * value) % group:
            raise ValueError(
                f"per_device_train_batch_size × gradient_accumulation_steps ({micro * value}) must be a multiple "
                f"of num_generations ({group}): an optimiser step takes whole groups"
            )
        return value

    @field_validator("generation_batch_size")
    @classmethod
    def _whole_groups_per_rollout(cls, value: int | None, info: ValidationInfo) -> int | None:
        micro, accumulation, group = (info.data.get(k) for k in ("per_device_train_batch_size", "gradient_accumulation_steps", "num_generations"))
        if value is None or None in (micro, accumulation, group):
            return value
        step = micro * accumulation
        if value % group:
            raise ValueError(f"{value} must be a multiple of num_generations ({group}): a rollout samples whole groups")
        if value % micro:
            raise ValueError(f"{value} must be a multiple of per_device_train_batch_size ({micro})")
        if value % step and step % value:
            raise ValueError(
                f"{value} must be a multiple or a divisor of the optimiser step's {step} completions "
                f"(per_device_train_batch_size {micro} × gradient_accumulation_steps {accumulation})"
            )
        return value

    def batches(self) -> dict[str, int]:
        """The batch arithmetic, in completions and prompts."""
        step = self.per_device_train_batch_size * self.gradient_accumulation_steps
        rollout = self.generation_batch_size or step
        return {
            "completions_per_step": step,
            "prompts_per_step": step // self.num_generations,
            "generation_batch_size": rollout,
            "prompts_per_generation": rollout // self.num_generations,
            "optimizer_steps_per_generation": max(1, rollout // step),
            "generations_per_optimizer_step": max(1, step // rollout),
        }


class TrlGrpoTrainer(Trainer):
    name: ClassVar[str] = "trl"
    description: ClassVar[str] = "GRPO with TRL's GRPOTrainer on one machine (CPU for the tiny policy, or one GPU)"
    Options: ClassVar[type[BaseModel]] = TrlGrpoOptions
    options: TrlGrpoOptions
    budget_modes: ClassVar[tuple[str, ...]] = ("instances", "kept_prompts")

    @property
    def epochs(self) -> float:
        return self.options.epochs

    @property
    def sampling_temperature(self) -> float:
        return self.options.temperature

    def resources(self) -> Resources:
        """One GPU when ``use_cpu`` is false or generation is TRL's colocated vLLM (a GPU engine); on the
        CPU (``true``, or ``auto``, which decides on the node) the round's ``threads``."""
        o = self.options
        return Resources(gpus_per_node=1 if o.use_cpu is False or o.generation == "vllm" else 0, cpus=o.threads or 1)

    def describe(self) -> dict[str, Any]:
        o = self.options
        batches = o.batches()
        return {
            "algorithm": f"GRPO (TRL GRPOTrainer, loss {o.loss_type}, reward scaling {o.scale_rewards})",
            "optimizer": o.optim,
            "learning_rate": o.learning_rate,
            "lr_schedule": o.lr_scheduler_type,
            "kl_coef": o.beta,
            "num_generations": o.num_generations,
            "batch_size": batches["completions_per_step"],
            "micro_batch_size": o.per_device_train_batch_size,
            "gradient_accumulation_steps": o.gradient_accumulation_steps,
            **batches,
            "gradient_checkpointing": o.gradient_checkpointing if isinstance(o.gradient_checkpointing, bool)
            else f"auto (on from {GRADIENT_CHECKPOINTING_MIN_PARAMETERS:,} parameters on an accelerator, off on the CPU)",
            "epochs": o.epochs,
            "temperature": o.temperature,
            "max_completion_length": o.max_completion_length,
            "dtypes": f"weights {o.model_dtype}, compute {o.compute_dtype}, reference {o.reference_dtype()}",
            "generation": o.generation + (f", {o.generation_chunk} rows per call" if o.generation_chunk and o.generation == "transformers" else ""),
            "reward": reward_text(o.reward, o.optimality_bonus),
            "negative_advantage_weight": o.negative_advantage_weight,
            "mask_after_answer": o.mask_after_answer,
            **({"grpo_config": dict(o.grpo_config)} if o.grpo_config else {}),
            "max_steps": o.max_steps,
        }

    def memory_plan(self, model: Any, gpu_bytes: float) -> Any:
        from envengineer.plugins.trainers.trl_memory import trl_memory

        return trl_memory(self.options, model, gpu_bytes)

    # ------------------------------------------------------------------ reward

    def reward_fn(self, request: TrainRequest, records: list[dict[str, Any]], outcomes: Groups | None = None):
        """TRL's reward function; ``outcomes`` (if given) keeps each call's rewards and validity per record index."""
        generator, validator, style, bonus = request.generator, request.validator, request.prompt_style, self.options.optimality_bonus
        reward = self.options.reward

        def task_reward(prompts, completions, record_index, **_: Any) -> list[float]:
            rewards, valid = [], []
            for completion, index in zip(completions, record_index):
                record = records[int(index)]
                text = completion if isinstance(completion, str) else completion[-1]["content"]
                verdict = score_response(validator, generator, record, text, style)
                rewards.append(reward_value(verdict, reward, bonus))
                valid.append(bool(verdict.valid))
            if outcomes is not None:
                outcomes.add([int(i) for i in record_index], rewards, valid)
            return rewards

        return task_reward

    def prefilter_samples(self, request: TrainRequest) -> int:
        """Samples per prompt before training (0: no prefilter). ``kept_prompts`` must judge prompts to keep
        them, so it samples ``num_generations`` times when ``prefilter_samples`` is off: GRPO's own group size."""
        return screening_samples(self.options.prefilter_samples, self.options.num_generations, request.budget_mode)

    def _prefilter(self, request: TrainRequest) -> tuple[Drawn, dict[str, Any]]:
        """Sample ``request.records`` (and in ``kept_prompts`` mode fresh draws, :func:`fill_kept`) and keep
        the prompts the policy sometimes solves and sometimes not, with every sample's reward and validity."""
        from envengineer.plugins.policies.transformers_policy import TransformersOptions, TransformersPolicy

        o = self.options
        seed = (o.seed if o.seed is not None else request.seed) + 7
        n = self.prefilter_samples(request)
        policy = TransformersPolicy(TransformersOptions(
            path=str(request.policy_path), temperature=o.temperature, top_p=o.top_p,
            max_new_tokens=o.max_completion_length, batch_size=256, seed=seed,
            threads=o.threads, fast_sampler=o.fast_rollouts,
            **({} if request.chat_template_kwargs is None else {"chat_template_kwargs": request.chat_template_kwargs}),
        ))
        generator, validator, style = request.generator, request.validator, request.prompt_style
        calls = 0

        def judge(batch: list[dict[str, Any]]) -> list[tuple[list[float], list[bool]]]:
            nonlocal calls
            if calls:  # a fresh draw: other seeds than the round's own records' (the first call's, as always)
                policy.options = policy.options.model_copy(update={"seed": seed + 1_000_003 * calls})
            calls += 1
            samples = policy.sample([generator.render(r, style) for r in batch], n=n)
            judged = []
            for record, texts in zip(batch, samples):
                verdicts = [score_response(validator, generator, record, t, style) for t in texts]
                judged.append(([reward_value(v, o.reward, o.optimality_bonus) for v in verdicts], [bool(v.valid) for v in verdicts]))
            return judged

        started, cpu_started = time.perf_counter(), time.process_time()
        try:
            drawn = fill_kept(request, judge)
        finally:
            policy.close()
        rates = [sum(valid) / len(valid) for valid in drawn.valid if valid]
        info = {
            "prefilter_prompts": len(drawn.records),
            "prefilter_kept": len(drawn.kept),
            "prefilter_all_wrong": sum(r == 0 for r in rates),
            "prefilter_all_right": sum(r == 1 for r in rates),
            "prefilter_seconds": round(time.perf_counter() - started, 2),
            "prefilter_cpu_seconds": round(time.process_time() - cpu_started, 2),
            **drawn.info,
        }
        return drawn, info

    def checkpointing(self, model_dir: str | Path, use_cpu: bool = False) -> bool:
        """Whether the round recomputes activations (``auto``: off on the CPU, else by the model's parameter count)."""
        choice = self.options.gradient_checkpointing
        if isinstance(choice, bool):
            return choice
        return not use_cpu and parameter_count(model_dir) >= GRADIENT_CHECKPOINTING_MIN_PARAMETERS

    def grpo_config(self, out_dir: Path, seed: int, model_dir: str | Path, chat_template_kwargs: dict[str, Any] | None = None,
                    completions: int | None = None):
        """TRL's ``GRPOConfig`` for one round from ``model_dir`` (``grpo_config`` entries last, checked against TRL's fields).

        ``chat_template_kwargs`` None: the transformers policy's default. ``completions``: one optimiser step
        and one rollout of that many completions instead of the options' batches (a round with fewer prompts
        than those batches take), in micro-batches no larger than ``per_device_train_batch_size``.
        """
        import torch
        from trl import GRPOConfig

        from envengineer.plugins.policies.transformers_policy import DEFAULT_CHAT_TEMPLATE_KWARGS

        o = self.options
        use_cpu = (not torch.cuda.is_available()) if o.use_cpu == "auto" else bool(o.use_cpu)
        names = {f.name for f in dataclasses.fields(GRPOConfig)}
        unknown = sorted(set(o.grpo_config) - names)
        if unknown:
            raise ConfigError(f"trainer.trl.grpo_config: {', '.join(map(repr, unknown))} is not a field of TRL's GRPOConfig")
        own = {**{name: name for name in TrlGrpoOptions.model_fields if name in names}, **_OWN_GRPO_FIELDS}
        for key in o.grpo_config:
            if key in own:
                raise ConfigError(f"trainer.trl.grpo_config.{key}: set by {own[key]!r}; use that option instead")
        recompute = self.checkpointing(model_dir, use_cpu)
        checkpointing = {"activation_checkpointing": recompute} if "activation_checkpointing" in names else {"gradient_checkpointing": recompute}
        settings = dict(
            **checkpointing,
            output_dir=str(out_dir / "trl"),
            num_train_epochs=o.epochs,
            max_steps=o.max_steps or -1,
            learning_rate=o.learning_rate,
            lr_scheduler_type=o.lr_scheduler_type,
            optim=o.optim,
            max_grad_norm=o.max_grad_norm,
            warmup_steps=0,
            **self._batch_settings(completions),
            chat_template_kwargs=dict(DEFAULT_CHAT_TEMPLATE_KWARGS if chat_template_kwargs is None else chat_template_kwargs),
            num_generations=o.num_generations,
            max_completion_length=o.max_completion_length,
            temperature=o.temperature,
            top_p=o.top_p,
            beta=o.beta,
            loss_type=o.loss_type,
            scale_rewards=o.scale_rewards,
            use_cpu=use_cpu,
            **grpo_settings(o, use_cpu),
            logging_steps=o.logging_steps,
            save_strategy="no",
            report_to="none",  # the run's trackers get TRL's reporting callbacks at the round's step offset (trl_trackers)
            seed=seed,
            data_seed=seed,
            disable_tqdm=True,
            dataloader_num_workers=0,
        )
        fields = {f.name: f for f in dataclasses.fields(GRPOConfig)}
        for key, value in o.grpo_config.items():
            if isinstance(value, str) and (isinstance(fields[key].default, float) or "float" in str(fields[key].type)):
                try:  # YAML 1.1 reads 1e-4 as a string
                    value = float(value)
                except ValueError:
                    raise ConfigError(f"trainer.trl.grpo_config.{key}: expected a number, got {value!r}") from None
            settings[key] = value
        try:
            return GRPOConfig(**settings)
        except (TypeError, ValueError) as error:
            raise ConfigError(f"trainer.trl: TRL's GRPOConfig rejected the settings: {error}") from None

    def _batch_settings(self, completions: int | None) -> dict[str, int]:
        o = self.options
        if completions is None:
            return {"per_device_train_batch_size": o.per_device_train_batch_size,
                    "gradient_accumulation_steps": o.gradient_accumulation_steps,
                    "generation_batch_size": o.batches()["generation_batch_size"]}
        micro = max(d for d in range(1, min(completions, o.per_device_train_batch_size) + 1) if completions % d == 0)
        return {"per_device_train_batch_size": micro, "gradient_accumulation_steps": completions // micro, "generation_batch_size": completions}

    # ------------------------------------------------------------------ one round

    def train(self, request: TrainRequest) -> TrainResult:
        from envengineer.plugins.policies.hf import quiet_hf

        with quiet_hf(), self._threads():
            return self._train(request)

    @contextlib.contextmanager
    def _threads(self):
        """torch's CPU threads for the round (``threads``; default 1 on the CPU), torch's own again after it."""
        import torch

        o = self.options
        use_cpu = (not torch.cuda.is_available()) if o.use_cpu == "auto" else bool(o.use_cpu)
        threads = o.threads or (1 if use_cpu else None)
        if use_cpu:
            keep_freed_memory()  # each step's activations reuse freed memory, not fresh pages
        before = torch.get_num_threads()
        if threads:
            torch.set_num_threads(threads)
        try:
            yield
        finally:
            torch.set_num_threads(before)

    def _train(self, request: TrainRequest) -> TrainResult:
        import torch
        from datasets import Dataset
        from transformers import AutoTokenizer, PrinterCallback

        o = self.options
        seed = o.seed if o.seed is not None else request.seed
        out_dir = Path(request.out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        records = list(request.records)
        if o.max_prompts is not None:
            records = records[: o.max_prompts]
        if not records:
            raise ConfigError("trainer.trl: the round has no training instances")
        metrics: dict[str, Any] = {"prompts_given": len(request.records), "threads": torch.get_num_threads()}
        started = time.perf_counter()
        drawn: Drawn | None = None
        if self.prefilter_samples(request):
            drawn, info = self._prefilter(dataclasses.replace(request, records=records))
            metrics.update(info)
            records = [drawn.records[i] for i in drawn.kept]
        metrics["prompts_used"] = len(records)
        outcomes = Groups(o.num_generations)
        curves_path = out_dir / "curves.jsonl"
        curves_path.write_text("")
        if not records:  # nothing to learn from: GRPO would crash on an empty dataset
            checkpoint = self._keep_start(request.policy_path, out_dir / "checkpoint")
            self._write_rollouts(request, out_dir, drawn, records, outcomes)
            metrics.update({"steps": 0, "trained_prompts": 0, "completions": 0, "seconds": round(time.perf_counter() - started, 2),
                            "note": "no prompt with mixed outcomes: nothing trained, the starting weights are the checkpoint"})
            return TrainResult(checkpoint=checkpoint, curves=curves_path, metrics=metrics)
        dataset = Dataset.from_list(
            [{"prompt": request.generator.render(r, request.prompt_style), "record_index": i} for i, r in enumerate(records)]
        )
        batches = o.batches()
        whole = max(batches["prompts_per_step"], batches["prompts_per_generation"])
        short = len(records) < whole  # TRL's sampler drops a partial rollout: one smaller step instead
        joined = []
        if request.trackers:  # TRL reports its step metrics into the run's trackers, joined across rounds
            from envengineer.plugins.trainers.trl_trackers import joined_callbacks

            joined = joined_callbacks(request)
        config = self.grpo_config(out_dir, seed, request.policy_path, request.chat_template_kwargs,
                                  completions=len(records) * o.num_generations if short else None)
        if short:
            metrics.update({"short_step_prompts": len(records),
                            "note": f"{len(records)} prompts kept, fewer than one optimiser step's {whole}: steps of {len(records)} prompts"})
        batch = config.per_device_train_batch_size * config.gradient_accumulation_steps

        curves = curves_callback(curves_path)
        tokenizer = AutoTokenizer.from_pretrained(str(request.policy_path))
        tokenizer.padding_side = "left"
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        rollout_log, positions = RolloutLog(), Positions()
        RoundTrainer = round_trainer(o, records, tokenizer, request.generator, request.prompt_style, rollout_log, positions)

        trainer = RoundTrainer(
            model=policy_model(o, str(request.policy_path)),
            reward_funcs=self.reward_fn(request, records, outcomes),
            args=config,
            train_dataset=dataset,
            processing_class=tokenizer,
            callbacks=[curves],
        )
        trainer.remove_callback(PrinterCallback)  # curves.jsonl has the logs; keep the console for progress bars
        if joined:
            from envengineer.plugins.trainers.trl_trackers import install

            install(trainer, joined)
        train_started, train_cpu_started = time.perf_counter(), time.process_time()
        trainer.train()
        train_s, train_cpu_s = time.perf_counter() - train_started, time.process_time() - train_cpu_started
        checkpoint = out_dir / "checkpoint"
        trainer.save_model(str(checkpoint))
        tokenizer.save_pretrained(str(checkpoint))
        steps = trainer.state.global_step
        lines = curves.lines

        def mean(key: str) -> float | None:
            values = [line[key] for line in lines if line.get(key) is not None]
            return round(sum(values) / len(values), 4) if values else None

        self._write_rollouts(request, out_dir, drawn, records, outcomes)
        metrics.update({
            "steps": steps,
            "trained_prompts": outcomes.prompts(),
            "gradient_checkpointing": bool(getattr(config, "activation_checkpointing", None) or config.gradient_checkpointing),
            "train_seconds": round(train_s, 2),
            "train_cpu_seconds": round(train_cpu_s, 2),
            "seconds": round(time.perf_counter() - started, 2),
            "steps_per_s": round(steps / train_s, 3) if train_s else None,
            "completions": steps * batch,
            "reward_mean": mean("reward_mean"),
            "zero_std_frac": mean("zero_std_frac"),
            "completion_length": mean("completion_length"),
            "last_reward_mean": lines[-1]["reward_mean"] if lines else None,
            **rollout_log.metrics(),
            **positions.metrics(),
        })
        if joined:
            from envengineer.plugins.trainers.trl_trackers import live

            if live(joined):
                metrics["live_trackers"] = live(joined)
        del trainer
        return TrainResult(checkpoint=checkpoint, curves=curves_path, metrics=metrics)

    @staticmethod
    def _keep_start(policy_path: str | Path, checkpoint: Path) -> Path:
        """The starting model and tokenizer saved as the round's checkpoint (a round that trained nothing)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        AutoModelForCausalLM.from_pretrained(str(policy_path), dtype="auto").save_pretrained(str(checkpoint))
        AutoTokenizer.from_pretrained(str(policy_path)).save_pretrained(str(checkpoint))
        return checkpoint

    @staticmethod
    def _write_rollouts(request: TrainRequest, out_dir: Path, drawn: Drawn | None, records: list[dict[str, Any]], outcomes: Groups) -> None:
        """``rollouts.jsonl``: every prompt the prefilter judged (its samples, then its GRPO groups if it was
        trained on), or without a prefilter every training prompt (GRPO groups only)."""
        from envengineer.api import write_jsonl

        record_id = request.generator.record_id
        if drawn is None:
            lines = [prompt_line(record_id(r), outcomes.of(i)) for i, r in enumerate(records)]
        else:
            trained = {judged: i for i, judged in enumerate(drawn.kept)}  # judged index -> dataset index
            lines = [prompt_line(record_id(r), outcomes.of(trained[j]) if j in trained else (), (drawn.rewards[j], drawn.valid[j]))
                     for j, r in enumerate(drawn.records)]
        write_jsonl(out_dir / ROLLOUTS_FILE, lines)
