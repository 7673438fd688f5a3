"""One TRL round's moving parts, each on its own: the callback that writes ``curves.jsonl`` as TRL logs, and
TRL's ``GRPOTrainer`` subclassed for the round (rollouts through the fast sampler, tokens after the answer's
end left out of the loss, negative advantages weighted, the padding-free log-prob pass).
:meth:`envengineer.plugins.trainers.trl_grpo.TrlGrpoTrainer.train` puts them together."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from envengineer.api import CURVE_KEYS, ConfigError, Generator
from envengineer.plugins.trainers.trl_memory import chunked
from envengineer.plugins.trainers.trl_padding_free import Positions, trainer_pass
from envengineer.plugins.trainers.trl_rollouts import RolloutLog, routed_generate

#: TRL's log keys -> curves.jsonl's (the order of CURVE_KEYS)
LOG_KEYS = {
    "reward": "reward_mean",
    "reward_std": "reward_std",
    "frac_reward_zero_std": "zero_std_frac",
    "kl": "kl",
    "completions/mean_length": "completion_length",
    "loss": "loss",
    "learning_rate": "learning_rate",
    "grad_norm": "grad_norm",  # beyond CURVE_KEYS: diagnostics
}


def weight_negative_advantages(advantages, weight: float):
    """``advantages`` with the negative entries multiplied by ``weight`` (a torch tensor)."""
    import torch

    return torch.where(advantages < 0, advantages * weight, advantages)


def answer_tokens(tokenizer, ids: list[int], end_of, eos_ids) -> int | None:
    """How many of a completion's token ``ids`` the answer uses, or None when all of them.

    ``end_of(text)`` is the task's :meth:`~envengineer.components.Generator.answer_end` on the
    decoded text; the smallest token prefix whose decoding reaches that offset is kept, plus an
    end-of-sequence token that directly follows it (stopping there is worth learning).
    """
    text = tokenizer.decode(ids, skip_special_tokens=True)
    end = end_of(text)
    if end is None or end >= len(text.rstrip()):
        return None
    low, high = 0, len(ids)
    while low < high:  # smallest k with len(decode(ids[:k])) >= end
        mid = (low + high) // 2
        if len(tokenizer.decode(ids[:mid], skip_special_tokens=True)) >= end:
            high = mid
        else:
            low = mid + 1
    if low < len(ids) and ids[low] in eos_ids:
        low += 1
    return low


#: GenerationConfig fields that do not change the tokens generate samples


def curves_callback(curves_path: Path) -> Any:
    """A ``TrainerCallback`` that appends each logged step to ``curves_path`` (one JSON line, CURVE_KEYS)
    and keeps the lines (``.lines``)."""
    from transformers import TrainerCallback

    class Curves(TrainerCallback):
        def __init__(self) -> None:
            self.t0 = time.perf_counter()
            self.lines: list[dict[str, Any]] = []

        def on_log(self, args, state, control, logs=None, **kwargs):
            logs = logs or {}
            if "reward" not in logs and "loss" not in logs:
                return  # the end-of-training summary
            line = {"step": state.global_step}
            for key in CURVE_KEYS[1:]:
                line[key] = None
            for source, target in LOG_KEYS.items():
                if source in logs:
                    line[target] = float(logs[source])
            line["seconds"] = round(time.perf_counter() - self.t0, 2)
            self.lines.append(line)
            with curves_path.open("a") as handle:
                handle.write(json.dumps(line) + "\n")

    return Curves()


def round_trainer(o: Any, records: list[dict[str, Any]], tokenizer: Any, generator: Any, style: str,
                  rollout_log: RolloutLog, positions: Positions) -> type:
    """TRL's ``GRPOTrainer`` for one round of ``records`` under the trainer's options ``o``."""
    from trl import GRPOTrainer

    weight = o.negative_advantage_weight
    mask_after = o.mask_after_answer and type(generator).answer_end is not Generator.answer_end
    fast_mode = o.fast_rollouts
    padding_free, shared_prefix = o.padding_free, o.shared_prefix

    class RoundTrainer(GRPOTrainer):
        """TRL's GRPO; rollouts through the fast sampler, tokens after the answer's end leave the loss,
        negative advantages weighted."""

        def _generate_single_turn(self, prompt_ids, *args, **kwargs):
            started, cpu_started = time.perf_counter(), time.process_time()
            try:
                return chunked(self._rollout, None if self.use_vllm else o.generation_chunk, prompt_ids, *args, **kwargs)
            finally:
                rollout_log.seconds += time.perf_counter() - started
                rollout_log.cpu_seconds += time.process_time() - cpu_started

        def _rollout(self, *args, **kwargs):
            if fast_mode is False or self.use_vllm or getattr(self, "use_transformers_continuous_batching", False):
                if fast_mode is True:
                    raise ConfigError("trainer.trl.fast_rollouts: true, but TRL generates with vLLM or continuous batching")
                return super()._generate_single_turn(*args, **kwargs)
            with routed_generate(self.accelerator.unwrap_model(self.model_wrapped), fast_mode, rollout_log):
                return super()._generate_single_turn(*args, **kwargs)

        def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                               compute_entropy=False, compute_aux_loss=False, **extra):
            if padding_free and not compute_aux_loss and all(value is None for value in extra.values()):
                found = trainer_pass(self, model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, positions,
                                     shared_prefix)
                if found is not None:
                    return found
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size=batch_size, compute_entropy=compute_entropy,
                compute_aux_loss=compute_aux_loss, **extra)

        def _generate_and_score_completions(self, inputs):
            out = super()._generate_and_score_completions(inputs)
            if mask_after:
                ids, mask = out["completion_ids"], out["completion_mask"]
                for row, example in enumerate(inputs):
                    record = records[int(example["record_index"])]
                    length = int(mask[row].sum())
                    keep = answer_tokens(
                        tokenizer, ids[row, :length].tolist(),
                        lambda text, record=record: generator.answer_end(record, text, style),
                        getattr(self, "eos_token_ids", [tokenizer.eos_token_id]),
                    )
                    if keep is not None:
                        mask[row, keep:] = 0
                if "num_items_in_batch" in out:
                    out["num_items_in_batch"] = self.accelerator.gather(mask.sum()).sum()
            if weight != 1.0:
                out["advantages"] = weight_negative_advantages(out["advantages"], weight)
            return out

    return RoundTrainer
