"""The ``verl`` trainer's GPU memory per GPU, for ``envengineer plan`` (verl 0.9.1, FSDP actor, vLLM rollouts).

Three phases, each with what is on one GPU at once:

- **rollout**: vLLM awake with its share (``gpu_memory_utilization`` × the GPU), beside what the FSDP
  actor keeps on the GPU: its fp32 weights unless ``actor_param_offload``, its AdamW state unless
  ``optimizer_offload``, the reference model unless ``ref_param_offload``. Gradients are freed after each
  update. vLLM sleeps (verl's ``free_cache_engine``) in the other two phases.
- **log-prob passes** (the rollout's old log-probs, the reference's): the actor's weights (verl loads
  offloaded ones back for the pass), its optimizer state unless offloaded, the reference, one micro-batch's
  forward (no gradients): one layer's activations, its logits (bf16) and the entropy's temporaries.
- **actor update**: weights, gradients and AdamW state, fp32 shards of ``1 / GPUs`` each (verl loads
  offloaded ones back for the update), the largest FSDP unit gathered in bf16, the reference unless offloaded,
  and the worst micro-batch: ``ppo_micro_batch_size_per_gpu`` whole sequences, or ``max_token_len_per_gpu``
  tokens with ``use_dynamic_bsz``; its activations (bf16, each layer's input with gradient checkpointing) and
  its logits with their gradient (bf16).
"""

from __future__ import annotations

from typing import Any

from envengineer.api import GB, Fix, MemoryEstimate, ModelShape
from envengineer.plugins._shared.vllm_memory import vllm_rows

#: verl's entropy_from_logits_chunk_size
ENTROPY_CHUNK = 2048

ROLLOUT, LOG_PROB, UPDATE = "rollout (vLLM awake)", "log-prob passes", "actor update"


def verl_memory(o: Any, m: ModelShape, gpu: float) -> MemoryEstimate:
    e = MemoryEstimate(prompt_tokens=o.max_prompt_length)
    gpus = o.nnodes * o.n_gpus_per_node
    p = m.parameters
    seq = o.max_prompt_length + o.max_response_length
    shard = f"fp32, sharded over {gpus} GPU{'s' if gpus > 1 else ''}"
    weights, grads, adam = p * 4 / gpus, p * 4 / gpus, p * 8 / gpus
    ref_bytes = 2 if o.ref_dtype == "bf16" else 4
    ref = p * ref_bytes / gpus
    gathered = m.largest_unit * 2

    if o.use_dynamic_bsz:
        train_tokens = logprob_tokens = o.max_token_len_per_gpu
        train_how = logprob_how = f"use_dynamic_bsz: at most {o.max_token_len_per_gpu:,} tokens"
    else:
        train_tokens = o.ppo_micro_batch_size_per_gpu * seq
        logprob_tokens = o.log_prob_micro_batch_size_per_gpu * seq
        train_how = f"{o.ppo_micro_batch_size_per_gpu} × {seq:,} tokens (prompt + response)"
        logprob_how = f"{o.log_prob_micro_batch_size_per_gpu} × {seq:,} tokens"

    # rollout: vLLM awake beside what the actor keeps on the GPU
    if not o.actor_param_offload:
        e.add(ROLLOUT, "actor weights", weights, shard + " (actor_param_offload: false)")
    if not o.optimizer_offload:
        e.add(ROLLOUT, "AdamW state (m, v)", adam, shard + " (optimizer_offload: false)")
    if not o.ref_param_offload:
        e.add(ROLLOUT, "reference weights", ref, f"{o.ref_dtype} (ref_param_offload: false)")
    vllm_rows(e, ROLLOUT, m, gpu, o.gpu_memory_utilization, o.tensor_model_parallel_size, o.max_model_len or seq)

    # log-prob passes
    e.add(LOG_PROB, "actor weights", weights, shard)
    if not o.optimizer_offload:
        e.add(LOG_PROB, "AdamW state (m, v)", adam, shard)
    e.add(LOG_PROB, "reference weights", gathered if o.ref_param_offload else ref,
          "offloaded: its largest unit gathered in bf16" if o.ref_param_offload else o.ref_dtype)
    e.add(LOG_PROB, "activations of one layer (no gradients)", m.layer_activations(logprob_tokens, "bf16"), logprob_how)
    e.add(LOG_PROB, "logits (bf16)", m.logits(logprob_tokens, "bf16"), logprob_how)
    e.add(LOG_PROB, *_entropy(o, m, logprob_tokens))

    # the actor's update
    e.add(UPDATE, "actor weights", weights, shard + (", loaded back for the update" if o.actor_param_offload else ""))
    e.add(UPDATE, "gradients", grads, shard)
    e.add(UPDATE, "AdamW state (m, v)", adam, shard + (", loaded back for the update" if o.optimizer_offload else ""))
    e.add(UPDATE, "largest FSDP unit gathered (bf16)", gathered, "mixed precision: bf16 compute")
    if not o.ref_param_offload:
        e.add(UPDATE, "reference weights", ref, o.ref_dtype)
    e.add(UPDATE, "activations of the worst micro-batch", m.activations(train_tokens, "bf16", o.gradient_checkpointing),
          train_how + (", gradient checkpointing" if o.gradient_checkpointing else ", no gradient checkpointing"))
    e.add(UPDATE, "logits and their gradient (bf16)", 2 * m.logits(train_tokens, "bf16"), train_how)
    if o.entropy_coeff:
        e.add(UPDATE, *_entropy(o, m, train_tokens))

    e.notes.append(_other_bound(o, m, seq, train_tokens))
    e.leaves_out += [
        "verl: vLLM's CUDA graphs (enforce_eager: false) beyond its share's profiling",
        "verl: the transient copy when the actor's weights are handed to vLLM at wake-up (one fp32 shard plus vLLM's bf16 weights)",
    ]
    if o.actor_param_offload or o.optimizer_offload:
        host = (weights + grads if o.actor_param_offload else 0) + (adam if o.optimizer_offload else 0)
        e.notes.append(f"offload keeps {host * o.n_gpus_per_node / GB:.1f} GB per node in pinned host memory "
                       f"({host / GB:.1f} GB per GPU × {o.n_gpus_per_node}); the update still loads it back")
    e.fixes += _fixes(o, m, gpu, seq, weights, adam, ref)
    return e


