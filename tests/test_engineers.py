"""Engineers end to end: the real openai and google-genai clients against a scripted local
server with faults, the checkpoint engineer through transformers on a tiny model, and each
baseline on crafted evidence. Every case ends in a valid config or a recorded fallback."""

import dataclasses
import json
import sys
from pathlib import Path

import pytest
import yaml

from envengineer.design.step import design
from envengineer.design.prompts import build_request
from envengineer.errors import ConfigError
from envengineer.design.evidence import load_evidence

pytest.importorskip("openai")
pytest.importorskip("google.genai")

KEY = "sk-test-SECRET-9f8e7d6c5b4a"

GOOD = "The 9x9 maps fail on conflicts, so more of them with waits.\n\n```yaml\nsizes:\n  9x9: {ratio: 0.2, wait_ratio: 0.5}\n  3x3: {ratio: 0.05}\n```\n"
GOOD_SUMMARY = "I saw conflicts dominate on large maps. I moved budget to 9x9. Watch 10x10 next."


def fast(**extra):
    return {"max_retries": 2, "backoff_initial": 0.01, "backoff_max": 0.05, "timeout": 5.0, **extra}


@pytest.fixture
def request_(recorded_run, registry):
    evidence = load_evidence(recorded_run, 1, registry)
    return build_request(evidence, registry, {"preset": "V6"})


def _engineer(registry, kind, server, monkeypatch, **options):
    if kind == "openai":
        monkeypatch.setenv("OPENAI_API_KEY", KEY)
        return registry.create("engineer", "openai", {"model": "gpt-test", "base_url": server.url + "/v1", **fast(**options)})
    monkeypatch.setenv("GEMINI_API_KEY", KEY)
    return registry.create("engineer", "gemini", {"model": "gemini-test", "base_url": server.url, **fast(**options)})


def _no_key_written(out: Path):
    for path in out.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(encoding="utf-8"), path


def _calls(out: Path):
    return [json.loads(line) for line in (out / "calls.jsonl").read_text().splitlines()]


BOTH = pytest.mark.parametrize("kind", ["openai", "gemini"])


@BOTH
def test_valid_answer_becomes_the_next_config(kind, registry, request_, fake_llm, monkeypatch, tmp_path):
    fake_llm.script = [fake_llm.Step(GOOD), fake_llm.Step(GOOD_SUMMARY)]
    engineer = _engineer(registry, kind, fake_llm, monkeypatch)
    outcome = design(engineer, request_, out_dir=tmp_path)
    assert not outcome.fallback
    sizes = outcome.config.sizes
    assert sizes["9x9"].ratio == 0.2 and sizes["9x9"].wait_ratio == 0.5 and sizes["3x3"].ratio == 0.05
    assert abs(sum(k.ratio for k in sizes.values()) - 1) < 1e-9
    assert outcome.summary == GOOD_SUMMARY
    for name in ("prompt.md", "response.md", "proposal.yaml", "projection.yaml", "summary.md", "calls.jsonl"):
        assert (tmp_path / name).is_file(), name
    calls = _calls(tmp_path)
    assert calls[0]["usage"] == {"prompt_tokens": 11, "completion_tokens": 7} and calls[0]["error"] is None
    assert "latency_s" in calls[0] and calls[0]["model"].endswith("-test")
    # the key travels in a header, never into the run directory
    headers = {k.lower(): v for k, v in fake_llm.requests[0]["headers"].items()}
    assert KEY in (headers.get("authorization", "") + headers.get("x-goog-api-key", ""))
    _no_key_written(tmp_path)


@BOTH
def test_rate_limit_then_success(kind, registry, request_, fake_llm, monkeypatch, tmp_path):
    fake_llm.script = [fake_llm.Step(status=429), fake_llm.Step(GOOD), fake_llm.Step(GOOD_SUMMARY)]
    outcome = design(_engineer(registry, kind, fake_llm, monkeypatch), request_, out_dir=tmp_path)
    assert not outcome.fallback
    calls = _calls(tmp_path)
    assert calls[0]["error"] and "429" in calls[0]["error"] or "RateLimit" in calls[0]["error"]
    assert calls[1]["error"] is None and calls[1]["attempt"] == 2
    _no_key_written(tmp_path)


