"""The ``trl`` trainer's dtype policy, generation settings and GPU memory plan (one GPU).

TRL 1.16 loads a model given by path in float32 unless told otherwise, builds the reference model with
the same settings, and generates a whole generation batch in one ``generate`` call. These options make
each of those explicit: ``model_dtype`` (the trained weights and so the optimizer state; float32 keeps
AdamW's small updates, which round away in bfloat16 weights), ``compute_dtype`` (bf16 autocast over
them), ``ref_dtype``, and ``generation`` (transformers' ``generate``, at most ``generation_chunk`` rows
per call, or TRL's colocated vLLM engine, asleep while the model trains).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from envengineer.api import Fix, MemoryEstimate, ModelShape
from envengineer.plugins._shared.vllm_memory import vllm_rows

#: GRPOConfig fields these options set (``grpo_config`` may not set them behind their back)
OWN_FIELDS = {
    "model_init_kwargs": "model_dtype and ref_dtype", "bf16": "compute_dtype", "use_vllm": "generation",
    "vllm_mode": "generation", "vllm_gpu_memory_utilization": "vllm_gpu_memory_utilization",
    "vllm_enable_sleep_mode": "vllm_sleep", "vllm_max_model_length": "prompt_tokens and max_completion_length",
}

#: TRL's colocated engine's max_num_batched_tokens (trl/generation/vllm_generation.py)
TRL_VLLM_BATCHED_TOKENS = 4096

#: Optimizer state bytes per parameter of transformers' optimizer names (AdamW's two moments)
OPTIMIZER_STATE = {"adamw_bnb_8bit": 2, "paged_adamw_8bit": 2, "adamw_8bit": 2, "sgd": 0, "adafactor": 0}


class TrlMemoryOptions(BaseModel):
    """Options of the ``trl`` trainer that decide its GPU memory (a base of its options)."""

    model_dtype: Literal["float32", "bfloat16"] = Field(
        "float32", description="the trained weights and the optimizer state (float32: AdamW's updates at small learning rates "
        "do not round away, as they do in bfloat16 weights)",
    )
    compute_dtype: Literal["auto", "bfloat16", "float32"] = Field(
        "auto", description="bfloat16: autocast over the weights (mixed precision); auto: bfloat16 on a GPU that supports it, "
        "else float32",
    )
    ref_dtype: Literal["auto", "float32", "bfloat16"] = Field("auto", description="the reference model's weights (beta > 0); auto: model_dtype")
    generation: Literal["transformers", "vllm"] = Field(
        "transformers", description="rollouts with transformers' generate, or TRL's vLLM engine colocated on the same GPU "
        "(vllm_mode colocate; needs vLLM and a CUDA GPU)",
    )
    generation_chunk: int | None = Field(
        None, ge=1, description="transformers generation: at most this many rows (completions) per generate call; default: "
        "the whole generation batch in one call (its KV cache grows with it)",
    )
    vllm_gpu_memory_utilization: float = Field(0.3, gt=0, le=1, description="generation vllm: vLLM's share of the GPU")
    vllm_sleep: bool = Field(True, description="generation vllm: vLLM releases its weights and KV cache while the model trains")
    prompt_tokens: int = Field(
        1536, ge=1, description="the longest prompt in tokens, for vLLM's max_model_len and the memory plan (prompts are not truncated)",
    )

    def weights_dtype(self) -> str:
        return self.model_dtype

    def reference_dtype(self) -> str:
        return self.model_dtype if self.ref_dtype == "auto" else self.ref_dtype

    def uses_bf16(self, use_cpu: bool) -> bool:
        """Whether the round computes under bf16 autocast."""
        if self.compute_dtype != "auto":
            return self.compute_dtype == "bfloat16"
        import torch

        return (not use_cpu) and torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def grpo_settings(o: Any, use_cpu: bool) -> dict[str, Any]:
    """The GRPOConfig fields of these options."""
    settings: dict[str, Any] = {
        # the policy's dtype when TRL loads it from its path, the reference's always (TRL builds it from these)
        "model_init_kwargs": {"dtype": o.reference_dtype() if separate_reference(o) else o.model_dtype},
        "bf16": o.uses_bf16(use_cpu),
        "use_vllm": o.generation == "vllm",
    }
    if o.generation == "vllm":
        settings.update(vllm_mode="colocate", vllm_gpu_memory_utilization=o.vllm_gpu_memory_utilization,
                        vllm_enable_sleep_mode=o.vllm_sleep, vllm_max_model_length=o.prompt_tokens + o.max_completion_length)
    return settings


def separate_reference(o: Any) -> bool:
    """Whether the reference model is loaded in another dtype than the policy (then the policy is loaded here)."""
    return o.beta > 0 and o.reference_dtype() != o.model_dtype


def policy_model(o: Any, path: str) -> Any:
    """What GRPOTrainer gets as ``model``: the path (TRL loads it with ``model_init_kwargs``), or the policy loaded
    here in ``model_dtype`` when the reference takes another dtype (TRL then builds the reference from the path
    with ``model_init_kwargs``, which hold the reference's dtype)."""
    if not separate_reference(o):
        return path
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, o.model_dtype))


