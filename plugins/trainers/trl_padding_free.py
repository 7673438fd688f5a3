"""GRPO's log-probability passes without padding, for the trl trainer (option ``padding_free``).

TRL's GRPO scores a micro-batch as one padded tensor: prompts padded on the left to the longest
prompt, completions on the right to the longest completion, every position through every layer.
On short, ragged MAPF prompts that is ~1.85× the real tokens. Here each row's real tokens (one
contiguous span of its attention mask) are cut out and the rows, sorted by length, go through the
model in a few sub-batches padded only to their own longest row (the split that minimises padded
positions plus a fixed per-call cost, decided from the lengths alone: the same batch is split the
same way on every machine). Every real token keeps the position it has in TRL's padded row (its
column index: TRL passes no position ids, so the model counts columns), attends to the same real
tokens and is scored the same way (TRL's fused head, only the completion's positions labelled);
the per-token log-probabilities are put back where TRL's own pass puts them, zeros elsewhere, as
TRL's pass leaves them. What changes is the float rounding of matmuls of other shapes, not the
arithmetic: the policy's pass, the reference's and the backward through them.

Nothing here is model-specific: the passes call the model with position ids, a mask and (for shared
prompts) a ``DynamicCache``. Tested against TRL's own pass on Qwen3 (the tiny policy) and Llama models
(random ones with biases and GQA, and SmolLM2-135M-Instruct in float32: log-probabilities within
2.5e-5, gradients within 1.7e-5 relative; ``tests/test_padding_free.py``).

TRL ≥ 1.16 has no padding-free mode for GRPO (its ``padding_free`` belongs to SFT and DPO); this
overrides ``GRPOTrainer._get_per_token_logps_and_entropies`` for text-only batches and leaves
anything else (images, token type ids, MoE auxiliary losses, non-contiguous masks) to TRL.
"""

from __future__ import annotations

import contextlib
from typing import Any, NamedTuple

#: A sub-batch's fixed cost in token-equivalents (layer calls, the mask, the head's set-up), for the
#: split. Measured on the tiny policy on one CPU thread: forward + backward of one 60-token row 8.1 ms
#: against 80-86 µs per token in wide batches, i.e. ~40 tokens. A constant, never measured at run time:
#: the split decides the float rounding, so it must not depend on the machine.
CALL_COST_TOKENS = 48


def split_sorted(lengths: list[int], call_cost: int = CALL_COST_TOKENS) -> list[tuple[int, int]]:
    """The cheapest split of ascending ``lengths`` into runs ``[i, j)``, each costing its count × its
    longest length + ``call_cost`` (dynamic programming, O(n²))."""
    n = len(lengths)
    best = [0.0] + [float("inf")] * n
    cut = [0] * (n + 1)
    for j in range(1, n + 1):
        for i in range(j):
            cost = best[i] + (j - i) * lengths[j - 1] + call_cost
            if cost < best[j]:
                best[j], cut[j] = cost, i
    runs, j = [], n
    while j > 0:
        runs.append((cut[j], j))
        j = cut[j]
    return runs[::-1]


def spans(attention_mask) -> tuple[Any, Any] | None:
    """Each row's first real column and count of real tokens, or None where a row's real tokens are
    not one contiguous span (or a row has none)."""
    import torch

    mask = attention_mask.bool()
    lengths = mask.sum(1)
    if bool((lengths == 0).any()):
        return None
    starts = mask.int().argmax(1)
    columns = torch.arange(mask.size(1), device=mask.device)
    span = (columns >= starts[:, None]) & (columns < (starts + lengths)[:, None])
    if not torch.equal(span, mask):
        return None
    return starts, lengths


class Split(NamedTuple):
    """How a micro-batch goes through the model without padding: each row's first real column and real
    tokens (``starts``, ``lengths``), the rows by length (``order``, ``sorted_lengths``) and the
    sub-batches as runs ``[i, j)`` of that order."""

    starts: Any
    lengths: Any
    order: list[int]
    sorted_lengths: list[int]
    runs: list[tuple[int, int]]

    def positions(self) -> int:
        """Positions the sub-batches compute (each run padded to its longest row)."""
        return sum((j - i) * self.sorted_lengths[j - 1] for i, j in self.runs)