@BOTH
def test_a_rate_limit_waits_what_the_service_asks(kind, registry, request_, fake_llm, monkeypatch, tmp_path):
    """Retry-After is honoured (the SDKs' own retries are off: the engineer's loop must read it)."""
    fake_llm.script = [fake_llm.Step(status=429, retry_after="0.4"), fake_llm.Step(GOOD), fake_llm.Step(GOOD_SUMMARY)]
    outcome = design(_engineer(registry, kind, fake_llm, monkeypatch), request_, out_dir=tmp_path)
    assert not outcome.fallback
    calls = _calls(tmp_path)
    assert calls[0]["retry_after_s"] == 0.4 and calls[0]["wait_s"] == 0.4  # not the 0.01 s backoff
    assert calls[1]["error"] is None and "wait_s" not in calls[1]


@BOTH
def test_a_retry_after_beyond_the_limit_uses_the_backoff(kind, registry, request_, fake_llm, monkeypatch, tmp_path):
    fake_llm.script = [fake_llm.Step(status=429, retry_after="3600"), fake_llm.Step(GOOD), fake_llm.Step(GOOD_SUMMARY)]
    outcome = design(_engineer(registry, kind, fake_llm, monkeypatch, retry_after_max=5.0), request_, out_dir=tmp_path)
    assert not outcome.fallback
    first = _calls(tmp_path)[0]
    assert first["retry_after_s"] == 3600 and 0 < first["wait_s"] <= 0.05  # backoff_max of the test options


def test_backoff_has_jitter_and_stays_under_its_cap():
    from envengineer.api import EngineerCallError
    from envengineer.plugins.engineers.llm import call_with_retries

    def failing():
        raise TimeoutError("slow")

    waits = []
    for _ in range(3):
        with pytest.raises(EngineerCallError) as info:
            call_with_retries(failing, model="m", retryable=lambda e: True, max_retries=3, backoff_initial=0.01, backoff_max=0.04)
        calls = info.value.calls
        assert len(calls) == 4 and "gave up after 4 call(s)" in str(info.value)
        waits.append(tuple(call["wait_s"] for call in calls[:-1]))
        assert all(0.01 <= w <= 0.04 for w in waits[-1]) and "wait_s" not in calls[-1]
    assert len(set(waits)) > 1  # random jitter: three runs do not wait alike


@pytest.mark.parametrize("headers, seconds", [
    ({"retry-after": "7"}, 7.0), ({"retry-after-ms": "250"}, 0.25), ({"retry-after": "soon"}, None), ({}, None),
    ({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}, 0.0),  # a date in the past: no wait
])
def test_retry_after_is_read_from_the_response(headers, seconds):
    from types import SimpleNamespace

    from envengineer.plugins.engineers.llm import retry_after_seconds

    exc = Exception()
    exc.response = SimpleNamespace(headers=headers)
    assert retry_after_seconds(exc) == seconds
    assert retry_after_seconds(ValueError()) is None


@BOTH
def test_server_errors_until_give_up_fall_back(kind, registry, request_, fake_llm, monkeypatch, tmp_path):
    fake_llm.script = [fake_llm.Step(status=500)]
    outcome = design(_engineer(registry, kind, fake_llm, monkeypatch), request_, out_dir=tmp_path)
    assert outcome.fallback and "engineer call failed" in outcome.reason
    assert outcome.config == request_.current_config
    assert len(fake_llm.requests) == 3  # 1 + max_retries, no summary call after a transport failure
    assert len(_calls(tmp_path)) == 3
    projection = yaml.safe_load((tmp_path / "projection.yaml").read_text())
    assert projection["fallback"] is True and projection["reason"] == outcome.reason
    assert outcome.summary and "fallback" in outcome.summary
    _no_key_written(tmp_path)


@BOTH
def test_slow_response_times_out_and_falls_back(kind, registry, request_, fake_llm, monkeypatch, tmp_path):
    fake_llm.script = [fake_llm.Step(GOOD, delay=1.5)]
    engineer = _engineer(registry, kind, fake_llm, monkeypatch, timeout=0.3, max_retries=1)
    outcome = design(engineer, request_, out_dir=tmp_path)
    assert outcome.fallback and "engineer call failed" in outcome.reason
    assert all(call["error"] for call in _calls(tmp_path))