def chunked(generate_single_turn: Any, chunk: int | None, prompt_ids: list, *args: Any, **kwargs: Any) -> tuple[list, Any]:
    """TRL's ``_generate_single_turn`` over at most ``chunk`` prompts at a time (its completions and log-probs joined)."""
    if not chunk or len(prompt_ids) <= chunk:
        return generate_single_turn(prompt_ids, *args, **kwargs)
    completions: list = []
    logprobs: list | None = []
    for start in range(0, len(prompt_ids), chunk):
        ids, lps = generate_single_turn(prompt_ids[start : start + chunk], *args, **kwargs)
        completions.extend(ids)
        logprobs = None if lps is None or logprobs is None else [*logprobs, *lps]
    return completions, logprobs


# ---------------------------------------------------------------------- the memory plan

GENERATION, LOG_PROB, FORWARD, STEP = "generation", "log-prob passes", "forward/backward", "optimizer step"


def trl_memory(o: Any, m: ModelShape, gpu: float) -> MemoryEstimate:
    e = MemoryEstimate(prompt_tokens=o.prompt_tokens)
    master, ref_dtype = o.model_dtype, o.reference_dtype()
    bf16 = o.compute_dtype != "float32" and not (o.compute_dtype == "auto" and o.use_cpu is True)
    compute = "bfloat16" if bf16 else master
    seq = o.prompt_tokens + o.max_completion_length
    state_bytes = OPTIMIZER_STATE.get(o.optim, 2 * (4 if master == "float32" else 2))
    weights, grads, adam = m.weights(master), m.weights(master), m.parameters * state_bytes
    ref = m.weights(ref_dtype) if o.beta > 0 else 0.0
    batches = o.batches()
    micro = o.per_device_train_batch_size
    tokens = micro * seq
    resident = [("policy weights", weights, f"{master} (model_dtype)"), ("optimizer state", adam, f"{o.optim}: {state_bytes} bytes per parameter")]
    if ref:
        resident.append(("reference weights", ref, f"{ref_dtype} (ref_dtype)"))

    # generation
    for item, size, how in resident:
        e.add(GENERATION, item, size, how)
    if o.generation == "vllm":
        vllm_rows(e, GENERATION, m, gpu, o.vllm_gpu_memory_utilization, 1, seq, label="vLLM (colocated)",
                  profile_tokens=TRL_VLLM_BATCHED_TOKENS)
        if not o.vllm_sleep:
            e.add(FORWARD, "vLLM (colocated, awake)", o.vllm_gpu_memory_utilization * gpu, "vllm_sleep: false")
    else:
        rows = min(o.generation_chunk or batches["generation_batch_size"], batches["generation_batch_size"])
        how = f"{rows} rows × {seq:,} tokens" + (" (generation_chunk)" if o.generation_chunk else " (the whole generation batch in one call)")
        e.add(GENERATION, f"KV cache ({master}: generate runs outside autocast)", rows * seq * m.kv_per_token(master), how)

    # log-prob passes (old and reference log-probs, per_device_train_batch_size rows at a time)
    for item, size, how in resident:
        e.add(LOG_PROB, item, size, how)
    e.add(LOG_PROB, f"logits ({compute})", m.logits(tokens, compute), f"{micro} × {seq:,} tokens")

    # forward/backward of the worst micro-batch
    for item, size, how in resident:
        e.add(FORWARD, item, size, how)
    e.add(FORWARD, "gradients", grads, f"{master}, kept across the {o.gradient_accumulation_steps} accumulation steps")
    if bf16 and master == "float32":
        e.add(FORWARD, "autocast's bf16 copies of the weights", m.weights("bfloat16"), "cached for the forward pass")
    checkpointing = o.gradient_checkpointing is not False
    e.add(FORWARD, "activations of the worst micro-batch", m.activations(tokens, compute, checkpointing),
          f"{micro} × {seq:,} tokens" + (", gradient checkpointing" if checkpointing else ", no gradient checkpointing"))
    e.add(FORWARD, f"logits and their gradient ({compute})", 2 * m.logits(tokens, compute), f"{micro} × {seq:,} tokens")

    # the optimizer step
    for item, size, how in resident:
        e.add(STEP, item, size, how)
    e.add(STEP, "gradients", grads, master)
    if o.optim == "adamw_torch":
        e.add(STEP, "foreach AdamW's temporaries", m.weights(master), "adamw_torch updates all tensors at once (adamw_torch_fused: none)")

    e.leaves_out.append("trl: the tokenizer's and the prompts' tensors, and generate's sampling temporaries")
    if o.generation == "vllm" and o.vllm_sleep:
        e.notes.append("vllm_sleep: vLLM discards its weights and KV cache while the model trains (sleep level 2) and gets the "
                       "trained weights again before each rollout: no host memory for them")
    e.fixes += _fixes(o, m, batches)
    return e


