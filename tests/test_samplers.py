"""Policy samplers: transformers (on a tiny random model) and an OpenAI-compatible endpoint."""

import pytest

from envengineer.errors import ConfigError


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from envengineer.plugins.policies import tiny_model

    tokenizer = tiny_model.build_tokenizer()
    model = tiny_model.build_model(tokenizer, hidden_size=32, layers=1, ffn=64, seed=1)
    path = tmp_path_factory.mktemp("random-qwen3")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


PROMPTS = ["N3 H S1 0_0 G1 2_2 S2 2_0 G2 0_2 P", "N4 H 1_1 S1 0_0 G1 3_3 S2 3_0 G2 0_3 P", "N5 H S1 0_0 G1 0_1 S2 1_0 G2 1_1 P"]


def test_greedy_is_deterministic_and_returns_n_per_prompt(registry, model_dir):
    policy = registry.create("policy", "transformers", {"path": str(model_dir), "max_new_tokens": 8, "batch_size": 2, "device": "cpu"})
    first = policy.sample(PROMPTS, n=3)
    assert len(first) == 3 and all(len(texts) == 3 and len(set(texts)) == 1 for texts in first)
    assert all(isinstance(t, str) and t for texts in first for t in texts)
    again = policy.with_path(model_dir).sample(PROMPTS, n=3)
    assert again == first
    # batching does not change greedy results
    single = registry.create("policy", "transformers", {"path": str(model_dir), "max_new_tokens": 8, "batch_size": 1}).sample(PROMPTS)
    assert [t[0] for t in single] == [t[0] for t in first]


def test_sampling_is_seeded(registry, model_dir):
    opts = {"path": str(model_dir), "max_new_tokens": 8, "temperature": 1.0, "seed": 5}
    a = registry.create("policy", "transformers", opts).sample(PROMPTS, n=4)
    b = registry.create("policy", "transformers", opts).sample(PROMPTS, n=4)
    assert a == b and all(len(t) == 4 for t in a)


def test_chat_prompts_use_the_chat_template(registry, model_dir):
    policy = registry.create("policy", "transformers", {"path": str(model_dir), "max_new_tokens": 4})
    out = policy.sample([[{"role": "user", "content": PROMPTS[0]}]], n=1)
    assert out == policy.sample([PROMPTS[0]], n=1)  # the tiny template is the bare content


def test_transformers_policy_needs_a_path(registry):
    policy = registry.create("policy", "transformers", {})
    with pytest.raises(ConfigError, match="policy.transformers.path"):
        policy.prepare()
    assert registry.create("policy", "transformers", {"path": "/x"}).prepare().as_posix() == "/x"


# ------------------------------------------------------------------ openai-compatible

ANSWER = "<answer>\nAgent 1: (0,0) -> (0,1)\nAgent 2: (1,1) -> (1,0)\n</answer>"


def test_openai_compatible_policy_against_a_local_server(registry, fake_llm, monkeypatch):
    pytest.importorskip("openai")
    monkeypatch.setenv("TEST_POLICY_KEY", "sk-test")
    fake_llm.script = [fake_llm.Step(ANSWER)]
    policy = registry.create("policy", "openai-compatible", {
        "model": "solver-test", "base_url": fake_llm.url + "/v1", "api_key_env": "TEST_POLICY_KEY",
        "concurrency": 2, "max_tokens": 64, "temperature": 0.0,
    })
    out = policy.sample([[{"role": "user", "content": "Plan paths ..."}], "plain prompt"], n=2)
    assert out == [[ANSWER, ANSWER], [ANSWER, ANSWER]]
    assert len(fake_llm.requests) == 4
    body = fake_llm.requests[0]["body"]
    assert body["model"] == "solver-test" and body["max_tokens"] == 64 and body["messages"][0]["role"] == "user"
    headers = {k.lower(): v for k, v in fake_llm.requests[0]["headers"].items()}
    assert headers["authorization"] == "Bearer sk-test"
    assert policy.usage["calls"] == 4 and not policy.errors


def test_openai_compatible_retries_then_scores_failures_as_empty(registry, fake_llm):
    pytest.importorskip("openai")
    fake_llm.script = [fake_llm.Step(status=500), fake_llm.Step(ANSWER), fake_llm.Step(status=500)]
    policy = registry.create("policy", "openai-compatible", {
        "model": "m", "base_url": fake_llm.url + "/v1", "api_key_env": None, "concurrency": 1, "max_retries": 1, "timeout": 5,
    })
    first = policy.sample(["p"], n=1)
    assert first == [[ANSWER]]  # one 500, retried by the SDK
    second = policy.sample(["p"], n=1)
    assert second == [[""]] and len(policy.errors) == 1  # still failing after the retry: empty, recorded


@pytest.mark.parametrize("model,base_url,expected", [
    ("gpt-5", "loopback", {"max_completion_tokens": 1024}),  # a reasoning model: no max_tokens, no temperature
    ("o4-mini", "loopback", {"max_completion_tokens": 1024}),
    ("kimi-k2.5", "loopback", {"max_tokens": 1024}),  # Moonshot fixes the temperature
    ("gpt-4.1", "loopback", {"max_tokens": 1024, "temperature": 0.0}),  # any other server: as configured
    ("gpt-4.1", None, {"max_completion_tokens": 1024, "temperature": 0.0}),  # OpenAI's own endpoint
])
def test_openai_compatible_policy_sends_what_the_model_accepts(model, base_url, expected, registry, fake_llm):
    pytest.importorskip("openai")
    options = {"model": model, "base_url": fake_llm.url + "/v1" if base_url else None, "api_key_env": None, "max_tokens": 1024}
    policy = registry.create("policy", "openai-compatible", options)
    assert policy.request_params() == expected and not policy.has_weights
    if base_url is None:
        return  # nothing to call without a key for api.openai.com
    fake_llm.script = [fake_llm.Step(ANSWER)]
    assert policy.sample(["p"]) == [[ANSWER]] and not policy.failed_calls()  # the loopback server refused nothing
    body = fake_llm.requests[0]["body"]
    assert {k: body[k] for k in expected} == expected
    assert not {"max_tokens", "max_completion_tokens", "temperature"} - set(expected) & set(body)


def test_openai_compatible_records_refusals_and_empty_answers(registry, fake_llm):
    pytest.importorskip("openai")
    fake_llm.script = [fake_llm.Step(ANSWER, thoughts=500), fake_llm.Step(ANSWER)]
    policy = registry.create("policy", "openai-compatible", {
        "model": "gpt-5", "base_url": fake_llm.url + "/v1", "api_key_env": None, "concurrency": 1, "max_tokens": 256,
    })
    assert policy.sample(["p", "q"]) == [[""], [ANSWER]]
    (error,) = policy.failed_calls()
    assert "finish reason length" in error and "raise max_tokens" in error
    forced = registry.create("policy", "openai-compatible", {
        "model": "gpt-5", "base_url": fake_llm.url + "/v1", "api_key_env": None, "send_temperature": True, "max_retries": 0,
    })
    assert forced.sample(["p"]) == [[""]]
    assert "Unsupported value: 'temperature' does not support 0 with this model" in forced.failed_calls()[0]
    with pytest.raises(ConfigError, match="no weights"):
        forced.prepare()


def test_policies_are_registered(registry):
    assert {"transformers", "tiny", "openai-compatible"} <= set(registry.names("policy"))