@BOTH
def test_malformed_yaml_is_reasked_then_accepted(kind, registry, request_, fake_llm, monkeypatch, tmp_path):
    bad = "Here:\n```yaml\nsizes: {9x9: {ratio: [0.2\n```\n"
    fake_llm.script = [fake_llm.Step(bad), fake_llm.Step(GOOD), fake_llm.Step(GOOD_SUMMARY)]
    outcome = design(_engineer(registry, kind, fake_llm, monkeypatch), request_, out_dir=tmp_path)
    assert not outcome.fallback and outcome.config.sizes["9x9"].ratio == 0.2
    second = json.dumps(fake_llm.requests[1]["body"])
    assert "could not be used" in second and "does not parse" in second  # the re-ask quotes the problem
    response = (tmp_path / "response.md").read_text()
    assert "attempt 1" in response and "attempt 2" in response


@BOTH
def test_aliases_are_refused_and_end_in_fallback(kind, registry, request_, fake_llm, monkeypatch, tmp_path):
    bomb = "```yaml\na: &a [x, x, x]\nb: &b [*a, *a, *a]\nsizes: {9x9: {ratio: *b}}\n```"
    fake_llm.script = [fake_llm.Step(bomb), fake_llm.Step(bomb), fake_llm.Step(GOOD_SUMMARY)]
    outcome = design(_engineer(registry, kind, fake_llm, monkeypatch), request_, out_dir=tmp_path)
    assert outcome.fallback and ("anchors" in outcome.reason or "aliases" in outcome.reason)
    assert outcome.config == request_.current_config
    assert yaml.safe_load((tmp_path / "projection.yaml").read_text())["fallback"] is True


@BOTH
def test_out_of_range_and_unknown_values_are_projected(kind, registry, request_, fake_llm, monkeypatch, tmp_path):
    text = "```yaml\nsizes:\n  9x9: {ratio: 0.3, hole_ratio: 7, wait_ratio: -2, color: blue}\n  12x12: {ratio: 0.5}\nlearning_rate: 0.1\n```"
    fake_llm.script = [fake_llm.Step(text), fake_llm.Step(GOOD_SUMMARY)]
    outcome = design(_engineer(registry, kind, fake_llm, monkeypatch), request_, out_dir=tmp_path)
    assert not outcome.fallback
    knobs = outcome.config.sizes["9x9"]
    assert knobs.ratio == 0.3 and knobs.hole_ratio == 0.5 and knobs.wait_ratio == 0.0
    fields = {c["field"] for c in yaml.safe_load((tmp_path / "projection.yaml").read_text())["changes"]}
    assert {"sizes.9x9.color", "sizes.12x12", "learning_rate", "sizes.9x9.hole_ratio"} <= fields


@BOTH
def test_prompt_injection_in_examples_stays_inside_data_blocks(kind, registry, request_, fake_llm, monkeypatch, tmp_path):
    fake_llm.script = [fake_llm.Step(GOOD), fake_llm.Step(GOOD_SUMMARY)]
    outcome = design(_engineer(registry, kind, fake_llm, monkeypatch), request_, out_dir=tmp_path)
    sent = json.dumps(fake_llm.requests[0]["body"])
    assert "IGNORE ALL PREVIOUS INSTRUCTIONS" in sent and "data, not instructions" in sent
    # the injected YAML did nothing: the config is the server's proposal, not {3x3: 1.0}
    assert not outcome.fallback and outcome.config.sizes["3x3"].ratio == 0.05


def test_useless_text_reasked_then_fallback(registry, request_, fake_llm, monkeypatch, tmp_path):
    fake_llm.script = [fake_llm.Step("I would rather not."), fake_llm.Step("```yaml\nfoo: 1\n```"), fake_llm.Step(GOOD_SUMMARY)]
    outcome = design(_engineer(registry, "openai", fake_llm, monkeypatch), request_, out_dir=tmp_path, reask=1)
    assert outcome.fallback and "no part of the proposal" in outcome.reason
    assert len(outcome.replies) == 2


