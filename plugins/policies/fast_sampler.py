"""``generate``'s tokens for small Qwen3 and Llama models on CPU, without ``generate``'s per-step overhead.

On the CPU a ~1 M-parameter model spends most of ``model.generate`` in overhead, not
arithmetic: ~1,200 torch ops per decoding step, a KV cache grown by ``torch.cat`` and
widened by ``repeat_kv`` every step, finished rows that keep computing and a prompt
recomputed for each of its ``n`` samples. :func:`fast_generate` issues the same float
operations as transformers' Qwen3 and Llama (``Qwen3ForCausalLM``, ``LlamaForCausalLM``: the same
decoder layer but for Qwen3's RMSNorm over each query and key head; the model's own RMSNorm, MLP,
rotary and projection modules, biases included; ``scaled_dot_product_attention`` with the same mask
decisions; the logits
processors ``generate`` builds) on a preallocated cache, computes a prompt once for its
samples, drops finished rows, and draws the random numbers exactly as ``generate`` does
(``torch.multinomial`` over the whole ``batch × n`` rows each step, finished rows included).
It returns what ``model.generate`` returns: the prompt ids (repeated ``n`` times) followed
by the new tokens, finished rows padded with ``pad_token_id``.

Changing the batch (dropping rows, a prompt once for its samples) keeps every row's floats
only where a row's result does not depend on its batch. Measured on torch 2.13's CPU kernels:
float32 matmuls give the same rows from 4 rows up on one thread and from 12 on two (MKL's
small-``M`` kernels differ below; the same thresholds for the tiny policy's shapes and for every
Linear shape of SmolLM2-135M, up to its 49,152 × 576 head), so a batch is never shrunk below :func:`fewest_rows` rows
(finished rows fill it up: 32 on any thread count; a one-thread floor of 8, exact on the AVX-512
machine it was measured on, gave other rows on CI's machine); and on several threads
``scaled_dot_product_attention`` gives a row's last bits by the thread that computes it (the first thread's rows match one thread's,
the others' do not; the kernel gives each thread its own scratch buffer), while ATen hands
each thread an equal run of the batch's rows × heads. So a shrunk batch keeps every row on
the thread ``generate`` computes it on (rows grouped by thread, groups padded to one size),
and a prompt is computed once for its samples only when ``generate`` computes all of them on
one thread, the thread the prompt then gets. A transformers or torch release may change a
float path too. Hence :func:`generate`: at first use on a float path it compares the two on the
call's own prompts (greedy and sampled, ragged, some rows stopping early) and falls back to
``model.generate`` with one warning if any token differs. The decision holds for every model on
the same float path (:func:`float_path`: the torch and transformers releases, the model's class,
architecture, dtype and device, torch's thread count): which kernels run, and so whether a row's
floats depend on its batch, follows from shapes and code, not from the weights. A loop checks its
first model and reuses the answer for the checkpoints it trains (same architecture) in the process.
A passed check is also recorded in the cache (``$ENVENGINEER_CACHE/fast-sampler/<key>.json``, the key
hashing the float path, this module's own source and the CPU's model name), so later processes on this
machine skip it (SmolLM2-135M's costs ~130 CPU s, more than a small round's sampling); a failed check is
not recorded, and is made again by the next process. Delete the folder to check again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import platform
import warnings
import weakref
from pathlib import Path
from typing import Any, Literal

from envengineer.api import cpu_features, cpu_model

logger = logging.getLogger(__name__)

#: Fewest rows a batch is shrunk to (measured on one machine: MKL's float32 matmul gives different
#: row results below 4 rows on one thread and below 12 on two; 32 leaves a margin). Where the rows
#: start to agree depends on the CPU's kernels: a one-thread floor of 8 (about 12% fewer CPU seconds
#: in GRPO's 64-row rollouts there) gave rows other than generate's on another machine, so no
#: thread count goes below 32.
MIN_ROWS = 32
#: Shrink the cache when at most this share of its rows is still generating (a shrink
#: copies the cache once; every step over finished rows costs their arithmetic).
SHRINK_AT = 0.75

Mode = Literal["auto"] | bool


class Unsupported(Exception):
    """The model or the settings are outside what :func:`fast_generate` reproduces."""


class FastSamplerFallback(UserWarning):
    """The fast sampler differed from ``generate`` on a model; ``generate`` is used for it."""


def fewest_rows(threads: int) -> int:
    """Fewest rows :func:`fast_generate` shrinks a batch to on ``threads`` torch threads."""
    return MIN_ROWS


#: The model classes :func:`fast_generate` reproduces (by module and name: their decoder layers are
#: Llama's, Qwen3's adds an RMSNorm over each query and key head; both use the model's own modules).
SUPPORTED = ("Qwen3ForCausalLM", "LlamaForCausalLM")


def unsupported_reason(model: Any) -> str | None:
    """Why ``model`` cannot use the fast sampler (``None``: it can)."""
    try:
        import torch
        import transformers
    except Exception as exc:  # pragma: no cover - transformers is a dependency of this policy
        return f"transformers is not importable ({exc})"
    classes = tuple(getattr(transformers, name) for name in SUPPORTED if hasattr(transformers, name))
    if type(model) not in classes:  # the classes themselves: a subclass may compute otherwise
        return f"{type(model).__name__} is not one of {', '.join(SUPPORTED)}"
    config = model.config
    if model.device.type != "cpu":
        return f"device {model.device.type} (the fast sampler is for the CPU)"
    if model.dtype != torch.float32:
        return f"dtype {model.dtype} (float32 only)"
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return f"attention {config._attn_implementation!r} (sdpa only)"
    layer_types = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
    if any(t != "full_attention" for t in layer_types[: config.num_hidden_layers]):
        return "sliding-window layers"
    if (config.rope_parameters or {}).get("rope_type", "default") != "default":
        return f"rope type {config.rope_parameters.get('rope_type')!r}"
    if getattr(config, "pretraining_tp", 1) not in (None, 1):
        return f"pretraining_tp {config.pretraining_tp}"
    if model.training:
        return "the model is in training mode"
    if not getattr(config, "is_causal", True):
        return "a bidirectional configuration"
    return None


def _plan(model: Any, input_ids: Any, *, max_new_tokens: int, eos_token_id: Any, pad_token_id: Any, do_sample: bool,
          temperature: float | None, top_p: float | None, top_k: int | None, num_return_sequences: int) -> tuple[list, list[int], int]:
    """The logits processors ``generate`` would apply, the eos ids and the pad id; :class:`Unsupported`
    when ``generate`` would do anything else (other processors or stopping rules, beams, caches)."""
    reason = unsupported_reason(model)
    if reason:
        raise Unsupported(reason)
    from transformers.generation.logits_process import (LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper,
                                                        TopPLogitsWarper)
    from transformers.generation.stopping_criteria import EosTokenCriteria, MaxLengthCriteria, StoppingCriteriaList

    kwargs = {"max_new_tokens": max_new_tokens, "pad_token_id": pad_token_id, "eos_token_id": eos_token_id,
              "do_sample": do_sample, "temperature": temperature, "top_p": top_p, "top_k": top_k,
              "num_return_sequences": num_return_sequences}
    try:
        config, extra = model._prepare_generation_config(None, **kwargs)
        model._prepare_special_tokens(config, True, device=input_ids.device)
        config.max_length = config.max_new_tokens + input_ids.shape[1]
        processors = list(model._get_logits_processor(
            generation_config=config, input_ids_seq_length=input_ids.shape[1], encoder_input_ids=input_ids,
            prefix_allowed_tokens_fn=None, logits_processor=LogitsProcessorList(), device=input_ids.device, model_kwargs={}))
        criteria = list(model._get_stopping_criteria(config, StoppingCriteriaList()))
    except Exception as exc:
        raise Unsupported(f"generation settings: {exc}") from None
    if extra:
        raise Unsupported(f"model arguments {sorted(extra)}")
    if config.num_beams not in (None, 1) or not config.use_cache or config.cache_implementation is not None:
        raise Unsupported("beams or a non-default cache")
    if config.prefill_chunk_size is not None or config.return_dict_in_generate:
        raise Unsupported("chunked prefill or dict outputs")
    if bool(config.do_sample) != bool(do_sample) or (not do_sample and num_return_sequences != 1):
        raise Unsupported("sampling settings")
    allowed = (TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper) if do_sample else ()
    if any(type(p) not in allowed for p in processors):
        raise Unsupported(f"logits processors {[type(p).__name__ for p in processors]}")
    if any(type(c) not in (MaxLengthCriteria, EosTokenCriteria) for c in criteria):
        raise Unsupported(f"stopping criteria {[type(c).__name__ for c in criteria]}")
    eos = config._eos_token_tensor
    eos_ids = [] if eos is None else [int(e) for e in eos.reshape(-1).tolist()]
    pad = config._pad_token_tensor
    if pad is None:
        raise Unsupported("no pad token")
    return processors, eos_ids, int(pad)


def fast_generate(model: Any, input_ids: Any, attention_mask: Any, *, max_new_tokens: int, eos_token_id: Any = None,
                  pad_token_id: Any = None, do_sample: bool = False, temperature: float | None = None,
                  top_p: float | None = None, top_k: int | None = None, num_return_sequences: int = 1,
                  min_rows: int | None = None) -> Any:
    """What ``model.generate(input_ids, attention_mask=..., <the same settings>)`` returns, token for token.

    ``input_ids``/``attention_mask``: the left-padded batch. Raises :class:`Unsupported` for a
    model or settings it does not reproduce. Seed torch as for ``generate``: the same draws are made.
    ``min_rows``: fewest rows a batch shrinks to (default :func:`fewest_rows` of torch's thread count).
    """
    import torch

    if min_rows is None:
        min_rows = fewest_rows(torch.get_num_threads())

    processors, eos_ids, pad = _plan(
        model, input_ids, max_new_tokens=max_new_tokens, eos_token_id=eos_token_id, pad_token_id=pad_token_id,
        do_sample=do_sample, temperature=temperature, top_p=top_p, top_k=top_k, num_return_sequences=num_return_sequences)
    if attention_mask is None:
        raise Unsupported("an attention mask is required")
    with torch.inference_mode():
        return _decode(model, input_ids, attention_mask, max_new_tokens, processors, eos_ids, pad, bool(do_sample),
                       num_return_sequences, min_rows)


def _attention(attn: Any, x: Any, cos: Any, sin: Any, keys: Any, values: Any, start: int, mask: Any, is_causal: bool,
               expand: int) -> Any:
    """Qwen3Attention.forward's (LlamaAttention.forward's: no q/k norm) float ops on a preallocated cache: rows ``× expand`` are written at
    ``start`` (a prompt computed once for its samples), attention reads the cache up to the new end."""
    from torch.nn.functional import scaled_dot_product_attention

    shape = (*x.shape[:-1], -1, attn.head_dim)
    q, k = attn.q_proj(x).view(shape), attn.k_proj(x).view(shape)
    if hasattr(attn, "q_norm"):  # Qwen3: an RMSNorm over each head; Llama has none
        q, k = attn.q_norm(q), attn.k_norm(k)
    q, k = q.transpose(1, 2), k.transpose(1, 2)
    v = attn.v_proj(x).view(shape).transpose(1, 2)
    q, k = _rotary(attn)(q, k, cos, sin)
    end = start + x.shape[1]
    if expand > 1:  # the prompt's keys serve all its samples; attention reads them unexpanded
        keys[:, :, start:end] = k.repeat_interleave(expand, dim=0)
        values[:, :, start:end] = v.repeat_interleave(expand, dim=0)
        k_all, v_all = k, v
    else:
        keys[:, :, start:end] = k
        values[:, :, start:end] = v
        k_all, v_all = keys[:, :, :end], values[:, :, :end]
    # generate widens keys with repeat_kv when there is a mask and uses enable_gqa otherwise:
    # measured bitwise equal on the CPU, and enable_gqa copies nothing.
    out = scaled_dot_product_attention(q, k_all, v_all, attn_mask=mask, dropout_p=0.0, scale=attn.scaling,
                                       is_causal=is_causal, enable_gqa=k_all.shape[1] != q.shape[1])
    out = out.transpose(1, 2).contiguous()
    out = out.reshape(*x.shape[:-1], -1).contiguous()
    return attn.o_proj(out)


def _rotary(attn: Any) -> Any:
    """The ``apply_rotary_pos_emb`` of the attention module's own modeling file."""
    import sys

    return sys.modules[type(attn).__module__].apply_rotary_pos_emb


