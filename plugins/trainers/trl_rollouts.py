"""GRPO's rollouts through the fast sampler, for the trl trainer (option ``fast_rollouts``).

TRL's rollout calls ``model.generate(input_ids=..., attention_mask=..., generation_config=...)`` with
one prompt per row, a group's ``num_generations`` repeats side by side. :func:`routed_generate`
answers that call with :mod:`envengineer.plugins.policies.fast_sampler` where every setting in
effect is one the fast sampler takes (:func:`rollout_settings`), computing each prompt once for its
repeats (:func:`repeated_rows`), and counts how each rollout was sampled (:class:`RolloutLog`).
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any, Literal

_INERT_GENERATION_FIELDS = {"disable_compile", "bos_token_id"}


def rollout_settings(model, generation_config) -> tuple[dict[str, Any] | None, str | None]:
    """The fast sampler's keyword arguments for TRL's ``model.generate(..., generation_config=...)``, or
    ``(None, why not)``: every setting that is in effect for ``generate`` (TRL's config over the model's
    defaults) must be one the fast sampler's arguments give it as well."""
    try:
        effective, extra = model._prepare_generation_config(copy.deepcopy(generation_config))
        kwargs = {key: getattr(effective, key) for key in
                  ("max_new_tokens", "do_sample", "pad_token_id", "eos_token_id", "temperature", "top_p", "top_k",
                   "num_return_sequences")}
        ours, our_extra = model._prepare_generation_config(None, **kwargs)
    except Exception as exc:
        return None, f"generation config: {type(exc).__name__}: {exc}"
    theirs, mine = effective.to_dict(), ours.to_dict()
    differ = sorted(k for k in set(theirs) | set(mine) if k not in _INERT_GENERATION_FIELDS and theirs.get(k) != mine.get(k))
    if extra or our_extra or differ:
        return None, f"generation settings {differ or sorted({**extra, **our_extra})}"
    if getattr(model.config, "attention_dropout", 0.0):
        return None, "attention dropout (generate in training mode would draw for it)"
    return kwargs, None


class RolloutLog:
    """How each rollout was sampled: counts of fast-sampler and ``generate`` calls, why ``generate``, and
    the seconds TRL's generation took (tokenized prompts to completion ids, all rollouts together)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.cpu_seconds = 0.0
        self.fast = 0
        self.generate = 0
        self.reasons: list[str] = []

    def slow(self, reason: str) -> None:
        self.generate += 1
        if reason not in self.reasons:
            self.reasons.append(reason)

    def metrics(self) -> dict[str, Any]:
        out: dict[str, Any] = {"rollout_seconds": round(self.seconds, 2), "rollout_cpu_seconds": round(self.cpu_seconds, 2),
                               "rollouts_fast": self.fast,
                               "rollouts_generate": self.generate}
        if self.reasons:
            out["rollouts_generate_why"] = "; ".join(self.reasons)
        return out


def repeated_rows(input_ids, attention_mask) -> int:
    """The largest ``g`` such that the batch is each of its prompts ``g`` times in a row (TRL's rollout
    batches: a prompt's ``num_generations`` copies side by side), 1 when it is not. ``generate`` with
    ``num_return_sequences=g`` on every ``g``-th row expands its inputs to exactly this batch (each row
    repeated in place) and samples it row for row as it samples this one."""
    rows = input_ids.size(0)
    for g in range(rows, 1, -1):
        if rows % g:
            continue
        ids, mask = input_ids.view(rows // g, g, -1), attention_mask.view(rows // g, g, -1)
        if bool((ids == ids[:, :1]).all()) and bool((mask == mask[:, :1]).all()):
            return g
    return 1


@contextlib.contextmanager
def routed_generate(model, mode: Literal["auto"] | bool, log: RolloutLog):
    """``model.generate`` answered by the fast sampler inside the block (TRL's rollouts call it with
    ``input_ids``, ``attention_mask`` and ``generation_config``; one prompt per row, the group's repeats
    already in the batch). The model runs in eval mode for it, as the fast sampler requires: Qwen3's only
    dropout is its attention dropout, checked to be 0, so train-mode ``generate`` computes the same and draws
    no more random numbers; the fast sampler consumes torch's global random state exactly as ``generate``
    does, so training afterwards sees the same state. Anything else goes to ``generate`` as TRL called it
    (``mode`` True: an error)."""
    from envengineer.plugins.policies import fast_sampler

    original = model.generate

    def generate(input_ids=None, attention_mask=None, generation_config=None, **rest):
        if rest:
            kwargs, reason = None, f"generate arguments {sorted(rest)}"
        elif generation_config is None:
            kwargs, reason = None, "no generation config"
        else:
            kwargs, reason = rollout_settings(model, generation_config)
        training = model.training
        model.train(False)
        try:
            if kwargs is not None:
                if attention_mask is None:
                    reason = "no attention mask"
                else:
                    try:
                        fast_sampler._plan(model, input_ids, **kwargs)
                    except fast_sampler.Unsupported as exc:
                        reason = str(exc)
            if reason is not None:
                if mode is True:
                    raise fast_sampler.Unsupported(f"trainer.trl.fast_rollouts: true, but {reason}")
                log.slow(reason)
                model.train(training)
                return original(input_ids=input_ids, attention_mask=attention_mask, generation_config=generation_config, **rest)
            del model.generate  # the self-check (and a fallback after it) call transformers' own generate
            group = repeated_rows(input_ids, attention_mask)
            if group > 1:  # TRL's group repeats: each prompt once, its samples as generate expands them
                input_ids, attention_mask = input_ids[::group], attention_mask[::group]
                kwargs = {**kwargs, "num_return_sequences": group * (kwargs.get("num_return_sequences") or 1)}
            try:
                out = fast_sampler.generate(model, input_ids, attention_mask, mode=mode, **kwargs)
            finally:
                model.generate = generate
            if fast_sampler._decisions.get(model):
                log.fast += 1
            else:
                log.slow("the fast sampler's self-check differed from generate")
            return out.clone()  # a plain tensor (the fast sampler's is an inference tensor)
        finally:
            model.train(training)

    model.generate = generate
    try:
        yield
    finally:
        if model.__dict__.get("generate") is generate:
            del model.generate