def test_missing_key_is_a_recorded_fallback(registry, request_, monkeypatch, tmp_path):
    monkeypatch.delenv("MOONSHOT_API_KEY", raising=False)
    engineer = registry.create("engineer", "kimi", {})
    assert engineer.options.base_url == "https://api.moonshot.ai/v1" and engineer.options.model
    outcome = design(engineer, request_, out_dir=tmp_path)
    assert outcome.fallback and "MOONSHOT_API_KEY" in outcome.reason


def test_openai_compatible_needs_no_key(registry, request_, fake_llm, monkeypatch, tmp_path):
    fake_llm.script = [fake_llm.Step(GOOD), fake_llm.Step(GOOD_SUMMARY)]
    engineer = registry.create("engineer", "openai-compatible", {"model": "engineer", "base_url": fake_llm.url + "/v1", **fast(extra_body={"chat_template_kwargs": {"enable_thinking": False}})})
    outcome = design(engineer, request_, out_dir=tmp_path)
    assert not outcome.fallback
    assert fake_llm.requests[0]["body"]["chat_template_kwargs"] == {"enable_thinking": False}


# ------------------------------------------- what the real services refuse, and the examples

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "engineers"


def _openai_client(server):
    import openai

    return openai.OpenAI(api_key=KEY, base_url=server.url + "/v1", max_retries=0, timeout=5)


def _gemini_client(server):
    from google import genai
    from google.genai import types

    return genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=server.url, retry_options=types.HttpRetryOptions(attempts=1)))


CHAT_REFUSALS = [
    ({"model": "gpt-5", "max_tokens": 100}, "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead."),
    ({"model": "o3-mini", "max_completion_tokens": 100, "temperature": 0.7}, "Unsupported value: 'temperature' does not support 0.7 with this model. Only the default (1) value is supported."),
    ({"model": "kimi-k2.5", "max_tokens": 100, "temperature": 0.7}, "invalid temperature: only 1 is allowed for this model"),
    ({"model": "kimi-k2.5", "max_tokens": 100, "temperature": 1.0, "extra_body": {"thinking": {"type": "disabled"}}}, "invalid temperature: only 0.6 is allowed for this model"),
]


@pytest.mark.parametrize("kwargs,message", CHAT_REFUSALS, ids=lambda v: v.get("model") if isinstance(v, dict) else None)
def test_loopback_server_refuses_what_chat_services_refuse(kwargs, message, fake_llm):
    import openai

    with pytest.raises(openai.BadRequestError) as info:
        _openai_client(fake_llm).chat.completions.create(messages=[{"role": "user", "content": "hi"}], **kwargs)
    assert info.value.status_code == 400 and info.value.body["message"] == message


@pytest.mark.parametrize("kwargs", [
    {"model": "gpt-5", "max_completion_tokens": 1000},
    {"model": "o3-mini", "max_completion_tokens": 1000, "temperature": 1},
    {"model": "kimi-k2.5", "max_tokens": 1000},
    {"model": "kimi-k2.5", "max_tokens": 1000, "temperature": 0.6, "extra_body": {"thinking": {"type": "disabled"}}},
    {"model": "gpt-4.1", "max_tokens": 1000, "temperature": 0.7},
])
def test_loopback_server_accepts_what_chat_services_accept(kwargs, fake_llm):
    fake_llm.script = [fake_llm.Step(GOOD)]
    reply = _openai_client(fake_llm).chat.completions.create(messages=[{"role": "user", "content": "hi"}], **kwargs)
    assert reply.choices[0].message.content == GOOD


@pytest.mark.parametrize("model,budget,refused", [
    ("gemini-2.5-pro", 0, "Budget 0 is invalid. This model only works in thinking mode."),
    ("gemini-2.5-pro", 64, "The thinking budget 64 is invalid."),
    ("gemini-2.5-flash", 30000, "The thinking budget 30000 is invalid."),
    ("gemini-2.5-flash-lite", 100, "The thinking budget 100 is invalid."),
    ("gemini-2.5-pro", -1, None),
    ("gemini-2.5-pro", 128, None),
    ("gemini-2.5-flash", 0, None),
    ("gemini-2.5-flash-lite", 0, None),
])
def test_loopback_server_applies_gemini_thinking_budget_rules(model, budget, refused, fake_llm):
    from google.genai import errors, types

    fake_llm.script = [fake_llm.Step(GOOD)]
    config = types.GenerateContentConfig(max_output_tokens=4096, thinking_config=types.ThinkingConfig(thinking_budget=budget))
    client = _gemini_client(fake_llm)  # held: a collected Client closes its connection pool
    call = lambda: client.models.generate_content(model=model, contents="hi", config=config)  # noqa: E731
    if refused:
        with pytest.raises(errors.ClientError) as info:
            call()
        assert info.value.code == 400 and refused in info.value.message
    else:
        assert call().text == GOOD


