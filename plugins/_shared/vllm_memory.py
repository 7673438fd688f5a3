"""vLLM's share of a GPU in a memory plan (verl's rollouts, TRL's colocated generation, the ``vllm`` policy).

vLLM takes ``gpu_memory_utilization × the GPU's memory`` when it starts (vLLM 0.24 refuses to start when
less is free) and splits it into the model's weights (bf16, split over tensor-parallel GPUs), the
activations of its profiling run, and the KV cache (the rest). The KV cache must hold at least one whole
sequence of ``max_model_len`` tokens, or vLLM refuses to start.
"""

from __future__ import annotations

from typing import Any

#: vLLM's profiling pass: this many batched tokens (its default max_num_batched_tokens) ...
PROFILE_TOKENS = 8192
#: ... and this many sequences' logits in float32 (its default max_num_seqs)
PROFILE_SEQUENCES = 256


def vllm_rows(estimate: Any, phase: str, model: Any, gpu_bytes: float, utilization: float, tensor_parallel: int,
              max_model_len: int, label: str = "vLLM", profile_tokens: int = PROFILE_TOKENS) -> float:
    """Add vLLM's rows to ``estimate`` in ``phase``; a problem when its KV cache holds no whole sequence. Returns its share."""
    from envengineer.api import GB

    share = utilization * gpu_bytes
    weights = model.weights("bf16") / tensor_parallel
    reserve = model.layer_activations(profile_tokens, "bf16") / tensor_parallel + PROFILE_SEQUENCES * model.vocab_size * 4
    kv = share - weights - reserve
    per_token = model.kv_per_token("bf16") / tensor_parallel
    tokens = int(max(kv, 0) // per_token)
    where = f"{utilization:g} × {gpu_bytes / GB:g} GB"
    estimate.add(phase, f"{label}: weights (bf16, tensor parallel {tensor_parallel})", weights, f"part of its share, {where}")
    estimate.add(phase, f"{label}: profiling activations", reserve, f"{profile_tokens} batched tokens, {PROFILE_SEQUENCES} sequences' logits")
    estimate.add(phase, f"{label}: KV cache (the rest of its share)", max(kv, 0.0),
                 f"{tokens:,} tokens at {per_token / 1024:g} KiB each: {tokens / max_model_len:.1f} sequences of {max_model_len}")
    if tokens < max_model_len:
        estimate.problems.append(
            f"{label}: its share ({where} = {share / GB:.1f} GB) leaves {max(kv, 0) / GB:.1f} GB of KV cache, {tokens:,} tokens, "
            f"less than one sequence of {max_model_len}: vLLM refuses to start"
        )
    return share


#: The longest prompt a policy's plan assumes when the trainer names none.
DEFAULT_PROMPT_TOKENS = 1536


def policy_memory(policy: Any, model: Any, gpu_bytes: float, prompt_tokens: int | None) -> Any:
    """The evaluation phase of the ``vllm`` and ``transformers`` policies (each evaluates after the round's training
    has ended, so it is a phase of its own)."""
    from envengineer.api import MemoryEstimate

    o = policy.options
    e = MemoryEstimate()
    prompt = prompt_tokens or DEFAULT_PROMPT_TOKENS
    phase = f"evaluation ({policy.name} policy)"
    length = prompt + o.max_new_tokens
    if policy.name == "vllm":
        vllm_rows(e, phase, model, gpu_bytes, o.gpu_memory_utilization, o.tensor_parallel_size, o.max_model_len or length)
        return e
    dtype = {"auto": "bfloat16"}.get(o.dtype, o.dtype)  # auto: bfloat16 on a GPU
    rows = o.batch_size
    e.add(phase, f"weights ({dtype})", model.weights(dtype))
    e.add(phase, f"KV cache ({dtype})", rows * length * model.kv_per_token(dtype),
          f"batch_size {rows} × {length:,} tokens (prompt {prompt} + max_new_tokens {o.max_new_tokens})")
    e.add(phase, "last-token logits (fp32)", rows * model.vocab_size * 4, f"{rows} rows")
    if rows > 1:
        e.fixes.append(_fix(f"policy.batch_size={max(1, rows // 4)}", "fewer prompts per generate call"))
    return e


def _fix(override: str, what: str) -> Any:
    from envengineer.api import Fix

    return Fix((override,), what)
