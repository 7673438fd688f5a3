"""The trl trainer's padding-free log-probability passes: TRL's own pass's numbers (and gradients) from
fewer positions, the split decided by the lengths alone, TRL's pass where a mask is not one span a row."""

import itertools
import json
import types
from pathlib import Path

import pytest

pytest.importorskip("trl")

from envengineer.plugins.trainers.trl_padding_free import (  # noqa: E402
    padded_positions,
    split_sorted,
    unpadded_logps,
)
from envengineer.training import TrainRequest  # noqa: E402

SHIPPED_BASE = next((Path(__file__).resolve().parents[1] / "tasks" / "mapf_frozenlake" / "data" / "tiny").iterdir())


def brute_force(lengths, cost):
    n = len(lengths)
    best = None
    for cuts in itertools.product([False, True], repeat=n - 1):
        bounds = [0] + [i + 1 for i, c in enumerate(cuts) if c] + [n]
        total = sum((j - i) * lengths[j - 1] + cost for i, j in zip(bounds, bounds[1:]))
        best = total if best is None else min(best, total)
    return best


@pytest.mark.parametrize("lengths", [[5], [3, 3, 3], [1, 2, 40, 41, 42, 200], [10, 11, 12, 60, 61, 90, 91, 92, 93]])
@pytest.mark.parametrize("cost", [0, 8, 48, 1000])
def test_the_split_is_the_cheapest(lengths, cost):
    runs = split_sorted(lengths, cost)
    assert runs[0][0] == 0 and runs[-1][1] == len(lengths)
    assert all(a[1] == b[0] for a, b in zip(runs, runs[1:]))
    assert sum((j - i) * lengths[j - 1] + cost for i, j in runs) == brute_force(lengths, cost)
    if cost == 1000:
        assert runs == [(0, len(lengths))]


def grpo_batch(tokenizer, seed=0, rows=24, longest_completion=20):
    """A GRPO-shaped batch: prompts of ragged lengths padded on the left, completions on the right
    (TRL's layout), one completion empty but for its first token."""
    import torch

    generator = torch.Generator().manual_seed(seed)
    prompt_lengths = torch.randint(4, 30, (rows,), generator=generator)
    completion_lengths = torch.randint(1, longest_completion + 1, (rows,), generator=generator)
    completion_lengths[3] = 1
    width_p, width_c = int(prompt_lengths.max()), int(completion_lengths.max())
    ids = torch.full((rows, width_p + width_c), tokenizer.pad_token_id)
    mask = torch.zeros_like(ids)
    for r in range(rows):
        p, c = int(prompt_lengths[r]), int(completion_lengths[r])
        ids[r, width_p - p: width_p + c] = torch.randint(2, len(tokenizer), (p + c,), generator=generator)
        mask[r, width_p - p: width_p + c] = 1
    return ids, mask, width_c


def trl_pass(model, ids, mask, keep, batch_size=None, entropy=True):
    """TRL's own GRPO log-probability pass (its function; an Accelerator is all it reads of the trainer)."""
    from accelerate import Accelerator
    from trl import GRPOTrainer

    owner = types.SimpleNamespace(accelerator=Accelerator(cpu=True))
    return GRPOTrainer._get_per_token_logps_and_entropies(owner, model, ids, mask, keep, batch_size=batch_size, compute_entropy=entropy)


@pytest.fixture(scope="module")
def shipped():
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.trainer.utils import add_fused_lm_head

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(SHIPPED_BASE)
    add_fused_lm_head(model, temperature=0.7, outputs=("log_probs", "entropy"))
    return model, AutoTokenizer.from_pretrained(SHIPPED_BASE)