def _other_bound(o: Any, m: ModelShape, seq: int, tokens: int) -> str:
    """The update's worst micro-batch the other way: by responses when bounded by tokens, and the reverse."""
    def size(n: int) -> float:
        return m.activations(n, "bf16", o.gradient_checkpointing) + 2 * m.logits(n, "bf16")

    if o.use_dynamic_bsz:
        other, how = o.ppo_micro_batch_size_per_gpu * seq, f"without the token bound ({o.ppo_micro_batch_size_per_gpu} × {seq:,} tokens)"
    else:
        other, how = o.max_token_len_per_gpu, f"bounded at {o.max_token_len_per_gpu:,} tokens (use_dynamic_bsz)"
    return (f"the update's worst micro-batch {how}: {size(other) / GB:.1f} GB of activations and logits, "
            f"against {size(tokens) / GB:.1f} GB as configured")


def _entropy(o: Any, m: ModelShape, tokens: int) -> tuple[str, float, str]:
    if o.entropy_chunking:
        chunk = min(tokens, ENTROPY_CHUNK)
        return "entropy temporaries (chunked, fp32)", 2 * m.logits(chunk, "fp32"), f"entropy_chunking: {chunk} tokens at a time"
    return "entropy temporaries (bf16)", 2 * m.logits(tokens, "bf16"), "softmax and product over the whole micro-batch's logits"


def _fixes(o: Any, m: ModelShape, gpu: float, seq: int, weights: float, adam: float, ref: float) -> list[Fix]:
    fixes: list[Fix] = []
    if not o.use_dynamic_bsz:
        fixes.append(Fix(("trainer.use_dynamic_bsz=true", f"trainer.max_token_len_per_gpu={seq}"),
                         f"micro-batches bounded by tokens: one longest sequence ({seq}) per pass"))
    elif o.max_token_len_per_gpu > seq:
        fixes.append(Fix((f"trainer.max_token_len_per_gpu={max(seq, o.max_token_len_per_gpu // 2)}",), "a smaller token bound per micro-batch"))
    if not o.use_dynamic_bsz and o.ppo_micro_batch_size_per_gpu > 1:
        fixes.append(Fix(("trainer.ppo_micro_batch_size_per_gpu=1", "trainer.log_prob_micro_batch_size_per_gpu=1"), "one response per pass"))
    if o.ref_dtype != "bf16":
        fixes.append(Fix(("trainer.ref_dtype=bf16",), "the reference model in bf16"))
    if not o.ref_param_offload:
        fixes.append(Fix(("trainer.ref_param_offload=true",), "the reference model's weights on the CPU"))
    if not o.entropy_chunking:
        fixes.append(Fix(("trainer.entropy_chunking=true",), "entropy from chunked logits"))
    if not (o.actor_param_offload and o.optimizer_offload):
        fixes.append(Fix(("trainer.actor_param_offload=true", "trainer.optimizer_offload=true"),
                         "the actor's weights and optimizer state on the CPU while vLLM is awake"))
    gpus = o.nnodes * o.n_gpus_per_node
    if gpus % (2 * o.tensor_model_parallel_size) == 0:
        fixes.append(Fix((f"trainer.tensor_model_parallel_size={2 * o.tensor_model_parallel_size}",),
                         "vLLM's weights split over more GPUs: more KV cache in its share"))
    resident = (0 if o.actor_param_offload else weights) + (0 if o.optimizer_offload else adam) + (0 if o.ref_param_offload else ref)
    room = int((gpu - resident) / gpu * 20) / 20  # the largest share (in steps of 0.05) beside the resident actor
    if 0 < room < o.gpu_memory_utilization:
        fixes.append(Fix((f"trainer.gpu_memory_utilization={room:g}",), "a smaller vLLM share beside the resident actor"))
    return fixes