def _by_length(starts, lengths, call_cost: int) -> Split:
    """The :class:`Split` of rows whose real tokens are the columns ``[starts, starts + lengths)``."""
    order = sorted(range(len(lengths)), key=lambda r: (int(lengths[r]), r))
    sorted_lengths = [int(lengths[r]) for r in order]
    return Split(starts, lengths, order, sorted_lengths, split_sorted(sorted_lengths, call_cost))


def split(attention_mask, call_cost: int = CALL_COST_TOKENS) -> Split | None:
    """The :class:`Split` of a micro-batch, or None where a row's real tokens are not one span."""
    found = spans(attention_mask)
    return None if found is None else _by_length(*found, call_cost)


def padded_positions(attention_mask, call_cost: int = CALL_COST_TOKENS, plan: Split | None = None) -> tuple[int, int, int]:
    """(real tokens, positions TRL's padded pass computes, positions the unpadded pass computes).
    ``plan``: the mask's :func:`split`, when the caller has it."""
    rows, width = attention_mask.shape
    plan = plan or split(attention_mask, call_cost)
    return int(attention_mask.sum()), rows * width, rows * width if plan is None else plan.positions()


def _cut(input_ids, members, starts, lengths, longest: int, pad_token_id: int):
    """The rows ``members``' tokens from their ``starts`` on, ``longest`` of them, padded on the right:
    (ids, which are real, each one's column in TRL's row)."""
    import torch

    offsets = torch.arange(longest, device=input_ids.device)
    columns = starts[members, None] + offsets
    real = offsets < lengths[members, None]
    ids = input_ids[members[:, None], columns.clamp(max=input_ids.size(1) - 1)].masked_fill(~real, pad_token_id)
    return ids, real, columns


def _through(run, input_ids, plan: Split, logits_to_keep: int, compute_entropy: bool, pad_token_id: int):
    """Each sub-batch of ``plan`` through ``run(members, ids, real, columns, labels)`` (the model with TRL's
    fused head, labels on the completion's columns); the scored tokens' log-probabilities (and entropies)
    put back at their rows and completion columns, zeros elsewhere, as TRL's pass leaves them."""
    import torch

    rows, width = input_ids.shape
    first_scored = width - logits_to_keep  # TRL labels the columns from here on (the completion)
    where_rows, where_cols, logps, entropies = [], [], [], []
    for i, j in plan.runs:
        members = torch.tensor(plan.order[i:j], device=input_ids.device)
        ids, real, columns = _cut(input_ids, members, plan.starts, plan.lengths, plan.sorted_lengths[j - 1], pad_token_id)
        labels = ids.masked_fill(~real | (columns < first_scored), -100)
        out = run(members, ids, real, columns, labels)
        scored = labels[:, 1:] != -100  # the fused head's outputs are for labels 1..longest-1
        member_rows, positions = scored.nonzero(as_tuple=True)
        where_rows.append(members[member_rows])
        where_cols.append(columns[:, 1:][member_rows, positions] - first_scored)
        logps.append(out.log_probs[member_rows, positions])
        if compute_entropy:
            entropies.append(out.entropy[member_rows, positions])
    index = (torch.cat(where_rows), torch.cat(where_cols))
    values = torch.cat(logps)
    result = values.new_zeros(rows, logits_to_keep).index_put(index, values)
    entropy = None
    if compute_entropy:
        values = torch.cat(entropies)
        entropy = values.new_zeros(rows, logits_to_keep).index_put(index, values)
    return result, entropy


def unpadded_logps(forward, input_ids, attention_mask, logits_to_keep: int, compute_entropy: bool,
                   pad_token_id: int = 0, call_cost: int = CALL_COST_TOKENS, plan: Split | None = None):
    """TRL's per-token log-probabilities (and entropies) of the last ``logits_to_keep`` columns,
    computed without padding; None where the mask is not one span a row (the caller uses TRL's pass).

    ``forward(input_ids, attention_mask, position_ids, labels)`` runs the model with TRL's fused head
    and returns its output (``log_probs``, ``entropy`` of shape [rows, width - 1]). ``plan``: the mask's
    :func:`split`, when the caller has it.
    """
    plan = plan or split(attention_mask, call_cost)
    if plan is None:
        return None
    return _through(lambda members, ids, real, columns, labels: forward(ids, real.long(), columns, labels),
                    input_ids, plan, logits_to_keep, compute_entropy, pad_token_id)


