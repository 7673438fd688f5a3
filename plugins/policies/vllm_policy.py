"""A Hugging Face model directory as a policy, sampled by vLLM's offline engine on a CUDA GPU.

The loop's API of the ``transformers`` policy (``prepare``, ``with_path``, ``describe``,
``close``, ``sample(prompts, n=)``) with vLLM's ``LLM`` and ``SamplingParams``: chat
message prompts go through ``LLM.chat`` with the policy's ``chat_template_kwargs`` (the
options training and the checkpoint/base engineers use), plain strings through
``LLM.generate``. ``temperature: 0`` is greedy (one answer copied ``n`` times: vLLM refuses
``n > 1`` with greedy sampling); sampling is seeded per prompt (``seed`` + its position in
the call), so the same policy and prompts give the same texts.

Every :meth:`VllmPolicy.sample` call runs the engine in a child process
(:mod:`envengineer.plugins._shared.vllm_child`, which says why a subprocess) and returns once that
process is gone: no GPU memory stays held when a training round starts afterwards. The
price is one engine start per call; evaluation (``envengineer eval``, the loop) therefore
hands all of a set's prompts to one call (:attr:`VllmPolicy.sample_batch_size`), so one
evaluation is one engine start. This module imports neither vllm nor torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, Field

from envengineer.api import ConfigError, Resources
from envengineer.plugins._shared.vllm_child import ChildLimits
from envengineer.plugins.policies.transformers_policy import ModelDirOptions, ModelDirPolicy


class VllmOptions(ModelDirOptions, ChildLimits):
    tensor_parallel_size: int = Field(1, ge=1, description="GPUs the model is split over")
    gpu_memory_utilization: float = Field(0.9, gt=0.0, le=1.0, description="share of GPU memory vLLM may take (weights and KV cache)")
    max_model_len: int | None = Field(None, ge=1, description="context length (default: the model's)")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field("auto", description="weights and activations (auto: the model's)")
    enforce_eager: bool = Field(False, description="skip CUDA graph capture (starts faster, samples slower)")


class VllmPolicy(ModelDirPolicy):
    name: ClassVar[str] = "vllm"
    description: ClassVar[str] = "a Hugging Face model directory sampled by vLLM on a CUDA GPU (in a child process per call)"
    Options: ClassVar[type[BaseModel]] = VllmOptions
    options: VllmOptions
    #: Prompts per ``sample`` call in evaluation: all of them (each call starts the engine).
    sample_batch_size: ClassVar[int] = 1_000_000

    # ------------------------------------------------------------------ the loop's API

    def describe(self) -> dict[str, Any]:
        """Sampling and engine settings, recorded with evaluation results."""
        o = self.options
        return {
            **super().describe(),
            "tensor_parallel_size": o.tensor_parallel_size, "gpu_memory_utilization": o.gpu_memory_utilization,
            "max_model_len": o.max_model_len, "dtype": o.dtype, "enforce_eager": o.enforce_eager,
        }

    def memory_plan(self, model: Any, gpu_bytes: float, prompt_tokens: int | None = None) -> Any:
        from envengineer.plugins._shared.vllm_memory import policy_memory

        return policy_memory(self, model, gpu_bytes, prompt_tokens)

    def resources(self) -> Resources:
        """The GPUs the engine is split over (``tensor_parallel_size``)."""
        return Resources(gpus_per_node=self.options.tensor_parallel_size)

    def close(self) -> None:
        """Nothing to release: the engine lives only inside each :meth:`sample` call's child process."""

    # ------------------------------------------------------------------ sampling

    def engine(self) -> dict[str, Any]:
        """The keyword arguments of ``vllm.LLM`` for this policy."""
        from envengineer.plugins._shared.vllm_child import engine_kwargs

        path = self.prepare()
        if not path.exists():
            raise ConfigError(f"policy.{self.name}.path: {path} does not exist")
        o = self.options
        return engine_kwargs(str(path), tensor_parallel_size=o.tensor_parallel_size, gpu_memory_utilization=o.gpu_memory_utilization,
                             max_model_len=o.max_model_len, dtype=o.dtype, enforce_eager=o.enforce_eager, seed=o.seed)

    def sample(self, prompts: Sequence[list[dict[str, str]] | str], *, n: int = 1) -> list[list[str]]:
        """``n`` decoded responses per prompt (greedy: ``n`` copies of one response)."""
        from envengineer.plugins._shared import vllm_child

        if n < 1:
            raise ValueError(f"n: must be at least 1, got {n}")
        if not prompts:
            return []
        o = self.options
        greedy = o.temperature == 0
        requests = [vllm_child.request(p, n=1 if greedy else n, seed=o.seed + i) for i, p in enumerate(prompts)]
        outputs = vllm_child.generate(
            self.engine(), requests, temperature=o.temperature, top_p=o.top_p, max_tokens=o.max_new_tokens,
            chat_template_kwargs=dict(o.chat_template_kwargs), what=f"policy.{self.name}", limits=o,
        )
        return [out["texts"] * n if greedy else list(out["texts"]) for out in outputs]