def test_loopback_server_lets_gemini_thinking_eat_the_answer(fake_llm):
    from google.genai import types

    fake_llm.script = [fake_llm.Step(GOOD, thoughts=5000)]
    client = _gemini_client(fake_llm)
    reply = client.models.generate_content(
        model="gemini-2.5-pro", contents="hi", config=types.GenerateContentConfig(max_output_tokens=4096))
    candidate = reply.candidates[0]
    assert candidate.finish_reason == types.FinishReason.MAX_TOKENS and not candidate.content.parts
    assert reply.usage_metadata.thoughts_token_count == 4096


def _example_engineer(registry, path, server, monkeypatch):
    """An examples/engineers file loaded as `envengineer propose --engineer-config` loads it, aimed at the loopback server."""
    from envengineer.loop.replay import engineer_section

    name, options = engineer_section({}, None, path)
    options["base_url"] = server.url if name == "gemini" else server.url + "/v1"
    if options.get("api_key_env", "unset") is not None:
        key_env = options.get("api_key_env") or {"openai": "OPENAI_API_KEY", "kimi": "MOONSHOT_API_KEY", "gemini": "GEMINI_API_KEY"}[name]
        monkeypatch.setenv(key_env, KEY)
    return registry.create("engineer", name, {**options, **fast()}, where=f"engineer.{name}")


@pytest.mark.parametrize("stem", ["openai", "kimi", "gemini", "openai-compatible"])
def test_shipped_api_examples_get_a_proposal_applied(stem, registry, request_, fake_llm, monkeypatch, tmp_path):
    fake_llm.script = [fake_llm.Step(GOOD), fake_llm.Step(GOOD_SUMMARY)]
    engineer = _example_engineer(registry, EXAMPLES / f"{stem}.yaml", fake_llm, monkeypatch)
    outcome = design(engineer, request_, out_dir=tmp_path)
    assert not outcome.fallback, outcome.reason
    assert outcome.config.sizes["9x9"].ratio == 0.2 and outcome.summary == GOOD_SUMMARY
    assert len(fake_llm.requests) == 2  # the proposal, then the summary: nothing refused, nothing re-asked
    calls = _calls(tmp_path)
    assert all(call["error"] is None and call["params"] for call in calls)
    _no_key_written(tmp_path)


def test_old_gpt5_example_no_longer_falls_back(registry, request_, fake_llm, monkeypatch, tmp_path):
    """The settings that used to make every gpt-5 design step a fallback (temperature 0.7, max_tokens 4096)."""
    fake_llm.script = [fake_llm.Step(GOOD), fake_llm.Step(GOOD_SUMMARY)]
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    options = {"model": "gpt-5", "temperature": 0.7, "max_tokens": 4096, "base_url": fake_llm.url + "/v1", **fast()}
    outcome = design(registry.create("engineer", "openai", options), request_, out_dir=tmp_path)
    assert not outcome.fallback, outcome.reason
    body = fake_llm.requests[0]["body"]
    assert body["max_completion_tokens"] == 4096 and "max_tokens" not in body and "temperature" not in body
    assert _calls(tmp_path)[0]["params"] == {"max_completion_tokens": 4096}