def shared_prefix_logps(forward, prefix, input_ids, attention_mask, logits_to_keep: int, compute_entropy: bool,
                        pad_token_id: int = 0, call_cost: int = CALL_COST_TOKENS):
    """:func:`unpadded_logps` with each prompt computed once for the rows that share it (GRPO's groups:
    ``num_generations`` completions of one prompt), or None where that does not apply (a mask not one
    span a row, a prompt under two tokens, no prompt shared by two rows): the caller falls back.

    A row's prompt is the columns before the last ``logits_to_keep``. Its tokens but the last (the
    *prefix*) go through the model once per distinct prompt (``prefix(ids, mask, position_ids)``
    returns each layer's keys and values); each row then runs its last prompt token and its completion
    (the *suffix*, sub-batches by length as in :func:`unpadded_logps`) with its prefix's keys and values
    as the cache, ``forward(ids, mask, position_ids, labels, cache)`` where ``cache`` is the layers'
    ``(keys, values)`` and ``mask`` covers the cache's columns and the suffix's. Every token keeps its
    column as its position and attends to the same real tokens; the gradients of the prefix's rows
    add up over the rows that read them. Same numbers as TRL's pass up to float rounding. Returns the
    log-probabilities, the entropies (or None) and the positions computed (prefixes and suffixes).
    """
    import torch

    found = spans(attention_mask)
    if found is None:
        return None
    starts, lengths = found
    rows, width = input_ids.shape
    prompt_width = width - logits_to_keep
    prompt_lengths = prompt_width - starts
    completion_lengths = starts + lengths - prompt_width
    if bool((prompt_lengths < 2).any()) or bool((completion_lengths < 0).any()):
        return None
    prompts = torch.cat([input_ids[:, :prompt_width] * attention_mask[:, :prompt_width], attention_mask[:, :prompt_width]], 1)
    _, group_of = torch.unique(prompts, dim=0, return_inverse=True)  # sorted by content: the same on every machine
    groups = int(group_of.max()) + 1
    if groups == rows:
        return None  # nothing shared
    members_of = group_of.tolist()
    first = torch.tensor([members_of.index(g) for g in range(groups)], device=input_ids.device)  # a row of each group
    longest_prefix = int(prompt_lengths[first].max()) - 1
    prefix_ids, prefix_real, prefix_columns = _cut(input_ids, first, starts, prompt_lengths - 1, longest_prefix, pad_token_id)
    cached = prefix(prefix_ids, prefix_real.long(), prefix_columns)

    def run(members, ids, real, columns, labels):
        their = group_of[members]
        cache = [(keys[their], values[their]) for keys, values in cached]
        return forward(ids, torch.cat([prefix_real[their], real], 1).long(), columns, labels, cache)

    suffixes = _by_length(torch.full_like(starts, prompt_width - 1), completion_lengths + 1, call_cost)
    logps, entropy = _through(run, input_ids, suffixes, logits_to_keep, compute_entropy, pad_token_id)
    return logps, entropy, groups * longest_prefix + suffixes.positions()


class Positions:
    """What the round's log-probability passes computed: real tokens, the positions TRL's padded
    passes would have computed, and those the unpadded passes did (for the round's metrics)."""

    def __init__(self) -> None:
        self.real = self.padded = self.computed = self.passes = self.fallbacks = self.shared = 0
        self.real_with_grad = 0  # of ``real``: in passes that keep the graph (the policy's; the reference's do not)
        self.computed_with_grad = 0  # of ``computed``: the same

    def metrics(self) -> dict[str, Any]:
        if not self.passes:
            return {}
        return {
            "padding_free_passes": self.passes,
            "padding_free_fallbacks": self.fallbacks,
            "shared_prefix_chunks": self.shared,
            "logprob_real_tokens": self.real,
            "logprob_real_tokens_with_grad": self.real_with_grad,
            "logprob_padded_positions": self.padded,
            "logprob_computed_positions": self.computed,
            "logprob_computed_positions_with_grad": self.computed_with_grad,
        }


