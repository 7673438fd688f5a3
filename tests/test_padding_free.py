"""The trl trainer's padding-free log-probability passes: TRL's own pass's numbers (and gradients) from
fewer positions, the split decided by the lengths alone, TRL's pass where a mask is not one span a row."""

import itertools
import json
import types
from pathlib import Path

import pytest

pytest.importorskip("trl")

from envengineer.plugins.trainers.trl_padding_free import (  # noqa: E402
    cached_calls,
    padded_positions,
    shared_prefix_logps,
    split_sorted,
    unpadded_logps,
)
from envengineer.components.training import TrainRequest  # noqa: E402

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


def random_llama(seed=0):
    """A small random LlamaForCausalLM (GQA 6 / 2 heads, attention and MLP biases) over the tiny policy's tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from envengineer.plugins.policies import tiny_model

    tokenizer = tiny_model.build_tokenizer()
    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=96, intermediate_size=192, num_hidden_layers=2,
                         num_attention_heads=6, num_key_value_heads=2, head_dim=16, max_position_embeddings=256,
                         tie_word_embeddings=True, attention_bias=True, mlp_bias=True, initializer_range=0.2,
                         pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id, attn_implementation="sdpa",
                         rope_parameters={"rope_type": "default", "rope_theta": 100000.0})
    return LlamaForCausalLM(config), tokenizer


@pytest.fixture(scope="module", params=["tiny-qwen3", "random-llama"])
def shipped(request):
    """The shipped tiny base (a Qwen3), then a random Llama; each with TRL's fused head."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.trainer.utils import add_fused_lm_head

    torch.manual_seed(0)
    if request.param == "tiny-qwen3":
        model, tokenizer = AutoModelForCausalLM.from_pretrained(SHIPPED_BASE), AutoTokenizer.from_pretrained(SHIPPED_BASE)
    else:
        model, tokenizer = random_llama()
    add_fused_lm_head(model, temperature=0.7, outputs=("log_probs", "entropy"))
    return model, tokenizer


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


def grouped_batch(tokenizer, seed=0, prompts=6, group=4, longest_completion=20):
    """GRPO's layout with its groups: each prompt ``group`` times, each time with its own completion."""
    import torch

    ids, mask, keep = grpo_batch(tokenizer, seed=seed, rows=prompts, longest_completion=longest_completion)
    width = ids.shape[1] - keep
    generator = torch.Generator().manual_seed(seed + 100)
    ids, mask = ids.repeat_interleave(group, 0), mask.repeat_interleave(group, 0)
    ids[:, width:], mask[:, width:] = tokenizer.pad_token_id, 0
    for row in range(ids.shape[0]):
        length = int(torch.randint(1, keep + 1, (1,), generator=generator))
        ids[row, width:width + length] = torch.randint(2, len(tokenizer), (length,), generator=generator)
        mask[row, width:width + length] = 1
    return ids, mask, keep


def test_a_shared_prompt_once_gives_trls_log_probs_entropies_and_gradients(shipped):
    import torch

    model, tokenizer = shipped
    ids, mask, keep = grouped_batch(tokenizer)
    forward, prefix = cached_calls(model)
    ref_logps, ref_entropy, _ = trl_pass(model, ids, mask, keep)
    (ref_logps * mask[:, -keep:]).sum().backward()
    ref_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    prompts = []
    logps, entropy, computed = shared_prefix_logps(
        forward, lambda *a: prompts.append(a[0].shape) or prefix(*a), ids, mask, keep, True, tokenizer.pad_token_id)
    (logps * mask[:, -keep:]).sum().backward()
    scored = mask[:, -keep:].bool()
    torch.testing.assert_close(logps[scored], ref_logps[scored], rtol=0, atol=2e-5)
    torch.testing.assert_close(entropy[scored], ref_entropy[scored], rtol=0, atol=2e-5)
    assert bool((logps[~scored] == 0).all())
    for param, ref in zip(model.parameters(), ref_grads):
        assert float((param.grad - ref).norm() / ref.norm()) < 1e-5  # a prompt's gradient summed over its group
    model.zero_grad()
    assert prompts == [torch.Size([6, prompts[0][1]])]  # the six prompts once, in one call
    real, _, unshared = padded_positions(mask)
    assert computed < real <= unshared