@pytest.mark.parametrize("name,options,refusal", [
    ("openai", {"model": "gpt-5", "send_temperature": True}, "Unsupported value: 'temperature' does not support 0.7"),
    ("openai", {"model": "gpt-5", "max_tokens_field": "max_tokens"}, "Unsupported parameter: 'max_tokens'"),
    ("kimi", {"model": "kimi-k2.5", "send_temperature": True}, "invalid temperature: only 1 is allowed"),
    ("kimi", {"model": "kimi-k2.5", "send_temperature": True, "temperature": 1.0, "thinking": False}, "invalid temperature: only 0.6 is allowed"),
])
def test_forcing_a_refused_parameter_is_a_recorded_fallback(name, options, refusal, registry, request_, fake_llm, monkeypatch, tmp_path):
    fake_llm.script = [fake_llm.Step(GOOD)]
    monkeypatch.setenv("OPENAI_API_KEY" if name == "openai" else "MOONSHOT_API_KEY", KEY)
    engineer = registry.create("engineer", name, {**options, "base_url": fake_llm.url + "/v1", **fast()})
    outcome = design(engineer, request_, out_dir=tmp_path)
    assert outcome.fallback and refusal in outcome.reason and "non-retryable" in outcome.reason
    assert len(fake_llm.requests) == 1  # a 400 is not retried


def test_kimi_thinking_switch_and_its_temperature(registry, request_, fake_llm, monkeypatch):
    fake_llm.script = [fake_llm.Step(GOOD), fake_llm.Step(GOOD_SUMMARY)]
    monkeypatch.setenv("MOONSHOT_API_KEY", KEY)
    options = {"thinking": False, "send_temperature": True, "temperature": 0.6, "base_url": fake_llm.url + "/v1", **fast()}
    outcome = design(registry.create("engineer", "kimi", options), request_)
    assert not outcome.fallback, outcome.reason
    body = fake_llm.requests[0]["body"]
    assert body["thinking"] == {"type": "disabled"} and body["temperature"] == 0.6 and body["max_tokens"] == 16384


@pytest.mark.parametrize("kind", ["openai", "gemini"])
def test_thinking_that_eats_the_answer_is_a_fallback_with_its_reason(kind, registry, request_, fake_llm, monkeypatch, tmp_path):
    fake_llm.script = [fake_llm.Step(GOOD, thoughts=3000)]
    model = "gpt-5" if kind == "openai" else "gemini-2.5-pro"
    outcome = design(_engineer(registry, kind, fake_llm, monkeypatch, model=model, max_tokens=1024), request_, out_dir=tmp_path)
    finish = "length" if kind == "openai" else "MAX_TOKENS"
    assert outcome.fallback and f"finish reason {finish}" in outcome.reason and "1024 of them thinking" in outcome.reason
    assert "raise max_tokens" in outcome.reason
    assert len(fake_llm.requests) == 1  # not retried: the same limit would give the same empty answer
    call = _calls(tmp_path)[0]
    assert call["usage"]["reasoning_tokens"] == 1024 and "EmptyAnswer" in call["error"]


def test_gemini_thinking_budget_leaves_room_for_the_answer(registry, request_, fake_llm, monkeypatch, tmp_path):
    fake_llm.script = [fake_llm.Step(GOOD, thoughts=3000), fake_llm.Step(GOOD_SUMMARY, thoughts=3000)]
    engineer = _engineer(registry, "gemini", fake_llm, monkeypatch, model="gemini-2.5-pro", max_tokens=1024, thinking_budget=256)
    outcome = design(engineer, request_, out_dir=tmp_path)
    assert not outcome.fallback, outcome.reason
    field_of = sys.modules[type(fake_llm).__module__].field_of  # the loopback server's own reading of the wire format
    generation = field_of(fake_llm.requests[0]["body"], "generationConfig")
    assert field_of(field_of(generation, "thinkingConfig"), "thinkingBudget") == 256 and field_of(generation, "maxOutputTokens") == 1024
    usage = _calls(tmp_path)[0]["usage"]
    assert usage["reasoning_tokens"] == 256 and usage["completion_tokens"] > 256


@pytest.mark.parametrize("model,budget,message", [
    ("gemini-2.5-pro", 0, "gemini-2.5-pro cannot turn thinking off"),
    ("gemini-2.5-pro", 50000, "128..32768"),
    ("gemini-2.5-flash-lite", 100, "512..24576"),
    ("gemini-2.5-flash", -5, "-1 (dynamic)"),
])
def test_gemini_thinking_budget_is_checked_when_the_config_loads(model, budget, message, registry):
    with pytest.raises(ConfigError, match=r"engineer\.gemini\.thinking_budget") as info:
        registry.create("engineer", "gemini", {"model": model, "thinking_budget": budget}, where="engineer.gemini")
    assert message in str(info.value)
    assert registry.create("engineer", "gemini", {"model": "gemini-2.5-flash", "thinking_budget": 0}).options.thinking_budget == 0