def _layers(model: Any, h: Any, cos: Any, sin: Any, caches: list, start: int, mask: Any, is_causal: bool, expand: int) -> Any:
    """Qwen3DecoderLayer.forward (LlamaDecoderLayer's: the same) over every layer (residual + attention, residual + MLP)."""
    config = model.config
    for layer, (keys, values) in zip(model.model.layers[: config.num_hidden_layers], caches):
        residual = h
        x = layer.input_layernorm(h)
        h = residual + _attention(layer.self_attn, x, cos, sin, keys, values, start, mask, is_causal, expand)
        residual = h
        h = residual + layer.mlp(layer.post_attention_layernorm(h))
    return h


def _decode(model: Any, input_ids: Any, attention_mask: Any, max_new_tokens: int, processors: list, eos_ids: list[int],
            pad: int, do_sample: bool, n: int, min_rows: int) -> Any:
    import torch

    config, inner = model.config, model.model
    batch, length = input_ids.shape
    rows = batch * n
    device = input_ids.device
    total = length + max_new_tokens
    valid = attention_mask.to(torch.bool)
    padded = not bool(valid.all())  # generate builds a mask only when some token is padding
    # generate's position ids: the count of real tokens before each one (padding at 0)
    positions = attention_mask.long().cumsum(-1) - 1
    positions = positions.masked_fill(attention_mask == 0, 0)
    next_position = positions[:, -1].repeat_interleave(n) + 1
    # rotary tables by position, from the model's own rotary module
    cos_table, sin_table = inner.rotary_emb(inner.embed_tokens.weight[:1], torch.arange(total, device=device)[None])
    cos_table, sin_table = cos_table[0], sin_table[0]
    kv_heads, head_dim = config.num_key_value_heads, model.model.layers[0].self_attn.head_dim
    dtype = inner.embed_tokens.weight.dtype
    caches = [(torch.empty(rows, kv_heads, total, head_dim, dtype=dtype, device=device),
               torch.empty(rows, kv_heads, total, head_dim, dtype=dtype, device=device))
              for _ in range(config.num_hidden_layers)]

    # each row's attention thread in generate's batch (None: a row's heads straddle two threads)
    threads = torch.get_num_threads()
    home = _threads_of_rows(rows, threads)
    # prefill: once per prompt when that keeps the matmuls in the many-rows regime and each prompt
    # on the thread generate computes its samples on
    prompt_home = _threads_of_rows(batch, threads)
    once = (n > 1 and batch * length >= min_rows and home is not None and prompt_home is not None
            and torch.equal(home, prompt_home.repeat_interleave(n)))
    ids, pmask, ppos = (input_ids, valid, positions) if once or n == 1 else (
        input_ids.repeat_interleave(n, 0), valid.repeat_interleave(n, 0), positions.repeat_interleave(n, 0))
    mask = None
    if padded:
        causal = torch.ones(length, length, dtype=torch.bool, device=device).tril()
        mask = causal[None, None] & pmask[:, None, None, :]
    h = inner.embed_tokens(ids)
    h = _layers(model, h, cos_table[ppos], sin_table[ppos], caches, 0, mask, mask is None and length > 1, n if once else 1)
    h = inner.norm(h[:, -1:, :])
    if once:
        h = h.repeat_interleave(n, 0)
    logits = model.lm_head(h)[:, -1, :]

    out = torch.full((rows, max_new_tokens), pad, dtype=input_ids.dtype, device=device)
    where = torch.arange(rows, device=device)  # buffer row -> output row
    live = torch.ones(rows, dtype=torch.bool, device=device)  # per buffer row: still generating
    kv_valid = torch.ones(rows, total, dtype=torch.bool, device=device)
    kv_valid[:, :length] = valid.repeat_interleave(n, 0)
    eos = torch.tensor(eos_ids, dtype=input_ids.dtype, device=device)
    all_probs = None
    steps = 0
    for step in range(max_new_tokens):
        scores = logits
        for processor in processors:
            scores = processor(None, scores)
        if do_sample:
            probs = torch.nn.functional.softmax(scores, dim=-1)
            # generate draws for all batch × n rows, finished ones included (their rows keep the
            # last distribution they had: any valid one draws the same numbers)
            if all_probs is None:  # the first step: every row is there and generating
                all_probs = probs
            else:
                all_probs.index_copy_(0, where[live], probs[live])
            tokens = torch.multinomial(all_probs, num_samples=1).squeeze(1)[where]
        else:
            tokens = torch.argmax(scores, dim=-1)
        tokens = torch.where(live, tokens, pad)
        out[where[live], step] = tokens[live]
        steps = step + 1
        if eos.numel():
            live = live & ~torch.isin(tokens, eos)
        active = int(live.sum())
        if active == 0 or steps == max_new_tokens:
            break
        current = where.shape[0]
        seen = length + step  # tokens in the cache before this step's
        keep = None
        if home is not None and current > min_rows and active <= SHRINK_AT * current:
            keep = _shrunk(live, home[where], threads, min_rows)
        if keep is not None:
            for i, (keys, values) in enumerate(caches):
                new_k = torch.empty(keep.numel(), kv_heads, total, head_dim, dtype=dtype, device=device)
                new_v = torch.empty_like(new_k)
                new_k[:, :, :seen] = keys[keep, :, :seen]
                new_v[:, :, :seen] = values[keep, :, :seen]
                caches[i] = (new_k, new_v)
            where, live, tokens, kv_valid = where[keep], live[keep], tokens[keep], kv_valid[keep]
        position = next_position[where] + step
        h = inner.embed_tokens(tokens[:, None])
        mask = kv_valid[:, None, None, : seen + 1] if padded else None
        h = _layers(model, h, cos_table[position][:, None], sin_table[position][:, None], caches, seen, mask, False, 1)
        logits = model.lm_head(inner.norm(h)[:, -1:, :])[:, -1, :]
    prompt = input_ids.repeat_interleave(n, 0) if n > 1 else input_ids
    return torch.cat([prompt, out[:, :steps]], dim=-1)