def test_a_shared_prompt_is_only_taken_where_it_applies(shipped):
    model, tokenizer = shipped
    forward, prefix = cached_calls(model)
    never = lambda *a: pytest.fail("must not run")  # noqa: E731
    ids, mask, keep = grpo_batch(tokenizer)  # every prompt different: nothing shared
    assert shared_prefix_logps(never, never, ids, mask, keep, False) is None
    ids, mask, keep = grouped_batch(tokenizer)
    width = ids.shape[1] - keep
    one = mask.clone()
    one[:4, :width - 1] = 0  # a prompt of one token: nothing before its last token to share
    assert shared_prefix_logps(never, never, ids, one, keep, False) is None
    holed = mask.clone()
    holed[5, width - 2] = 0  # a hole in a prompt
    assert shared_prefix_logps(never, never, ids, holed, keep, False) is None
    assert shared_prefix_logps(forward, prefix, ids, mask, keep, False) is not None


def test_the_trainer_shares_prompts_only_on_the_paths_it_is_tested_on(shipped):
    """trainer_pass shares a chunk's prompts with sdpa attention, not under gradient checkpointing."""
    import torch
    from accelerate import Accelerator

    from envengineer.plugins.trainers.trl_padding_free import Positions, trainer_pass

    model, tokenizer = shipped
    ids, mask, keep = grouped_batch(tokenizer)
    owner = types.SimpleNamespace(accelerator=Accelerator(cpu=True), processing_class=tokenizer)
    counted = {}
    for checkpointing in (False, True):
        if checkpointing:
            model.gradient_checkpointing_enable()
        positions = Positions()
        try:
            with torch.no_grad():
                logps, _, _ = trainer_pass(owner, model, ids, mask, keep, None, False, positions, shared_prefix=True)
        finally:
            model.gradient_checkpointing_disable()
        counted[checkpointing] = (positions.shared, positions.computed, logps)
    assert counted[False][0] == 1 and counted[True][0] == 0
    assert counted[False][1] < int(mask.sum()) <= counted[True][1]
    scored = mask[:, -keep:].bool()
    torch.testing.assert_close(counted[False][2][scored], counted[True][2][scored], rtol=0, atol=2e-5)


def test_a_mask_that_is_not_one_span_a_row_is_left_to_trl(shipped):
    model, tokenizer = shipped
    ids, mask, keep = grpo_batch(tokenizer)
    mask[5, -keep - 2] = 0  # a hole inside row 5's prompt
    assert unpadded_logps(lambda *a: pytest.fail("must not run"), ids, mask, keep, False) is None
    mask[5, :] = 0  # a row with nothing
    assert unpadded_logps(lambda *a: pytest.fail("must not run"), ids, mask, keep, False) is None


@pytest.fixture(scope="module")
def llama_base(tmp_path_factory):
    """A small random Llama (:func:`random_llama`) saved as a model folder with the tiny policy's tokenizer."""
    model, tokenizer = random_llama(seed=3)
    path = tmp_path_factory.mktemp("llama-base")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


