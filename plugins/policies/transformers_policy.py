"""A Hugging Face model directory as a policy: batched ``generate`` on CPU or one GPU.

Prompts are chat message lists (rendered with the tokenizer's chat template and the
policy's ``chat_template_kwargs``) or plain strings (tokenized as they are, e.g. the tiny
policy's compact style). Greedy decoding
(``temperature: 0``) is deterministic; sampling is seeded per call, so the same policy
and prompts give the same texts. Only the new tokens are decoded, special tokens skipped.
On the CPU, Qwen3 models sample through :mod:`fast_sampler` (``generate``'s tokens, checked
against ``generate`` on the first batch of each architecture; option ``fast_sampler``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from envengineer.api import ConfigError, Policy, retired_options
from envengineer.plugins._shared.cpu_heap import keep_freed_memory
from envengineer.plugins.policies.sft import SftWarmStart
from envengineer.plugins.policies.hf import quiet_hf

#: The chat-template options when none are given: Qwen3 thinks unless told not to, and
#: the paper's policy answers without a thinking block.
DEFAULT_CHAT_TEMPLATE_KWARGS: dict[str, Any] = {"enable_thinking": False}


def chat_text(tokenizer: Any, messages: Sequence[dict[str, str]], chat_template_kwargs: dict[str, Any] | None) -> str:
    """A conversation as the prompt text the model continues (the generation prompt appended).

    ``None`` means :data:`DEFAULT_CHAT_TEMPLATE_KWARGS`. Evaluation, the ``trl`` trainer
    (through TRL's ``chat_template_kwargs``) and the checkpoint/base engineers all render
    with the same options, so the policy is trained on the prompts it is evaluated on.
    """
    kwargs = DEFAULT_CHAT_TEMPLATE_KWARGS if chat_template_kwargs is None else chat_template_kwargs
    return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True, **kwargs)


class ModelDirOptions(BaseModel):
    """Options every policy over a Hugging Face model directory has (``transformers``, ``tiny``, ``vllm``)."""

    model_config = ConfigDict(extra="forbid")

    path: str | None = Field(None, description="Hugging Face model directory, or a model name such as smollm2-135m-instruct "
                             "(made into a folder in the cache on first use; `envengineer models` lists them); the loop passes each round's checkpoint")
    prompt_style: str = Field("full", min_length=1, description="how the task renders prompts for this policy: one of the task's declared prompt styles (the built-in families: full, compact)")
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="0: greedy decoding")
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_new_tokens: int = Field(2048, ge=1)
    seed: int = 0
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=lambda: dict(DEFAULT_CHAT_TEMPLATE_KWARGS),
        description="keyword arguments of the tokenizer's chat template for chat prompts; one setting for "
        "evaluation, training and the checkpoint/base engineers",
    )

    _retired = retired_options(
        enable_thinking="write chat_template_kwargs: {{enable_thinking: {value}}} instead (one setting for evaluation, "
        "training and the checkpoint/base engineers)",
    )


class ModelDirPolicy(Policy):
    """The loop's API for a policy whose weights are a model directory (``path``)."""

    options: ModelDirOptions

    def prepare(self, *, generator: Any = None, force: bool = False, progress: Any = None) -> Path:
        """The model directory the run starts from: the ``path`` option, a folder or a model name
        of :data:`envengineer.plugins._shared.models.MODELS` (made into a folder in the cache on first use)."""
        if not self.options.path:
            raise ConfigError(f"policy.{self.name}.path: a model directory or a model name is required")
        from envengineer.plugins._shared.models import resolve_model

        try:
            return Path(resolve_model(self.options.path, progress=progress))
        except ConfigError as exc:
            raise ConfigError(f"policy.{self.name}.path: {exc}") from None

    def input_problem(self) -> tuple[str, str] | None:
        """A ``path`` that is not a model name must be a complete model folder (config, weights, tokenizer):
        otherwise the problem names it and what it lacks, the fix is the download command."""
        from envengineer.api import folder_problem
        from envengineer.plugins._shared.models import is_model_name

        if not self.options.path or is_model_name(self.options.path):
            return None
        return folder_problem(self.options.path, f"policy.{self.name}.path")

    def with_path(self, path: str | Path) -> "ModelDirPolicy":
        """The same options on another checkpoint."""
        return type(self)(self.options.model_copy(update={"path": str(path)}))

    def sampling(self, *, temperature: float, seed: int) -> "ModelDirPolicy":
        """The same checkpoint and options, sampled at ``temperature`` with ``seed``."""
        return type(self)(self.options.model_copy(update={"temperature": float(temperature), "seed": int(seed)}))

    def describe(self) -> dict[str, Any]:
        """Sampling settings, recorded with evaluation results."""
        o = self.options
        return {
            "policy": self.name, "path": o.path, "prompt_style": o.prompt_style,
            "decoding": "greedy" if o.temperature == 0 else "sampling",
            "temperature": o.temperature, "top_p": o.top_p, "max_new_tokens": o.max_new_tokens, "seed": o.seed,
            "chat_template_kwargs": dict(o.chat_template_kwargs),
        }


class TransformersOptions(ModelDirOptions):
    warm_start: SftWarmStart | None = Field(
        None,
        description="a supervised warm start of path's model on the task's solver answers before the run (TRL's SFTTrainer; "
        "keys: instances, epochs, max_steps, lr, lr_scheduler_type, batch_size, max_length, seed, threads, cache_dir), cached "
        "under $ENVENGINEER_CACHE/sft by its recipe (docs/smollm2.md); null: path as it is",
    )
    batch_size: int = Field(64, ge=1, description="prompts per generate call")
    device: Literal["auto", "cpu", "cuda"] = Field("auto", description="auto: cuda when available")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field("auto", description="auto: bfloat16 on cuda, float32 on cpu")
    threads: int | None = Field(None, ge=1, description="torch CPU threads (default: torch's)")
    fast_sampler: Literal["auto"] | bool = Field(
        "auto",
        description="CPU float32 Qwen3 models: sample with the fast sampler (plugins/policies/fast_sampler.py: generate's "
        "tokens, without its per-step overhead); auto: once it matched generate on a first batch (once per architecture "
        "and thread count in a process) "
        "(else generate, with one warning); true: the same, but an error instead of falling back; false: always generate",
    )


class TransformersPolicy(ModelDirPolicy):
    name: ClassVar[str] = "transformers"
    description: ClassVar[str] = "a Hugging Face model directory sampled with transformers (CPU or one GPU)"
    Options: ClassVar[type[BaseModel]] = TransformersOptions
    options: TransformersOptions

    def __init__(self, options: BaseModel | None = None) -> None:
        super().__init__(options)
        self._loaded: tuple[str, Any, Any] | None = None  # (path, model, tokenizer)
        #: how the last :meth:`prepare` found a warm-started model: "cached", "built", "rebuilt: WHY" (None: no warm start)
        self.prepared: str | None = None

    def prepare(self, *, generator: Any = None, force: bool = False, progress: Any = None) -> Path:
        """The model directory of ``path``; with ``warm_start``, that model after the supervised warm start on
        ``generator``'s solver answers (cached by its recipe; ``force``: trained again)."""
        base = super().prepare(generator=generator, force=force, progress=progress)
        options = self.options.warm_start
        if options is None:
            return base
        from envengineer.plugins.policies.sft import warm_started

        path, self.prepared = warm_started(options, base, generator=generator, style=self.options.prompt_style,
                                           chat_template_kwargs=dict(self.options.chat_template_kwargs), force=force,
                                           progress=progress)
        return path

    def with_path(self, path: str | Path) -> "TransformersPolicy":
        """The same options on another checkpoint, which already holds any warm start (so none is applied to it)."""
        return type(self)(self.options.model_copy(update={"path": str(path), "warm_start": None}))

    def describe(self) -> dict[str, Any]:
        described = super().describe()
        if self.options.warm_start is not None:
            described["warm_start"] = self.options.warm_start.model_dump()
        return described

    # ------------------------------------------------------------------ the loop's API

    def memory_plan(self, model: Any, gpu_bytes: float, prompt_tokens: int | None = None) -> Any:
        from envengineer.plugins._shared.vllm_memory import policy_memory

        return policy_memory(self, model, gpu_bytes, prompt_tokens)

    def close(self) -> None:
        """Release the loaded model (memory the trainer may need)."""
        self._loaded = None

    # ------------------------------------------------------------------ sampling

    def _device(self) -> str:
        import torch

        if self.options.device != "auto":
            return self.options.device
        return "cuda" if torch.cuda.is_available() else "cpu"

    def load(self) -> tuple[Any, Any]:
        """The model and tokenizer of ``path`` (loaded once, kept until :meth:`close`)."""
        if self.options.warm_start is not None:
            raise ConfigError(f"policy.{self.name}.warm_start: sample the warm-started model: "
                              "policy.with_path(policy.prepare(generator=...)) (the loop and envengineer eval do)")
        path = str(self.prepare())
        if self._loaded is not None and self._loaded[0] == path:
            return self._loaded[1], self._loaded[2]
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if self.options.threads:
            torch.set_num_threads(self.options.threads)
        device = self._device()
        if device == "cpu":
            keep_freed_memory()  # a step's activations reuse freed memory, not fresh pages
        dtype = self.options.dtype
        if dtype == "auto":
            dtype = "bfloat16" if device == "cuda" else "float32"
        if not Path(path).exists():
            raise ConfigError(f"policy.{self.name}.path: {path} does not exist")
        with quiet_hf():
            tokenizer = AutoTokenizer.from_pretrained(path)
            tokenizer.padding_side = "left"
            if tokenizer.pad_token is None:
                tokenizer.pad_token = tokenizer.eos_token
            model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype)).to(device)
        model.eval()
        self._loaded = (path, model, tokenizer)
        return model, tokenizer

    def _text(self, tokenizer: Any, prompt: list[dict[str, str]] | str) -> tuple[str, bool]:
        """The prompt as text, and whether the tokenizer should add its special tokens."""
        if isinstance(prompt, str):
            return prompt, True
        return chat_text(tokenizer, prompt, self.options.chat_template_kwargs), False

    def sample(self, prompts: Sequence[list[dict[str, str]] | str], *, n: int = 1) -> list[list[str]]:
        """``n`` decoded responses per prompt (greedy: ``n`` copies of one response)."""
        import torch

        from envengineer.plugins.policies import fast_sampler

        if n < 1:
            raise ValueError(f"n: must be at least 1, got {n}")
        if not prompts:
            return []
        model, tokenizer = self.load()
        o = self.options
        greedy = o.temperature == 0
        texts = [self._text(tokenizer, p) for p in prompts]
        lengths = [len(tokenizer(t, add_special_tokens=special)["input_ids"]) for t, special in texts]
        order = sorted(range(len(texts)), key=lambda i: lengths[i])  # similar lengths share a batch
        out: list[list[str]] = [[] for _ in texts]
        generator_seed = o.seed
        for start in range(0, len(order), o.batch_size):
            idx = order[start : start + o.batch_size]
            special = texts[idx[0]][1]
            batch = tokenizer([texts[i][0] for i in idx], return_tensors="pt", padding=True, add_special_tokens=special)
            batch = {k: v.to(model.device) for k, v in batch.items() if k in ("input_ids", "attention_mask")}
            kwargs: dict[str, Any] = {
                "max_new_tokens": o.max_new_tokens,
                "pad_token_id": tokenizer.pad_token_id,
                "eos_token_id": tokenizer.eos_token_id,
            }
            if greedy:
                kwargs.update(do_sample=False, num_return_sequences=1, temperature=None, top_p=None, top_k=None)
            else:
                torch.manual_seed(generator_seed + start)
                kwargs.update(do_sample=True, temperature=o.temperature, top_p=o.top_p, top_k=0, num_return_sequences=n)
            with torch.inference_mode(), quiet_hf():
                generated = fast_sampler.generate(model, batch["input_ids"], batch["attention_mask"], mode=o.fast_sampler, **kwargs)
            new = generated[:, batch["input_ids"].shape[1] :]
            decoded = tokenizer.batch_decode(new, skip_special_tokens=True)
            for j, i in enumerate(idx):
                out[i] = [decoded[j]] * n if greedy else decoded[j * n : (j + 1) * n]
        return out