def _fixes(o: Any, m: ModelShape, batches: dict[str, int]) -> list[Fix]:
    fixes: list[Fix] = []
    if o.beta > 0 and o.reference_dtype() != "bfloat16":
        fixes.append(Fix(("trainer.ref_dtype=bfloat16",), "the reference model in bf16"))
    if o.compute_dtype != "bfloat16":
        fixes.append(Fix(("trainer.compute_dtype=bfloat16",), "bf16 autocast over the float32 weights"))
    if o.generation == "transformers" and (o.generation_chunk or batches["generation_batch_size"]) > 8:
        fixes.append(Fix(("trainer.generation_chunk=8",), "at most 8 rows per generate call"))
    if o.generation == "transformers":
        fixes.append(Fix(("trainer.generation=vllm",), "generation on TRL's colocated vLLM engine (asleep while training)"))
    if o.gradient_checkpointing is False:
        fixes.append(Fix(("trainer.gradient_checkpointing=true",), "recompute activations in the backward pass"))
    if o.per_device_train_batch_size > 1:
        micro = 1
        fixes.append(Fix((f"trainer.per_device_train_batch_size={micro}",
                          f"trainer.gradient_accumulation_steps={o.per_device_train_batch_size * o.gradient_accumulation_steps // micro}"),
                         "one completion per forward/backward pass, the same completions per optimizer step"))
    if o.optim == "adamw_torch":
        fixes.append(Fix(("trainer.optim=adamw_torch_fused",), "fused AdamW: no full-size temporaries in the step"))
    if o.optim in ("adamw_torch", "adamw_torch_fused"):
        fixes.append(Fix(("trainer.optim=adamw_bnb_8bit",), "8-bit AdamW state (bitsandbytes), float32 weights kept"))
    return fixes