def test_options_are_validated(registry):
    with pytest.raises(ConfigError, match="engineer.openai.modle"):
        registry.create("engineer", "openai", {"modle": "x"})
    with pytest.raises(ConfigError, match="base_url"):
        registry.create("engineer", "openai-compatible", {"model": "x"})


# ------------------------------------------------------------- checkpoint on CPU


@pytest.mark.parametrize("name", ["checkpoint", "base"])
def test_checkpoint_engineer_on_cpu_falls_back_cleanly(name, registry, recorded_run, tmp_path, tiny_models):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    model = tiny_models.char_model(tmp_path / "tiny", hidden_size=64, layers=2, head_dim=16, max_positions=4096)
    evidence = load_evidence(recorded_run, 1, registry)
    request = build_request(evidence, registry, {"preset": "V6"}, policy_path=str(model), base_policy_path=str(model))
    engineer = registry.create("engineer", name, {"backend": "transformers", "max_new_tokens": 16})
    outcome = design(engineer, request, out_dir=tmp_path / "out")
    assert outcome.fallback and outcome.config == request.current_config
    assert len(outcome.replies) == 2  # one re-ask, then the fallback
    calls = _calls(tmp_path / "out")
    assert calls[0]["backend"] == "transformers" and calls[0]["usage"]["completion_tokens"] <= 16


def test_checkpoint_without_a_path_is_a_fallback(registry, request_):
    outcome = design(registry.create("engineer", "checkpoint", {}), request_)
    assert outcome.fallback and "policy_path" in outcome.reason


# --------------------------------------------------------------------- baselines


def _evidence_request(registry, recorded_run, make_report, rates, round=1, conflict_share=0.5):
    evidence = load_evidence(recorded_run, round, registry)
    evidence.report = make_report(rates, conflict_share=conflict_share)
    return build_request(evidence, registry, {"modules": ["F"]})


SIZES = ("3x3", "4x4", "5x5", "6x6", "7x7", "8x8", "9x9", "10x10")


def test_fixed_never_changes(registry, request_):
    outcome = design(registry.create("engineer", "fixed"), request_)
    assert not outcome.fallback and outcome.config == request_.current_config


def test_random_is_valid_and_seeded(registry, request_):
    a = design(registry.create("engineer", "random", {"seed": 3}), request_).config
    b = design(registry.create("engineer", "random", {"seed": 3}), request_).config
    c = design(registry.create("engineer", "random", {"seed": 4}), request_).config
    assert a == b and a != c
    assert abs(sum(k.ratio for k in a.sizes.values()) - 1) < 1e-9


def test_random_follows_the_runs_seed_by_default(registry, request_):
    """Seeds of a suite must give different random baselines, each repeatable."""
    engineer = registry.create("engineer", "random")
    draws = [design(engineer, dataclasses.replace(request_, seed=seed)).config for seed in (0, 0, 1_000_003)]
    assert draws[0] == draws[1] and draws[0] != draws[2]


def test_curriculum_gets_harder_with_the_round(registry, recorded_run):
    engineer = registry.create("engineer", "curriculum")
    configs = []
    for r in (0, 1):
        evidence = load_evidence(recorded_run, r, registry)
        configs.append(design(engineer, build_request(evidence, registry, {"modules": ["F"]})).config)
    early, late = configs
    assert late.sizes["10x10"].ratio > early.sizes["10x10"].ratio
    assert late.sizes["3x3"].ratio < early.sizes["3x3"].ratio
    assert late.sizes["7x7"].hole_ratio > early.sizes["7x7"].hole_ratio
    assert late.sizes["7x7"].wait_ratio > early.sizes["7x7"].wait_ratio


