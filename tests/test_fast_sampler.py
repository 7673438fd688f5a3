"""The fast sampler gives ``generate``'s tokens: on the shipped tiny base, on random Qwen3s and Llamas of
other shapes and on SmolLM2-135M-Instruct (a Llama), greedy and sampled, ragged prompts, rows stopping
early, the ``max_new_tokens`` cap; its self-check falls back to ``generate`` (one warning) when it is
made to differ."""

import hashlib
import json
import warnings
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from envengineer.plugins.policies import fast_sampler, tiny, tiny_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

# random-model prompts: plain strings, no chat template, ragged lengths (1 to 44 characters)
WORDS = ["a", "move the box", "0_1 2_3 | 4_4", "The quick brown fox jumps over the lazy dog.", "x = 1 + 2",
         "hello, world!", "[[1, 2], [3, 4]]", "def f(x): return x * x", "S1 0_6 G1 1_0 P", "N7 H 2_4",
         "ends with a space ", "!" * 17]
PROMPTS = [f"{w} {i}" if i else w for i in range(5) for w in WORDS]  # 60 prompts


@pytest.fixture(scope="module")
def shipped():
    """The quickstart's shipped tiny base (model, tokenizer) and 160 compact prompts."""
    from envengineer.registry import load_registry
    from envengineer.loop.runconfig import load_run_config

    registry = load_registry(entry_points=False)
    config = load_run_config(ROOT / "examples" / "quickstart.yaml")
    options = {k: v for k, v in config.policy.items() if k != "name"}
    policy = registry.create("policy", "tiny", options, where="policy.tiny")
    generator, _ = registry.task(config.task["name"], {k: v for k, v in config.task.items() if k != "name"})
    policy = policy.with_path(policy.prepare(generator=generator))
    model, tokenizer = policy.load()
    records = generator.generate(generator.default_config(), n=160, seed=5).records
    prompts = [generator.render(r, "compact") for r in records]
    return policy, model, tokenizer, prompts


def batch_of(tokenizer, prompts):
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    return batch["input_ids"], batch["attention_mask"]


def both(model, ids, mask, seed=0, **settings):
    """(generate's output, the fast sampler's), each after the same seed; and torch's next draw after each."""
    torch.manual_seed(seed)
    with torch.inference_mode():
        expected = model.generate(input_ids=ids, attention_mask=mask, **settings)
    after_expected = torch.rand(3)
    torch.manual_seed(seed)
    got = fast_sampler.fast_generate(model, ids, mask, **settings)
    after_got = torch.rand(3)
    return expected, got, torch.equal(after_expected, after_got)


GREEDY = {"do_sample": False, "num_return_sequences": 1, "temperature": None, "top_p": None, "top_k": None}


def sampled(n, temperature=0.7, top_p=1.0):
    return {"do_sample": True, "num_return_sequences": n, "temperature": temperature, "top_p": top_p, "top_k": 0}


def stop_lengths(out, width, pad, eos):
    """Generated tokens up to and including eos per row (the row's length when it never stops)."""
    lengths = []
    for row in out[:, width:].tolist():
        stops = [i for i, t in enumerate(row) if t in eos]
        lengths.append(stops[0] + 1 if stops else len(row))
    return lengths


# --------------------------------------------------------------------------- the shipped tiny base