@pytest.mark.parametrize("base", ["tiny_base", "llama_base"])
def test_a_round_trains_padding_free_by_default_and_to_the_same_weights(registry, base, request, tmp_path):
    """One GRPO round three ways (TRL's padded passes, padding-free with every row computing its prompt,
    and the default: padding-free with a prompt computed once for its group): the same rewards and steps,
    weights equal up to float rounding, and the metrics count the positions saved; on a Qwen3 and a Llama."""
    import torch
    from safetensors.torch import load_file

    tiny_base = request.getfixturevalue(base)

    generator, validator = registry.task("mapf-frozenlake", {"agents": 2})
    records = generator.generate(generator.default_config(), n=8, seed=2).records
    results = {}
    for way, extra in (("padded", {"padding_free": False}), ("unshared", {"shared_prefix": False}), ("default", {})):
        options = {"max_steps": 2, "num_generations": 4, "per_device_train_batch_size": 8, "max_completion_length": 12,
                   "learning_rate": 1e-3, "beta": 0.01, "threads": 1, **extra}
        trainer = registry.create("trainer", "trl", options)
        results[way] = trainer.train(TrainRequest(
            policy_path=tiny_base, records=records, generator=generator, validator=validator,
            out_dir=tmp_path / way, seed=0, round=0, prompt_style="compact"))
    off, unshared, on = results["padded"], results["unshared"], results["default"]
    assert "padding_free_passes" not in off.metrics
    for result in (unshared, on):
        assert result.metrics["padding_free_passes"] > 0 and result.metrics["padding_free_fallbacks"] == 0
    m = unshared.metrics
    assert m["shared_prefix_chunks"] == 0
    assert m["logprob_real_tokens"] <= m["logprob_computed_positions"] < m["logprob_padded_positions"]
    m = on.metrics
    assert m["shared_prefix_chunks"] == m["padding_free_passes"]  # one chunk a pass here, every one shared
    assert m["logprob_computed_positions"] < m["logprob_real_tokens"] == unshared.metrics["logprob_real_tokens"]
    assert 0 < m["logprob_computed_positions_with_grad"] < m["logprob_computed_positions"]  # the reference's pass has none
    rewards = [[json.loads(line)["reward_mean"] for line in r.curves.read_text().splitlines()] for r in (off, unshared, on)]
    assert rewards[0] == rewards[1] == rewards[2]
    a = load_file(off.checkpoint / "model.safetensors")
    for result in (unshared, on):
        b = load_file(result.checkpoint / "model.safetensors")
        assert a.keys() == b.keys()
        for key in a:
            torch.testing.assert_close(a[key], b[key], rtol=0, atol=1e-5)


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
def test_smollm2_padding_free_and_shared_prompts_give_trls_numbers(smollm2_folder):
    """The real Llama (SmolLM2-135M-Instruct, 30 layers, float32): both passes give TRL's log-probabilities and
    entropies up to float rounding, and the shared-prompt pass its gradients (4 prompts × 3 completions)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl.trainer.utils import add_fused_lm_head

    model = AutoModelForCausalLM.from_pretrained(smollm2_folder, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(smollm2_folder)
    add_fused_lm_head(model, temperature=0.7, outputs=("log_probs", "entropy"))
    ids, mask, keep = grouped_batch(tokenizer, prompts=4, group=3, longest_completion=12)
    scored = mask[:, -keep:].bool()
    forward, prefix = cached_calls(model)
    ref_logps, ref_entropy, _ = trl_pass(model, ids, mask, keep)
    (ref_logps * mask[:, -keep:]).sum().backward()
    ref_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    with torch.no_grad():
        plain = unpadded_logps(lambda i, m, p, labels: model(input_ids=i, attention_mask=m, position_ids=p, labels=labels,
                                                             fused_lm_head=True), ids, mask, keep, True, tokenizer.pad_token_id)
    logps, entropy, computed = shared_prefix_logps(forward, prefix, ids, mask, keep, True, tokenizer.pad_token_id)
    (logps * mask[:, -keep:]).sum().backward()
    for got_logps, got_entropy in (plain, (logps, entropy)):
        # measured: within 2.5e-5 of TRL's (log-probs down to -27), 1.7e-5 relative in the gradients
        torch.testing.assert_close(got_logps[scored].detach(), ref_logps[scored].detach(), rtol=0, atol=1e-4)
        torch.testing.assert_close(got_entropy[scored].detach(), ref_entropy[scored].detach(), rtol=0, atol=1e-4)
    worst = max(float((param.grad - ref).norm() / ref.norm()) for param, ref in zip(model.parameters(), ref_grads))
    assert worst < 1e-4
    assert computed < int(mask.sum())