def test_the_same_log_probs_entropies_and_gradients_as_trls_pass(shipped):
    import torch

    model, tokenizer = shipped
    ids, mask, keep = grpo_batch(tokenizer)

    def forward(i, m, p, labels):
        return model(input_ids=i, attention_mask=m, position_ids=p, labels=labels, fused_lm_head=True)

    ref_logps, ref_entropy, _ = trl_pass(model, ids, mask, keep)
    (ref_logps * mask[:, -keep:]).sum().backward()
    ref_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    logps, entropy = unpadded_logps(forward, ids, mask, keep, True, tokenizer.pad_token_id)
    (logps * mask[:, -keep:]).sum().backward()
    scored = mask[:, -keep:].bool()
    assert logps.shape == ref_logps.shape and entropy.shape == ref_entropy.shape
    torch.testing.assert_close(logps[scored], ref_logps[scored], rtol=0, atol=2e-5)
    torch.testing.assert_close(entropy[scored], ref_entropy[scored], rtol=0, atol=2e-5)
    assert bool((logps[~scored] == 0).all()) and bool((ref_logps[~scored] == 0).all())  # TRL leaves zeros there too
    for param, ref in zip(model.parameters(), ref_grads):
        assert float((param.grad - ref).norm() / ref.norm()) < 1e-5  # rounding: summed in another order
    model.zero_grad()
    real, padded, computed = padded_positions(mask)
    assert real == int(mask.sum()) and padded == mask.numel() and real <= computed < padded


def test_positions_are_trls_columns_not_the_rows_own(shipped):
    """A row cut out of its padding keeps the positions TRL's pass gives it: numbering the cut rows
    from 0 instead gives other numbers (RoPE's relative invariance holds only up to rounding), which
    this test would see if the module did so, and a different answer at every shifted row proves it looked."""
    import torch

    model, tokenizer = shipped
    ids, mask, keep = grpo_batch(tokenizer, seed=1)

    def renumbered(i, m, p, labels):
        return model(input_ids=i, attention_mask=m, position_ids=p - p[:, :1], labels=labels, fused_lm_head=True)

    def kept(i, m, p, labels):
        return model(input_ids=i, attention_mask=m, position_ids=p, labels=labels, fused_lm_head=True)

    with torch.no_grad():
        ref, _, _ = trl_pass(model, ids, mask, keep, entropy=False)
        same, _ = unpadded_logps(kept, ids, mask, keep, False)
        other, _ = unpadded_logps(renumbered, ids, mask, keep, False)
    scored = mask[:, -keep:].bool()
    assert (same - ref)[scored].abs().max() <= (other - ref)[scored].abs().max()


def test_a_mask_that_is_not_one_span_a_row_is_left_to_trl(shipped):
    model, tokenizer = shipped
    ids, mask, keep = grpo_batch(tokenizer)
    mask[5, -keep - 2] = 0  # a hole inside row 5's prompt
    assert unpadded_logps(lambda *a: pytest.fail("must not run"), ids, mask, keep, False) is None
    mask[5, :] = 0  # a row with nothing
    assert unpadded_logps(lambda *a: pytest.fail("must not run"), ids, mask, keep, False) is None


def test_a_round_trains_padding_free_by_default_and_to_the_same_weights(registry, tiny_base, tmp_path):
    """One GRPO round with and without: the same rewards and steps, weights equal up to float rounding,
    and the metrics count the positions saved."""
    import torch
    from safetensors.torch import load_file

    generator, validator = registry.task("mapf-frozenlake", {"agents": 2})
    records = generator.generate(generator.default_config(), n=8, seed=2).records
    results = {}
    for padding_free in (False, True):
        options = {"max_steps": 2, "num_generations": 4, "per_device_train_batch_size": 8, "max_completion_length": 12,
                   "learning_rate": 1e-3, "beta": 0.01, "threads": 1}
        if not padding_free:
            options["padding_free"] = False
        trainer = registry.create("trainer", "trl", options)
        results[padding_free] = trainer.train(TrainRequest(
            policy_path=tiny_base, records=records, generator=generator, validator=validator,
            out_dir=tmp_path / str(padding_free), seed=0, round=0, prompt_style="compact"))
    on, off = results[True], results[False]
    assert "padding_free_passes" not in off.metrics
    assert on.metrics["padding_free_passes"] > 0 and on.metrics["padding_free_fallbacks"] == 0
    assert on.metrics["logprob_real_tokens"] <= on.metrics["logprob_computed_positions"] < on.metrics["logprob_padded_positions"]
    rewards = [[json.loads(line)["reward_mean"] for line in r.curves.read_text().splitlines()] for r in (off, on)]
    assert rewards[0] == rewards[1]
    a, b = (load_file(r.checkpoint / "model.safetensors") for r in (off, on))
    assert a.keys() == b.keys()
    for key in a:
        torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-5)