def cached_calls(model, context=contextlib.nullcontext):
    """:func:`shared_prefix_logps`'s two model calls on a transformers model with TRL's fused head, each
    inside ``context()`` (the trainer's autocast): ``(forward, prefix)``."""
    from transformers import DynamicCache

    def prefix(ids, mask, position_ids):
        cache = DynamicCache(config=model.config)
        with context():
            model(input_ids=ids, attention_mask=mask, position_ids=position_ids, past_key_values=cache, use_cache=True,
                  logits_to_keep=1)
        return [(layer.keys, layer.values) for layer in cache.layers]

    def forward(ids, mask, position_ids, labels, pairs):
        cache = DynamicCache(config=model.config)
        for layer, (keys, values) in enumerate(pairs):
            cache.update(keys, values, layer)
        with context():
            return model(input_ids=ids, attention_mask=mask, position_ids=position_ids, labels=labels, fused_lm_head=True,
                         past_key_values=cache)

    return forward, prefix


def trainer_pass(trainer, model, input_ids, attention_mask, logits_to_keep: int, batch_size: int | None,
                 compute_entropy: bool, positions: Positions, shared_prefix: bool = False):
    """``GRPOTrainer._get_per_token_logps_and_entropies``'s result (log-probs, entropies, no auxiliary
    loss) through :func:`unpadded_logps`, in TRL's chunks of ``batch_size`` rows; None where a chunk's
    mask is not one span a row. ``shared_prefix``: a chunk whose rows share prompts goes through
    :func:`shared_prefix_logps` (each prompt once), where the model is a decoder-only transformers
    model (tested: Qwen3 and Llama) with sdpa or eager attention (the masks it is tested with), full attention in every layer
    (a sliding-window cache drops keys) and no gradient checkpointing (whose recomputation would
    append to the cache again)."""
    import torch
    from transformers import PreTrainedModel

    pad = getattr(trainer.processing_class, "pad_token_id", None) or 0
    shared_prefix = (shared_prefix and isinstance(model, PreTrainedModel) and not model.config.is_encoder_decoder
                     and getattr(model.config, "_attn_implementation", None) in ("sdpa", "eager")
                     and all(kind == "full_attention" for kind in getattr(model.config, "layer_types", None) or ["full_attention"])
                     and not getattr(model, "is_gradient_checkpointing", False))

    def forward(ids, mask, position_ids, labels):
        with trainer.accelerator.autocast():
            return model(input_ids=ids, attention_mask=mask, position_ids=position_ids, labels=labels, fused_lm_head=True)

    cached_forward, prefix = cached_calls(model, trainer.accelerator.autocast)

    size = batch_size or input_ids.size(0)
    logps, entropies = [], []
    counts = [0, 0, 0]
    for start in range(0, input_ids.size(0), size):
        chunk_ids, chunk_mask = input_ids[start:start + size], attention_mask[start:start + size]
        plan = split(chunk_mask)
        if plan is None:
            positions.fallbacks += 1
            return None
        shared = shared_prefix_logps(cached_forward, prefix, chunk_ids, chunk_mask, logits_to_keep, compute_entropy,
                                     pad) if shared_prefix else None
        real, padded, computed = padded_positions(chunk_mask, plan=plan)
        if shared is not None:
            chunk_logps, chunk_entropy, computed = shared
            positions.shared += 1
        else:
            chunk_logps, chunk_entropy = unpadded_logps(forward, chunk_ids, chunk_mask, logits_to_keep, compute_entropy, pad,
                                                        plan=plan)
        logps.append(chunk_logps)
        entropies.append(chunk_entropy)
        for k, value in enumerate((real, padded, computed)):
            counts[k] += value
    positions.passes += 1
    positions.real += counts[0]
    if torch.is_grad_enabled():
        positions.real_with_grad += counts[0]
        positions.computed_with_grad += counts[2]
    positions.padded += counts[1]
    positions.computed += counts[2]
    return torch.cat(logps), (torch.cat(entropies) if compute_entropy else None), None