def test_greedy_matches_generate_on_the_shipped_tiny_base(shipped):
    _, model, tokenizer, prompts = shipped
    ids, mask = batch_of(tokenizer, prompts)
    assert len(set(mask.sum(-1).tolist())) > 5  # ragged
    settings = {**GREEDY, "max_new_tokens": 96, "pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id}
    expected, got, _ = both(model, ids, mask, **settings)
    assert torch.equal(got, expected)
    lengths = stop_lengths(expected, ids.shape[1], tokenizer.pad_token_id, {tokenizer.eos_token_id})
    assert len(set(lengths)) > 5  # rows stop at many different steps


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_sampling_matches_generate_on_the_shipped_tiny_base(shipped, seed):
    _, model, tokenizer, prompts = shipped
    ids, mask = batch_of(tokenizer, prompts[:48])
    settings = {**sampled(4), "max_new_tokens": 64, "pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id}
    expected, got, same_rng = both(model, ids, mask, seed=seed, **settings)
    assert expected.shape[0] == 48 * 4
    assert torch.equal(got, expected)
    assert same_rng  # the same random numbers were drawn: later draws agree too


def test_top_p_and_many_samples_match_generate(shipped):
    _, model, tokenizer, prompts = shipped
    ids, mask = batch_of(tokenizer, prompts[::10])
    settings = {**sampled(8, temperature=1.2, top_p=0.9), "max_new_tokens": 64,
                "pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id}
    expected, got, same_rng = both(model, ids, mask, seed=7, **settings)
    assert torch.equal(got, expected) and same_rng


def test_the_max_new_tokens_cap_matches_generate(shipped):
    _, model, tokenizer, prompts = shipped
    ids, mask = batch_of(tokenizer, prompts[:40])
    for settings in ({**GREEDY, "max_new_tokens": 6}, {**sampled(3, temperature=1.5), "max_new_tokens": 9}):
        settings.update(pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
        expected, got, _ = both(model, ids, mask, seed=3, **settings)
        assert expected.shape[1] == ids.shape[1] + settings["max_new_tokens"]  # some row ran to the cap
        assert torch.equal(got, expected)


# --------------------------------------------------------------------------- random Qwen3s


def random_decoder(architecture, heads, kv_heads, head_dim, *, hidden=64, layers=2, ffn=128, seed=0, tied=True, **extra):
    """A random ``Qwen3`` or ``Llama`` (``architecture``) over the tiny policy's character tokenizer (large init:
    varied greedy continuations); ``extra``: more config fields."""
    import transformers

    tokenizer = tiny_model.build_tokenizer()
    torch.manual_seed(seed)
    config = getattr(transformers, f"{architecture}Config")(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=ffn, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim, max_position_embeddings=256,
        tie_word_embeddings=tied, initializer_range=0.3, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id, attn_implementation="sdpa", **extra,
    )
    return getattr(transformers, f"{architecture}ForCausalLM")(config).eval(), tokenizer


def random_qwen3(heads, kv_heads, head_dim, **options):
    """A random Qwen3 (:func:`random_decoder`)."""
    return random_decoder("Qwen3", heads, kv_heads, head_dim, **options)


def ragged_eos(model, ids, mask, pad):
    """Three token ids that end greedy continuations at different steps (a random model never writes </s>)."""
    with torch.inference_mode():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=24, pad_token_id=pad, eos_token_id=None, **GREEDY)
    counts = torch.bincount(out[:, ids.shape[1] + 2 :].reshape(-1))
    return counts.argsort(descending=True)[:3].tolist()


SHAPES = [(4, 2, 16), (8, 2, 8), (4, 4, 32), (4, 1, 32), (6, 3, 24)]  # (heads, kv heads, head dim): GQA, MHA, MQA


@pytest.fixture
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield 1
    torch.set_num_threads(before)


@pytest.fixture(params=[1, 2], ids=lambda t: f"{t}-thread")
def threads(request):
    """Both thread counts: on two, attention's last bits depend on the thread computing a row."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


def assert_greedy_and_sampled_match_generate(model, tokenizer):
    """Greedy (rows stopping at many steps) and sampled (two seeds) tokens and draws equal generate's."""
    ids, mask = batch_of(tokenizer, PROMPTS)
    pad = tokenizer.pad_token_id
    eos = ragged_eos(model, ids, mask, pad)
    greedy = {**GREEDY, "max_new_tokens": 40, "pad_token_id": pad, "eos_token_id": eos}
    expected, got, _ = both(model, ids, mask, **greedy)
    assert torch.equal(got, expected)
    assert len(set(stop_lengths(expected, ids.shape[1], pad, set(eos)))) > 3
    for seed in (0, 1):
        settings = {**sampled(4, temperature=1.0), "max_new_tokens": 40, "pad_token_id": pad, "eos_token_id": eos}
        expected, got, same_rng = both(model, ids[::3], mask[::3], seed=seed, **settings)
        assert torch.equal(got, expected) and same_rng


#: the first shape in the default tier, the others in the long tier
@pytest.mark.parametrize("shape", [SHAPES[0], *(pytest.param(s, marks=pytest.mark.long) for s in SHAPES[1:])],
                         ids=lambda s: "h{}-kv{}-d{}".format(*s))
def test_random_qwen3_greedy_and_sampled_match_generate(shape, one_thread):
    assert_greedy_and_sampled_match_generate(*random_qwen3(*shape))


def random_llama(heads, kv_heads, head_dim, *, attention_bias=False, mlp_bias=False, **options):
    """A random Llama (:func:`random_decoder`: as :func:`random_qwen3` but no q/k norm; biases optional)."""
    return random_decoder("Llama", heads, kv_heads, head_dim, attention_bias=attention_bias, mlp_bias=mlp_bias,
                          rope_parameters={"rope_type": "default", "rope_theta": 100000.0}, **options)


# (heads, kv heads, head dim, attention bias, mlp bias, tied embeddings); SmolLM2-135M's ratio 9 / 3 among them
LLAMA_SHAPES = [(4, 2, 16, False, False, True), (9, 3, 8, False, False, True), (4, 4, 16, True, True, False),
                (4, 1, 32, False, False, True)]


@pytest.mark.parametrize("shape", [LLAMA_SHAPES[1], *(pytest.param(s, marks=pytest.mark.long) for i, s in enumerate(LLAMA_SHAPES) if i != 1)], ids=lambda s: "h{}-kv{}-d{}{}{}{}".format(
    *s[:3], "-attn-bias" if s[3] else "", "-mlp-bias" if s[4] else "", "" if s[5] else "-untied"))
def test_random_llama_greedy_and_sampled_match_generate(shape, one_thread):
    heads, kv_heads, head_dim, attention_bias, mlp_bias, tied = shape
    model, tokenizer = random_llama(heads, kv_heads, head_dim, hidden=heads * head_dim, attention_bias=attention_bias,
                                    mlp_bias=mlp_bias, tied=tied)
    assert fast_sampler.unsupported_reason(model) is None
    assert_greedy_and_sampled_match_generate(model, tokenizer)


def test_unsupported_llamas_and_other_classes_are_named():
    from transformers import LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM

    model, _ = random_llama(4, 2, 16)
    assert fast_sampler.unsupported_reason(model) is None
    scaled = LlamaForCausalLM(LlamaConfig(**{**model.config.to_dict(), "rope_parameters": {
        "rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}})).eval()
    assert "rope type" in fast_sampler.unsupported_reason(scaled)
    assert "training" in fast_sampler.unsupported_reason(random_llama(4, 2, 16)[0].train())
    mistral = MistralForCausalLM(MistralConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                               num_attention_heads=4, num_key_value_heads=2, attn_implementation="sdpa"))
    assert "not one of" in fast_sampler.unsupported_reason(mistral.eval())


def logits_rows(model, ids, mask, settings):
    """Each step's logits rows (lm_head outputs) of generate, then of the fast sampler, same seed."""
    calls: list = []
    hook = model.lm_head.register_forward_hook(lambda module, args, output: calls.append(output[:, -1, :].clone()))
    try:
        torch.manual_seed(0)
        with torch.inference_mode():
            model.generate(input_ids=ids, attention_mask=mask, **settings)
        reference, calls[:] = list(calls), []
        torch.manual_seed(0)
        fast_sampler.fast_generate(model, ids, mask, **settings)
    finally:
        hook.remove()
    return reference, calls


def assert_rows_bit_for_bit(reference, calls):
    """Every row the fast sampler computed (still generating or not) is a row generate computed at that step:
    on two threads too, where attention's last bits depend on the thread a row is computed on."""
    assert len(calls) == len(reference)
    assert calls[-1].shape[0] < reference[-1].shape[0]  # finished rows were dropped
    for mine, theirs in zip(calls, reference):
        known = {row.numpy().tobytes() for row in theirs}
        assert all(row.numpy().tobytes() in known for row in mine)


def test_every_logits_row_is_generates_bit_for_bit_on_a_random_qwen3(threads):
    """Stronger than tokens."""
    model, tokenizer = random_qwen3(4, 2, 16)
    ids, mask = batch_of(tokenizer, PROMPTS)
    pad = tokenizer.pad_token_id
    settings = {**sampled(2, temperature=1.0), "max_new_tokens": 30, "pad_token_id": pad,
                "eos_token_id": ragged_eos(model, ids, mask, pad)}
    assert_rows_bit_for_bit(*logits_rows(model, ids, mask, settings))


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
def test_every_logits_row_is_generates_bit_for_bit_on_the_shipped_base(shipped, threads):
    _, model, tokenizer, prompts = shipped
    ids, mask = batch_of(tokenizer, prompts[:64])
    settings = {**sampled(4), "max_new_tokens": 64, "pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id}
    assert_rows_bit_for_bit(*logits_rows(model, ids, mask, settings))


def test_one_thread_shrinks_to_its_own_floor_bit_for_bit(shipped, one_thread):
    """On any thread count a batch shrinks to 32 rows (a one-thread floor of 8 held on one CPU, not on
    another): the tail of a 64-row rollout (8 prompts × 8) then computes 32 rows, each still generate's row
    bit for bit."""
    assert fast_sampler.fewest_rows(1) == fast_sampler.fewest_rows(2) == fast_sampler.fewest_rows(4) == 32
    _, model, tokenizer, prompts = shipped
    ids, mask = batch_of(tokenizer, prompts[:8])
    settings = {**sampled(8), "max_new_tokens": 64, "pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id}
    reference, calls = logits_rows(model, ids, mask, settings)
    assert min(call.shape[0] for call in calls) == fast_sampler.fewest_rows(1)
    assert_rows_bit_for_bit(reference, calls)


def test_an_odd_batch_on_two_threads_keeps_generates_layout():
    """59 rows × 4 heads on two threads: a row's heads fall to both threads, so no row is dropped."""
    model, tokenizer = random_qwen3(4, 2, 16)
    ids, mask = batch_of(tokenizer, PROMPTS[:59])
    pad = tokenizer.pad_token_id
    settings = {**GREEDY, "max_new_tokens": 30, "pad_token_id": pad, "eos_token_id": ragged_eos(model, ids, mask, pad)}
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        reference, calls = logits_rows(model, ids, mask, settings)
    finally:
        torch.set_num_threads(before)
    assert [c.shape for c in calls] == [r.shape for r in reference]
    assert all(torch.equal(c, r) for c, r in zip(calls, reference))


def test_every_logits_row_is_generates_bit_for_bit_on_a_random_llama(threads):
    model, tokenizer = random_llama(6, 2, 16, hidden=96)
    ids, mask = batch_of(tokenizer, PROMPTS)
    pad = tokenizer.pad_token_id
    settings = {**sampled(2, temperature=1.0), "max_new_tokens": 30, "pad_token_id": pad,
                "eos_token_id": ragged_eos(model, ids, mask, pad)}
    assert_rows_bit_for_bit(*logits_rows(model, ids, mask, settings))


def test_a_shrunk_batch_keeps_each_row_on_its_thread():
    home = fast_sampler._threads_of_rows(120, 2)
    assert home.tolist() == [0] * 60 + [1] * 60
    assert fast_sampler._threads_of_rows(59, 2) is None and fast_sampler._threads_of_rows(7, 1).tolist() == [0] * 7
    live = torch.zeros(120, dtype=torch.bool)
    live[[3, 5, 70, 71, 72, 119]] = True
    keep = fast_sampler._shrunk(live, home, 2, 32)
    assert keep.numel() == 32
    assert {3, 5} <= set(keep[:16].tolist()) and {70, 71, 72, 119} <= set(keep[16:].tolist())
    assert all(home[row] == 0 for row in keep[:16]) and all(home[row] == 1 for row in keep[16:])  # fillers too
    assert fast_sampler._shrunk(torch.ones(40, dtype=torch.bool), home[:40], 2, 32) is None


def test_strings_without_padding_and_one_token_prompts_match_generate(one_thread):
    model, tokenizer = random_qwen3(4, 2, 16, seed=1)
    pad = tokenizer.pad_token_id
    for prompts in (["abcd"] * 40, ["a", "b", "c"] * 12):  # no padding (the maskless sdpa path); length 1
        ids, mask = batch_of(tokenizer, prompts)
        assert bool(mask.all())
        for settings in ({**GREEDY, "max_new_tokens": 12}, {**sampled(3, temperature=1.0), "max_new_tokens": 12}):
            expected, got, _ = both(model, ids, mask, seed=5, pad_token_id=pad, eos_token_id=[5, 9], **settings)
            assert torch.equal(got, expected)


# --------------------------------------------------------------------------- self-check and fallback


@pytest.fixture
def fresh_paths(monkeypatch, tmp_path):
    """No float path checked yet in this process (the self-check's decisions hold per float path), nor
    recorded in the cache (passed checks are recorded for later processes: a cache of this test's own)."""
    monkeypatch.setattr(fast_sampler, "_paths", {})
    real = fast_sampler.verdict_file
    monkeypatch.setattr(fast_sampler, "verdict_file", lambda path: tmp_path / "verdicts" / real(path).name)


def perturbed_layers(monkeypatch):
    """Make the fast sampler differ: every decoding step's hidden states are nudged."""
    layers = fast_sampler._layers

    def nudged(model, h, *args, **kwargs):
        out = layers(model, h, *args, **kwargs)
        return out + 0.5 if h.shape[1] == 1 else out

    monkeypatch.setattr(fast_sampler, "_layers", nudged)


def test_a_differing_sampler_falls_back_to_generate_with_one_warning(shipped, monkeypatch, fresh_paths):
    policy, _, tokenizer, prompts = shipped
    model, _ = type(policy)(policy.options).load()  # a model of its own: decisions are per model
    ids, mask = batch_of(tokenizer, prompts[:64])
    settings = {**sampled(4), "max_new_tokens": 64, "pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id}
    perturbed_layers(monkeypatch)
    torch.manual_seed(0)
    with torch.inference_mode():
        expected = model.generate(input_ids=ids, attention_mask=mask, **settings)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            torch.manual_seed(0)
            assert torch.equal(fast_sampler.generate(model, ids, mask, **settings), expected)
    assert [w.category for w in caught] == [fast_sampler.FastSamplerFallback]
    assert "generate instead" in str(caught[0].message)
    with pytest.raises(fast_sampler.Unsupported, match="generate"):
        fresh, _ = type(policy)(policy.options).load()
        fast_sampler.generate(fresh, ids, mask, mode=True, **settings)


def test_a_passing_self_check_uses_the_fast_sampler_and_keeps_the_random_state(shipped, monkeypatch, fresh_paths):
    policy, _, tokenizer, prompts = shipped
    model, _ = type(policy)(policy.options).load()
    ids, mask = batch_of(tokenizer, prompts[:32])
    settings = {**sampled(4), "max_new_tokens": 64, "pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id}
    used = []
    real = fast_sampler.fast_generate
    monkeypatch.setattr(fast_sampler, "fast_generate", lambda *a, **k: used.append(1) or real(*a, **k))
    torch.manual_seed(0)
    with torch.inference_mode():
        expected = model.generate(input_ids=ids, attention_mask=mask, **settings)
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = fast_sampler.generate(model, ids, mask, **settings)  # the self-check runs first, seeds of its own
    assert torch.equal(got, expected)
    assert len(used) == 3  # the two checks, then the call
    assert fast_sampler._decisions[model] is True


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
def test_a_decision_holds_for_every_model_on_its_float_path(shipped, monkeypatch, fresh_paths):
    """Checked once per architecture, dtype and thread count: a second checkpoint of the same architecture
    (other weights) samples fast without a check; another thread count or architecture is checked anew;
    a failed check sends the path's next models to generate, with a warning each."""
    policy, _, tokenizer, prompts = shipped
    ids, mask = batch_of(tokenizer, prompts[:32])
    settings = {**GREEDY, "max_new_tokens": 32, "pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id}
    checks = []
    real_check = fast_sampler.self_check
    monkeypatch.setattr(fast_sampler, "self_check", lambda *a, **k: checks.append(1) or real_check(*a, **k))
    first, _ = type(policy)(policy.options).load()
    second, _ = type(policy)(policy.options).load()
    with torch.no_grad():
        for p in second.parameters():
            p.add_(torch.randn_like(p) * 0.01)  # a trained checkpoint: other weights, same architecture
    path = fast_sampler.float_path(first)
    assert fast_sampler.float_path(second) == path
    second.config.use_cache = False  # as TRL leaves a trained checkpoint: generate still caches (its generation config)
    assert fast_sampler.float_path(second) == path
    for model in (first, second):
        with torch.inference_mode():
            expected = model.generate(input_ids=ids, attention_mask=mask, **settings)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert torch.equal(fast_sampler.generate(model, ids, mask, **settings), expected)
        assert fast_sampler._decisions[model] is True
    assert len(checks) == 1
    third, _ = type(policy)(policy.options).load()  # (loading sets the policy's thread count)
    threads = torch.get_num_threads()
    torch.set_num_threads(2 if threads == 1 else 1)
    try:
        assert fast_sampler.float_path(third) != path
        fast_sampler.generate(third, ids, mask, **settings)
        assert len(checks) == 2
    finally:
        torch.set_num_threads(threads)
    other, other_tokenizer = random_qwen3(4, 2, 16)
    assert fast_sampler.float_path(other) != path
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast_sampler.generate(other, *batch_of(other_tokenizer, PROMPTS[:8]), **{
            **settings, "pad_token_id": other_tokenizer.pad_token_id, "eos_token_id": other_tokenizer.eos_token_id})
    assert len(checks) == 3
    # a path whose check failed: the next model on it goes to generate, with its warning, unchecked
    fast_sampler._paths[path] = False
    fourth, _ = type(policy)(policy.options).load()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.inference_mode():
            expected = fourth.generate(input_ids=ids, attention_mask=mask, **settings)
        assert torch.equal(fast_sampler.generate(fourth, ids, mask, **settings), expected)
    assert [w.category for w in caught] == [fast_sampler.FastSamplerFallback] and len(checks) == 3
    with pytest.raises(fast_sampler.Unsupported, match="float path"):
        fast_sampler.generate(type(policy)(policy.options).load()[0], ids, mask, mode=True, **settings)


def test_a_passed_check_is_recorded_for_later_processes_and_a_failed_one_is_not(shipped, monkeypatch, fresh_paths):
    """A later process (here: the in-process decisions forgotten) finds the recorded pass and samples fast
    unchecked; another version of this module's code (its sha256 is in the key) checks again; a check that
    failed leaves no record, so the next process checks again."""
    policy, _, tokenizer, prompts = shipped
    ids, mask = batch_of(tokenizer, prompts[:32])
    settings = {**GREEDY, "max_new_tokens": 32, "pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id}
    checks = []
    real_check = fast_sampler.self_check
    monkeypatch.setattr(fast_sampler, "self_check", lambda *a, **k: checks.append(1) or real_check(*a, **k))
    model, _ = type(policy)(policy.options).load()
    path = fast_sampler.float_path(model)
    with torch.inference_mode():
        expected = model.generate(input_ids=ids, attention_mask=mask, **settings)
    assert torch.equal(fast_sampler.generate(model, ids, mask, **settings), expected) and len(checks) == 1
    record = json.loads(fast_sampler.verdict_file(path).read_text())
    assert record["passed"] is True and record["float_path"] == [str(x) for x in path]
    assert record["fast_sampler_sha256"] == hashlib.sha256(Path(fast_sampler.__file__).read_bytes()).hexdigest()
    used = []
    real_fast = fast_sampler.fast_generate
    monkeypatch.setattr(fast_sampler, "fast_generate", lambda *a, **k: used.append(1) or real_fast(*a, **k))
    monkeypatch.setattr(fast_sampler, "_paths", {})  # a new process
    later, _ = type(policy)(policy.options).load()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(fast_sampler.generate(later, ids, mask, **settings), expected)
    assert len(checks) == 1 and used == [1] and fast_sampler._decisions[later] is True
    monkeypatch.setattr(fast_sampler, "_own_source_sha256", lambda: "0" * 64)  # an edited fast sampler
    monkeypatch.setattr(fast_sampler, "_paths", {})
    edited, _ = type(policy)(policy.options).load()
    fast_sampler.generate(edited, ids, mask, **settings)
    assert len(checks) == 2
    # a failing check records nothing
    monkeypatch.setattr(fast_sampler, "_own_source_sha256", lambda: "1" * 64)
    monkeypatch.setattr(fast_sampler, "_paths", {})
    perturbed_layers(monkeypatch)
    failing, _ = type(policy)(policy.options).load()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast_sampler.generate(failing, ids, mask, **settings)
    assert len(checks) == 3 and fast_sampler._paths[path] is False
    assert not fast_sampler.verdict_file(path).exists()


def test_unsupported_settings_use_generate_or_fail_when_forced(shipped):
    _, model, tokenizer, prompts = shipped
    ids, mask = batch_of(tokenizer, prompts[:8])
    settings = {**GREEDY, "max_new_tokens": 8, "pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id,
                "repetition_penalty": 1.3}
    with torch.inference_mode():
        expected = model.generate(input_ids=ids, attention_mask=mask, **settings)
    assert torch.equal(fast_sampler.generate(model, ids, mask, **settings), expected)
    with pytest.raises(fast_sampler.Unsupported):
        fast_sampler.generate(model, ids, mask, mode=True, **settings)
    assert fast_sampler.unsupported_reason(model) is None
    assert "dtype" in fast_sampler.unsupported_reason(random_qwen3(4, 2, 16)[0].to(torch.bfloat16))


# --------------------------------------------------------------------------- SmolLM2-135M-Instruct (a Llama)

SMOLLM2_QUESTIONS = ["What is 2+2?", "Name a colour.", "Write a haiku about the sea.", "Hi",
                     "Explain gravity in one sentence.", "List three fruits:", "Translate 'cat' to French.", "Count to five."]


@pytest.fixture(scope="module")
def smollm2(smollm2_folder):
    """SmolLM2-135M-Instruct as the transformers policy loads it (float32 on the CPU), and 8 chat prompts (a short
    system turn instead of the template's default one: shorter prompts, a shorter test)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_folder)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(smollm2_folder, dtype=torch.float32).eval()
    prompts = [tokenizer.apply_chat_template([{"role": "system", "content": "Be brief."}, {"role": "user", "content": q}],
                                             tokenize=False, add_generation_prompt=True) for q in SMOLLM2_QUESTIONS]
    return model, tokenizer, prompts


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
def test_smollm2_samples_generates_tokens_after_its_self_check(smollm2, one_thread, fresh_paths):
    """The real Llama: the self-check (greedy and 4 × 8 sampled, 16 new tokens) passes, and calls give generate's tokens."""
    model, tokenizer, prompts = smollm2
    assert type(model).__name__ == "LlamaForCausalLM" and fast_sampler.unsupported_reason(model) is None
    ids, mask = batch_of(tokenizer, prompts[:4])
    assert len(set(mask.sum(-1).tolist())) > 2  # ragged
    common = {"max_new_tokens": 16, "pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id}
    for settings in ({**GREEDY, **common}, {**sampled(2), **common}):
        torch.manual_seed(3)
        with torch.inference_mode():
            expected = model.generate(input_ids=ids, attention_mask=mask, **settings)
        torch.manual_seed(3)
        got = fast_sampler.generate(model, ids, mask, mode=True, **settings)  # the first call runs the self-check
        assert torch.equal(got, expected)
    assert fast_sampler._decisions[model] is True
    assert any(tokenizer.eos_token_id in row for row in expected[:, ids.shape[1]:].tolist())  # some row stopped


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
def test_every_logits_row_is_generates_bit_for_bit_on_smollm2(smollm2, one_thread):
    """8 prompts × 8 samples, rows stopping early (three frequent tokens as eos): the batch shrinks to the
    32-row floor and every row computed is generate's, bit for bit."""
    model, tokenizer, prompts = smollm2
    ids, mask = batch_of(tokenizer, prompts)
    settings = {**sampled(8, temperature=1.0), "max_new_tokens": 16, "pad_token_id": tokenizer.pad_token_id,
                "eos_token_id": [tokenizer.encode(t)[0] for t in (".", ",", " the")] + [tokenizer.eos_token_id]}
    reference, calls = logits_rows(model, ids, mask, settings)
    assert min(call.shape[0] for call in calls) == fast_sampler.fewest_rows(1)
    assert_rows_bit_for_bit(reference, calls)


# --------------------------------------------------------------------------- the policy


@pytest.mark.parametrize("temperature,n", [(0.0, 1), (0.7, 4)])
def test_the_policy_samples_the_same_texts_with_and_without_it(shipped, temperature, n):
    policy, _, _, prompts = shipped
    texts = {}
    for mode in (False, "auto", True):
        p = type(policy)(policy.options.model_copy(update={"fast_sampler": mode, "temperature": temperature, "batch_size": 48}))
        texts[mode] = p.sample(prompts[:96], n=n)
    assert texts[False] == texts["auto"] == texts[True]
    assert texts[False][0] and all(len(t) == n for t in texts[False])


def test_the_option_parses_from_yaml_values(registry):
    for value, parsed in (("auto", "auto"), (True, True), ("false", False)):
        policy = registry.create("policy", "transformers", {"path": "x", "fast_sampler": value}, where="policy.transformers")
        assert policy.options.fast_sampler == parsed