def _threads_of_rows(rows: int, threads: int) -> Any:
    """The thread each row's attention runs on in a batch of ``rows`` (ATen's ``parallel_for`` over
    rows × heads × query blocks: equal runs per thread), or ``None`` unless the runs are whole rows."""
    import torch

    if rows % threads:  # then some run ends inside a row
        return None
    return torch.arange(rows) // (rows // threads)


def _shrunk(live: Any, home: Any, threads: int, min_rows: int) -> Any:
    """Buffer rows to keep: per thread, its rows still generating, topped up with finished rows to
    as many as the busiest thread has (so the batch splits onto the same threads), ``min_rows`` at
    least; ``None`` when that is not fewer rows."""
    import torch

    groups = [torch.nonzero(live & (home == t)).squeeze(1).tolist() for t in range(threads)]
    size = max(max(len(g) for g in groups), -(-min_rows // threads))
    if size * threads >= live.numel():
        return None
    # finished rows of the thread's own first (they then keep their floats too), then any
    spares = [torch.nonzero(~live & (home == t)).squeeze(1).tolist() for t in range(threads)]
    for group, own in zip(groups, spares):
        take = own[: size - len(group)]
        group += take
        del own[: len(take)]
    rest = [row for own in spares for row in own]
    for group in groups:
        take = rest[: size - len(group)]
        group += take
        del rest[: len(take)]
    return torch.tensor([row for group in groups for row in sorted(group)])


# --------------------------------------------------------------------------- the checked entry point

_decisions: "weakref.WeakKeyDictionary[Any, bool]" = weakref.WeakKeyDictionary()
#: :func:`float_path` -> whether the self-check passed on a model on that path (this process)
_paths: dict[tuple, bool] = {}


def float_path(model: Any) -> tuple:
    """What decides whether :func:`fast_generate`'s floats equal ``generate``'s on ``model``: the
    code (torch and transformers releases), the model's class and architecture (its config, less
    its name and the release that wrote it), dtype and device, and torch's thread count (which
    rows share a thread) and the CPU kernels torch dispatches to (its CPU capability). Two checkpoints of one
    architecture share it: weights change values, not which kernels run on which shapes; nor does the model
    config's ``use_cache`` (``generate`` follows its generation config's, which the fast sampler requires on)."""
    import torch
    import transformers

    config = model.config.to_dict()
    # ``use_cache``: generate caches by its generation config's (which :func:`_plan` requires on), whatever the
    # model config says; trainers turn the model config's off (TRL under gradient checkpointing), so a round's
    # checkpoint would otherwise be a path of its own and be checked again (~30 CPU s for SmolLM2-135M)
    for key in ("_name_or_path", "transformers_version", "use_cache"):
        config.pop(key, None)
    architecture = json.dumps(config, sort_keys=True, default=str)
    return (torch.__version__, transformers.__version__, f"{type(model).__module__}.{type(model).__qualname__}",
            architecture, str(model.dtype), model.device.type, torch.get_num_threads(), torch.backends.cpu.get_cpu_capability())


@functools.cache
def _own_source_sha256() -> str:
    return hashlib.sha256(Path(__file__).read_bytes()).hexdigest()


def verdict_file(path: tuple) -> Path:
    """Where a passed self-check on float path ``path`` is recorded (the cache; see the module's docs)."""
    from envengineer.api import cache_root

    key = hashlib.sha256(json.dumps([list(path), _own_source_sha256(), cpu_model(), cpu_features(), platform.machine()],
                                    default=str).encode()).hexdigest()[:32]
    return cache_root() / "fast-sampler" / f"{key}.json"


def _recorded_pass(path: tuple) -> bool:
    file = verdict_file(path)
    try:
        record = json.loads(file.read_text())
    except (OSError, ValueError):
        return False
    return isinstance(record, dict) and record.get("passed") is True and record.get("float_path") == [str(x) for x in path]


def _record_pass(path: tuple) -> None:
    from envengineer.api import write_text

    try:
        write_text(verdict_file(path), json.dumps({
            "passed": True, "float_path": [str(x) for x in path], "fast_sampler_sha256": _own_source_sha256(),
            "cpu": cpu_model()}, indent=1) + "\n")
    except OSError as exc:  # a read-only cache costs the next process the check, nothing else
        logger.debug("fast sampler: the self-check's verdict was not recorded: %s", exc)


def _check_rows(attention_mask: Any, k: int) -> list[int]:
    """Up to ``k`` rows of the batch, spread over its prompt lengths (ragged when it is)."""
    lengths = attention_mask.sum(-1).tolist()
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    if len(order) <= k:
        return order
    return sorted({order[round(j * (len(order) - 1) / (k - 1))] for j in range(k)})


def self_check(model: Any, input_ids: Any, attention_mask: Any, *, max_new_tokens: int, eos_token_id: Any,
               pad_token_id: Any, temperature: float | None = None, top_p: float | None = None,
               top_k: int | None = None) -> str | None:
    """Compare :func:`fast_generate` with ``model.generate`` on rows of this batch: greedy (up to 48
    prompts) and sampled (8 prompts × 8 samples, the call's sampling settings or temperature 1, top-p
    0.9), at most 64 new tokens. ``None`` when every token agrees, else what differed. Torch's random
    state is left as it was."""
    import torch

    new = min(max_new_tokens, 64)
    sampling = {"temperature": temperature, "top_p": top_p, "top_k": top_k} if temperature else {
        "temperature": 1.0, "top_p": 0.9, "top_k": 0}
    checks = [("greedy", 48, {"do_sample": False, "num_return_sequences": 1, "temperature": None, "top_p": None, "top_k": None}),
              ("sampled", 8, {"do_sample": True, "num_return_sequences": 8, **sampling})]
    with torch.random.fork_rng(devices=[]), torch.inference_mode():
        for name, k, settings in checks:
            idx = torch.tensor(_check_rows(attention_mask, k))
            mask = attention_mask[idx]
            width = int(mask.sum(-1).max())
            ids, mask = input_ids[idx][:, -width:], mask[:, -width:]
            common = {"max_new_tokens": new, "eos_token_id": eos_token_id, "pad_token_id": pad_token_id, **settings}
            torch.manual_seed(1234)
            expected = model.generate(input_ids=ids, attention_mask=mask, **common)
            torch.manual_seed(1234)
            try:
                got = fast_generate(model, ids, mask, **common)
            except Exception as exc:  # a failure is a difference: generate takes over
                return f"{name}: {type(exc).__name__}: {exc}"
            if got.shape != expected.shape or not torch.equal(got, expected):
                if got.shape != expected.shape:
                    return f"{name}: shape {tuple(got.shape)} != generate's {tuple(expected.shape)}"
                row = int((got != expected).any(-1).nonzero()[0])
                return f"{name}: row {row} differs from generate's"
    return None


def generate(model: Any, input_ids: Any, attention_mask: Any, *, mode: Mode = "auto", **kwargs: Any) -> Any:
    """``model.generate(input_ids=..., attention_mask=..., **kwargs)``, through the fast sampler where it applies.

    ``mode``: ``False`` always ``generate``; ``"auto"`` the fast sampler on models it supports once
    :func:`self_check` passed on the model or on another on its :func:`float_path` (else ``generate``,
    with one :class:`FastSamplerFallback` warning per model); ``True`` the same, but an unsupported
    model or setting, or a failed self-check, is an error.
    """
    if mode is False:
        return model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    try:
        _plan(model, input_ids, **_plan_kwargs(kwargs))
        reason = None if attention_mask is not None else "an attention mask is required"
    except Unsupported as exc:
        reason = str(exc)
    if reason is not None:
        if mode is True:
            raise Unsupported(f"fast_sampler: {reason}")
        logger.debug("fast sampler not used: %s", reason)
        return model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    ok = _decisions.get(model)
    if ok is None:
        path = float_path(model)
        ok = _paths.get(path)
        if ok is None and _recorded_pass(path):
            ok = _paths[path] = True
        if ok is None:
            sampling = kwargs.get("do_sample")
            difference = self_check(
                model, input_ids, attention_mask, max_new_tokens=kwargs["max_new_tokens"],
                eos_token_id=kwargs.get("eos_token_id"), pad_token_id=kwargs.get("pad_token_id"),
                temperature=kwargs.get("temperature") if sampling else None, top_p=kwargs.get("top_p") if sampling else None,
                top_k=kwargs.get("top_k") if sampling else None)
            ok = _paths[path] = difference is None
            if ok:
                _record_pass(path)
        else:  # checked on another model on this float path
            difference = "the self-check differed from generate on another model of this float path"
        _decisions[model] = ok
        if not ok:
            if mode is True:
                raise Unsupported(f"fast_sampler: true, but on this model {difference}")
            message = f"fast sampler: {difference} on this model; sampling with transformers' generate instead"
            warnings.warn(message, FastSamplerFallback, stacklevel=2)
    if not ok:
        return model.generate(input_ids=input_ids, attention_mask=attention_mask, **kwargs)
    return fast_generate(model, input_ids, attention_mask, **kwargs)


def _plan_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The settings :func:`_plan` reads, from ``generate``'s keyword arguments."""
    known = {"max_new_tokens", "eos_token_id", "pad_token_id", "do_sample", "temperature", "top_p", "top_k", "num_return_sequences"}
    unknown = set(kwargs) - known
    if unknown:
        raise Unsupported(f"arguments {sorted(unknown)}")
    if "max_new_tokens" not in kwargs:
        raise Unsupported("max_new_tokens is required")
    return {"eos_token_id": None, "pad_token_id": None, "do_sample": False, "temperature": None, "top_p": None,
            "top_k": None, "num_return_sequences": 1, **kwargs}