def test_heuristic_moves_budget_toward_the_size_that_fails_most(registry, recorded_run, report_factory):
    rates = dict(zip(SIZES, (0.9, 0.9, 0.9, 0.9, 0.2, 0.9, 0.9, 0.9)))
    request = _evidence_request(registry, recorded_run, report_factory, rates, conflict_share=0.0)
    outcome = design(registry.create("engineer", "heuristic"), request)
    before, after = request.current_config.sizes, outcome.config.sizes
    assert after["7x7"].ratio > before["7x7"].ratio
    assert max(after, key=lambda s: after[s].ratio - before[s].ratio) == "7x7"


def test_heuristic_raises_waits_where_conflicts_dominate_and_backs_off_collapse(registry, recorded_run, report_factory):
    rates = dict(zip(SIZES, (0.9, 0.9, 0.9, 0.6, 0.6, 0.5, 0.4, 0.0)))
    request = _evidence_request(registry, recorded_run, report_factory, rates, conflict_share=0.8)
    after = design(registry.create("engineer", "heuristic"), request).config.sizes
    before = request.current_config.sizes
    assert after["9x9"].wait_ratio > before["9x9"].wait_ratio
    assert after["10x10"].hole_ratio < before["10x10"].hole_ratio and after["10x10"].wait_ratio < before["10x10"].wait_ratio


def test_learnability_favours_success_near_half(registry, recorded_run, report_factory):
    rates = dict(zip(SIZES, (1.0, 0.98, 0.9, 0.75, 0.5, 0.25, 0.05, 0.0)))
    request = _evidence_request(registry, recorded_run, report_factory, rates)
    after = design(registry.create("engineer", "learnability"), request).config.sizes
    assert max(after, key=lambda s: after[s].ratio) == "7x7"
    assert after["3x3"].ratio < after["6x6"].ratio and after["10x10"].ratio < after["8x8"].ratio


@pytest.mark.parametrize("path", sorted((Path(__file__).resolve().parents[1] / "examples" / "engineers").glob("*.yaml")), ids=lambda p: p.stem)
def test_example_engineer_sections_validate(path, registry):
    section = dict(yaml.safe_load(path.read_text())["engineer"])
    registry.create("engineer", section.pop("name"), section)


@pytest.mark.parametrize("name, module, extra", [
    ("openai", "openai", "openai"), ("kimi", "openai", "openai"), ("openai-compatible", "openai", "openai"),
    ("gemini", "google.genai", "gemini"),
])
def test_an_api_engineer_without_its_sdk_is_an_error_when_made(name, module, extra, registry, monkeypatch):
    """Not a fallback at every design step of the run: the run stops before its first round, saying what to install."""
    from envengineer.plugins.engineers import llm

    real = llm._find_spec
    monkeypatch.setattr(llm, "_find_spec", lambda m: None if m == module else real(m))
    with pytest.raises(ConfigError) as info:
        registry.create("engineer", name, {"base_url": "http://127.0.0.1:9/v1", "model": "m"} if name == "openai-compatible" else {})
    assert f"needs the {module} package" in str(info.value) and f'pip install "envengineer[{extra}]"' in str(info.value)
    monkeypatch.setattr(llm, "_find_spec", real)
    registry.create("engineer", name, {"base_url": "http://127.0.0.1:9/v1", "model": "m"} if name == "openai-compatible" else {})


def test_find_spec_is_none_where_the_parent_package_is_missing():
    from envengineer.plugins.engineers.llm import _find_spec

    assert _find_spec("no_such_parent_package_xyz.genai") is None
    assert _find_spec("json") is not None


def test_chat_usage_keeps_the_prompt_tokens_a_service_reused():
    """OpenAI's usage object (the SDK's own type) names cached prompt tokens; the call record keeps them."""
    from openai.types import CompletionUsage

    from envengineer.plugins.engineers.llm import chat_usage

    usage = CompletionUsage.model_validate({"prompt_tokens": 3000, "completion_tokens": 40, "total_tokens": 3040,
                                            "prompt_tokens_details": {"cached_tokens": 2048}})
    assert chat_usage(usage) == {"prompt_tokens": 3000, "completion_tokens": 40, "cached_tokens": 2048}
    plain = CompletionUsage(prompt_tokens=11, completion_tokens=7, total_tokens=18)
    assert chat_usage(plain) == {"prompt_tokens": 11, "completion_tokens": 7}
