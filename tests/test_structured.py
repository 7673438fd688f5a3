"""Structured replies: the config schema built from a task's declarations, the reply turned into the
free-text form, the loopback server refusing and checking what OpenAI and Gemini refuse and guarantee,
the API engineers end to end, the vLLM child's structured outputs (through tests/fake_vllm) and one
real design step by SmolLM2-135M-Instruct through transformers with the block forced by xgrammar."""

import json
import os
import sys
import time
from pathlib import Path

import pytest
import yaml
from envengineer.design.contract import DesignRequest, EngineerReply
from envengineer.design.step import design
from envengineer.design.structured import (
    BOUNDED_NUMBER_FRACTION_DIGITS,
    StructuredReply,
    block_token_limit,
    changes_schema,
    config_schema,
    reply_schema,
    reply_text,
)
from envengineer.errors import ConfigError

KEY = "sk-test-SECRET-structured-1234"


def _fast(**extra):
    return {"max_retries": 0, "backoff_initial": 0.01, "backoff_max": 0.05, "timeout": 5.0, **extra}


@pytest.fixture
def gridwalk(registry):
    return registry.create("generator", "grid-walk", {}, where="task")


@pytest.fixture
def mapf(registry):
    return registry.create("generator", "mapf-frozenlake", {}, where="task")


def _request(generator, prompt="Propose the next config."):
    return DesignRequest(evidence=None, context="", prompt=prompt, current_config=generator.default_config(), generator=generator)


def _objects(node, path=()):
    if isinstance(node, dict):
        if node.get("type") == "object":
            yield path, node
        for key, value in node.items():
            yield from _objects(value, (*path, key))


def _server_module(fake_llm):
    return sys.modules[type(fake_llm).__module__]


# ------------------------------------------------------------------- the schema


def test_config_schema_is_the_declared_knobs_of_every_group(gridwalk):
    schema = config_schema(gridwalk, gridwalk.default_config())
    table = schema["properties"][gridwalk.knob_table]
    assert list(schema["properties"]) == [gridwalk.knob_table]
    assert list(table["properties"]) == list(gridwalk.default_config().model_dump()[gridwalk.knob_table])
    group = next(iter(table["properties"].values()))
    for knob in gridwalk.knobs:
        field = group["properties"][knob.name]
        assert field["type"] == ("integer" if knob.integer else "number")
        assert field["minimum"] == knob.low and field["maximum"] == knob.high and field["description"]
    for path, node in _objects(schema):  # OpenAI strict: closed objects, every property required
        assert node["additionalProperties"] is False and node["required"] == list(node["properties"]), path


def test_config_schema_follows_the_task_instance(registry):
    three = registry.create("generator", "mapf-frozenlake", {"agents": 2, "agents_range": [2, 4]}, where="task")
    group = next(iter(config_schema(three)["properties"]["sizes"]["properties"].values()))
    assert group["properties"]["agents"] == {"type": "integer", "minimum": 2, "maximum": 4, "description": group["properties"]["agents"]["description"]}
    assert set(group["properties"]) == {k.name for k in three.knobs}


@pytest.mark.parametrize("options", [{"datasets": ["chain_sum"]}, {}])
def test_config_schema_holds_each_groups_own_knobs(registry, options):
    """reasoning-gym's levels are extra fields of a dataset's row (its JSON schema lists only ratio): each
    dataset's schema still holds its declared knobs, the ones its row holds (a real structured SmolLM2 reply
    could set only ratio before)."""
    generator, _ = registry.task("reasoning-gym", options)
    current = generator.default_config()
    schema = config_schema(generator, current)
    groups = schema["properties"]["datasets"]["properties"]
    held = generator.knob_values(current)
    assert list(groups) == list(held) and all(list(groups[g]["properties"]) == list(held[g]) for g in groups)
    assert any(len(v) > 1 for v in held.values())  # ratio and at least one level
    for path, node in _objects(schema):
        assert node["additionalProperties"] is False and node["required"] == list(node["properties"]), path
    # a block setting a level is applied
    g = next(iter(groups))
    level = next(k for k in groups[g]["properties"] if k != "ratio")
    block = {"datasets": {name: {k: (1 if k == level and name == g else v) for k, v in held[name].items()} for name in held}}
    projection = generator.project(block, current)
    assert projection.config.model_dump()["datasets"][g][level] == 1


def test_reply_schema_passes_openais_strict_rules(mapf, fake_llm):
    schema = reply_schema(mapf)
    assert schema["required"] == ["analysis", "config"] and schema["properties"]["analysis"]["type"] == "string"
    assert _server_module(fake_llm)._strict_problem(schema, (), 1, [0]) is None


def test_a_task_without_knobs_is_an_error_naming_it():
    class NoKnobs:
        name, knobs, knob_table = "bare", (), None

        class config_model:
            @staticmethod
            def model_json_schema():
                return {"type": "object", "properties": {}}

    with pytest.raises(ValueError, match="task 'bare' declares no knobs"):
        config_schema(NoKnobs())


# ------------------------------------------------------------ reply -> proposal


def test_a_json_reply_becomes_the_free_text_form():
    raw = json.dumps({"analysis": "k9 fails; a ```yaml fence``` in prose", "config": {"groups": {"k9": {"ratio": 0.3, "size": None}}}})
    text, problem = reply_text(raw)
    assert problem is None
    from envengineer.design.proposals import extract_yaml_block, parse_proposal

    assert parse_proposal(extract_yaml_block(text)) == {"groups": {"k9": {"ratio": 0.3}}}  # nulls mean "no value"
    assert text.startswith("k9 fails")


@pytest.mark.parametrize("raw,problem", [
    ('{"analysis": "cut off', "not valid JSON"),
    ("[1, 2]", 'a "config" object'),
    ('{"analysis": "x", "config": 3}', 'a "config" object'),
    ("", "empty"),
    ("[" * 100_000, "too long"),
])
def test_an_unusable_json_reply_says_why(raw, problem):
    assert problem in reply_text(raw)[1]


def test_the_problem_reaches_the_design_step_and_its_reask(gridwalk):
    class Engineer:
        calls, last_summary_calls = 0, []

        def propose(self, request):
            Engineer.calls += 1
            if Engineer.calls == 1:
                return StructuredReply(text='{"analysis": "cut', problem="the structured reply is not valid JSON (cut off by max_tokens?)")
            return EngineerReply(text='```yaml\n{"groups": {"k9": {"ratio": 0.4}}}\n```')

        def summarize(self, request, outcome):
            return None

    outcome = design(Engineer(), _request(gridwalk), summarize=False)
    assert not outcome.fallback and outcome.config.groups["k9"].ratio > gridwalk.default_config().groups["k9"].ratio
    assert len(outcome.replies) == 2


# ------------------------------------------------- the loopback server's rules


def _client(server):
    import openai

    return openai.OpenAI(api_key=KEY, base_url=server.url + "/v1", max_retries=0, timeout=5)


def _format(schema, strict=True, name="cfg"):
    return {"type": "json_schema", "json_schema": {"name": name, "schema": schema, "strict": strict}}


OBJ = {"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"], "additionalProperties": False}


@pytest.mark.parametrize("response_format,message", [
    ({"type": "yaml"}, "Invalid value: 'yaml'. Supported values are: 'text', 'json_object', and 'json_schema'."),
    ({"type": "json_schema"}, "Missing required parameter: 'response_format.json_schema'."),
    (_format(OBJ, name="bad name!"), "Invalid 'response_format.json_schema.name': string does not match pattern."),
    (_format({**OBJ, "additionalProperties": True}), "In context=(), 'additionalProperties' is required to be supplied and to be false."),
    (_format({"type": "object", "properties": {"a": {"type": "number"}}, "required": ["a"]}), "'additionalProperties' is required"),
    (_format({**OBJ, "properties": {"a": {"type": "number"}, "b": {"type": "string"}}}), "Missing 'b'."),
    (_format({**OBJ, "properties": {"a": {"type": "object", "properties": {"x": {"type": "string"}}, "required": ["x"]}}}),
     "In context=('properties', 'a'), 'additionalProperties' is required"),
    (_format({**OBJ, "allOf": [{"type": "object"}]}), "'allOf' is not permitted."),
    (_format({"type": "array", "items": {"type": "number"}}), "schema must be a JSON Schema of 'type: \"object\"'"),
])
def test_loopback_server_refuses_what_openai_refuses(response_format, message, fake_llm):
    import openai

    fake_llm.script = [fake_llm.Step('{"a": 1}')]
    with pytest.raises(openai.BadRequestError) as info:
        _client(fake_llm).chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": "hi"}], response_format=response_format)
    assert info.value.status_code == 400 and message in info.value.body["message"]
    assert info.value.body["type"] == "invalid_request_error"


@pytest.mark.parametrize("response_format", [
    _format(OBJ), _format({"type": "object", "properties": {"a": {"type": "number"}}}, strict=False), {"type": "json_object"}, {"type": "text"},
])
def test_loopback_server_accepts_what_openai_accepts(response_format, fake_llm):
    fake_llm.script = [fake_llm.Step('{"a": 1}')]
    reply = _client(fake_llm).chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": "hi"}], response_format=response_format)
    assert json.loads(reply.choices[0].message.content) == {"a": 1}


@pytest.mark.parametrize("text", ['{"a": "one"}', '{"a": 1, "b": 2}', "not json"])
def test_loopback_server_never_sends_a_reply_that_breaks_the_schema(text, fake_llm):
    import openai

    fake_llm.script = [fake_llm.Step(text)]
    with pytest.raises(openai.InternalServerError):
        _client(fake_llm).chat.completions.create(model="gpt-4.1", messages=[{"role": "user", "content": "hi"}], response_format=_format(OBJ))
    assert fake_llm.schema_errors


def test_loopback_server_applies_geminis_response_schema_rules(fake_llm):
    from google import genai
    from google.genai import errors, types

    fake_llm.script = [fake_llm.Step('{"a": 1}')]
    client = genai.Client(api_key=KEY, http_options=types.HttpOptions(base_url=fake_llm.url, retry_options=types.HttpRetryOptions(attempts=1)))
    with pytest.raises(errors.ClientError, match="response_mime_type"):
        client.models.generate_content(model="gemini-test", contents="hi", config=types.GenerateContentConfig(response_json_schema=OBJ))
    ok = types.GenerateContentConfig(response_json_schema=OBJ, response_mime_type="application/json")
    assert json.loads(client.models.generate_content(model="gemini-test", contents="hi", config=ok).text) == {"a": 1}
    fake_llm.script = [fake_llm.Step('{"a": "x"}')]
    with pytest.raises(errors.ServerError):
        client.models.generate_content(model="gemini-test", contents="hi", config=ok)


# ------------------------------------------------------------ API engineers


ANSWER = {"analysis": "Long walks fail: more of k9.", "config": {"groups": {
    f"k{k}": {"ratio": 0.3 if k == 9 else 0.1, "size": 5} for k in range(3, 11)}}}


@pytest.mark.parametrize("name", ["openai", "kimi", "openai-compatible", "gemini"])
def test_api_engineers_send_the_schema_and_apply_the_reply(name, registry, gridwalk, fake_llm, monkeypatch, tmp_path):
    fake_llm.script = [fake_llm.Step(json.dumps(ANSWER))]
    env = {"openai": "OPENAI_API_KEY", "kimi": "MOONSHOT_API_KEY", "gemini": "GEMINI_API_KEY"}.get(name)
    if env:
        monkeypatch.setenv(env, KEY)
    options = {"structured": True, "base_url": fake_llm.url if name == "gemini" else fake_llm.url + "/v1", **_fast()}
    if name == "openai-compatible":
        options["model"] = "served"
    if name == "gemini":
        options["model"] = "gemini-2.5-flash"
    engineer = registry.create("engineer", name, options, where=f"engineer.{name}")
    outcome = design(engineer, _request(gridwalk), out_dir=tmp_path, summarize=False)
    assert not outcome.fallback, outcome.reason
    assert not fake_llm.schema_errors
    groups = outcome.config.groups
    assert groups["k9"].ratio > groups["k3"].ratio and abs(sum(g.ratio for g in groups.values()) - 1) < 1e-9
    body = fake_llm.requests[0]["body"]
    if name == "gemini":
        server = _server_module(fake_llm)
        generation = server.field_of(body, "generationConfig")
        assert server.field_of(generation, "responseMimeType") == "application/json"
        assert server.field_of(generation, "responseJsonSchema") == reply_schema(gridwalk)
    else:
        spec = body["response_format"]["json_schema"]
        assert body["response_format"]["type"] == "json_schema" and spec["strict"] is True and spec["schema"] == reply_schema(gridwalk)
    assert "JSON object" in json.dumps(body)  # the instruction that replaces "end with a YAML block"
    assert "```yaml" in (tmp_path / "response.md").read_text()
    assert json.loads((tmp_path / "calls.jsonl").read_text().splitlines()[0])["params"]["structured"] == "json_schema"


def _interface_step(name, registry, generator, fake_llm, out, **options):
    """One structured design step of the API engineer ``name`` against the loopback server; the request and the
    outcome, checked applied and within the schema the server was asked under."""
    options = {"structured": True, **_fast(), **options,
               "model": {"openai": "gpt-4.1", "openai-compatible": "served", "gemini": "gemini-2.5-flash"}[name],
               "base_url": fake_llm.url if name == "gemini" else fake_llm.url + "/v1"}
    engineer = registry.create("engineer", name, options, where=f"engineer.{name}")
    request = _request(generator)
    outcome = design(engineer, request, out_dir=out, summarize=False)
    assert not outcome.fallback, outcome.reason
    assert not fake_llm.schema_errors
    return request, outcome


CHANGES = {"analysis": "Long walks fail: more of k9, and k3 is solved.",
           "changes": [{"group": "k9", "knob": "ratio", "value": 0.3}, {"group": "k3", "knob": "ratio", "value": 0.05}]}


@pytest.mark.parametrize("name", ["openai", "openai-compatible", "gemini"])
def test_the_changes_interface_sends_its_schema_and_applies_only_the_changes(name, registry, gridwalk, fake_llm, monkeypatch, tmp_path):
    """interface: changes: the server decodes under a list of (group, knob, value) (the loopback server checks the
    schema as OpenAI's strict mode and Gemini do, and the reply against it); what is not listed keeps its value."""
    fake_llm.script = [fake_llm.Step(json.dumps(CHANGES))]
    env = {"openai": "OPENAI_API_KEY", "gemini": "GEMINI_API_KEY"}.get(name)
    if env:
        monkeypatch.setenv(env, KEY)
    request, outcome = _interface_step(name, registry, gridwalk, fake_llm, tmp_path, interface="changes")
    before, after = request.current_config.groups, outcome.config.groups
    assert after["k9"].ratio > before["k9"].ratio and after["k3"].ratio < before["k3"].ratio
    assert all(after[g].size == before[g].size for g in before)  # untouched knobs keep their values
    body = json.dumps(fake_llm.requests[0]["body"])
    assert json.dumps(changes_schema(gridwalk, request.current_config))[:200] in body and "an empty list keeps" in body


def test_an_empty_changes_list_keeps_the_configuration(registry, gridwalk, fake_llm, monkeypatch, tmp_path):
    fake_llm.script = [fake_llm.Step(json.dumps({"analysis": "All is well.", "changes": []}))]
    engineer = registry.create("engineer", "openai-compatible", {"model": "served", "base_url": fake_llm.url + "/v1",
                                                                 "structured": True, "interface": "changes", **_fast()})
    request = _request(gridwalk)
    outcome = design(engineer, request, out_dir=tmp_path, summarize=False)
    assert not outcome.fallback, outcome.reason
    assert outcome.config == request.current_config


def test_changes_schema_lists_every_settable_knob_once_with_its_bounds(registry):
    generator, _ = registry.task("mapf-frozenlake", {"agents": 2})
    schema = changes_schema(generator)
    items = schema["properties"]["changes"]["items"]["anyOf"]
    config = config_schema(generator)["properties"]["sizes"]["properties"]
    pairs = [(i["properties"]["group"]["enum"][0], i["properties"]["knob"]["enum"][0]) for i in items]
    assert pairs == [(g, k) for g, node in config.items() for k in node["properties"]] and len(pairs) == 24
    assert all(i["properties"]["value"] == config[g]["properties"][k] for i, (g, k) in zip(items, pairs))
    assert schema["properties"]["changes"]["maxItems"] == 24 and schema["required"] == ["analysis", "changes"]
    untabled = registry.task("reasoning-gym", {"datasets": ["chain_sum"]})[0]
    if untabled.knob_table is None:
        assert all(set(i["properties"]) == {"knob", "value"} for i in changes_schema(untabled)["properties"]["changes"]["items"]["anyOf"])


@pytest.mark.parametrize("reply, problem", [
    ({"analysis": "", "changes": {"k9": 1}}, "must be a list"),
    ({"analysis": "", "changes": [{"knob": "ratio", "value": 0.2}]}, "change 1 must name its group"),
    ({"analysis": "", "changes": [{"group": "k9", "value": 0.2}]}, 'change 1 must be an object with "knob" and "value"'),
    ({"analysis": "", "changes": [{"group": "k9", "knob": "ratio", "value": 0.2}, {"group": "k9", "knob": "ratio", "value": 0.1}]},
     "changes k9.ratio twice"),
    ({"analysis": ""}, 'with a "config" object (or a "changes" list)'),
])
def test_a_changes_reply_that_cannot_be_read_says_why(reply, problem):
    text, why = reply_text(json.dumps(reply), table="groups")
    assert why is not None and problem in why and text == json.dumps(reply)


def test_interface_changes_needs_structured(registry):
    with pytest.raises(ConfigError, match="interface: changes is a structured reply shape; set structured: true"):
        registry.create("engineer", "openai-compatible", {"model": "served", "base_url": "http://127.0.0.1:1/v1",
                                                          "interface": "changes"}, where="engineer.openai-compatible")


@pytest.mark.parametrize("name", ["openai-compatible", "gemini"])
def test_the_decisions_interface_turns_words_into_knob_moves(name, registry, gridwalk, fake_llm, monkeypatch, tmp_path):
    """interface: decisions: per group harder/easier/keep and more/less/same, decoded under the schema, made into moves
    of the declared knobs (difficulty knobs decision_step of their range toward the hard or easy end; the share times
    or divided by decision_factor, then renormalised); groups left out keep their knobs."""
    reply = {"analysis": "k9 never succeeds; k3 is solved.",
             "decisions": [{"group": "k9", "difficulty": "easier", "budget": "more"},
                           {"group": "k3", "difficulty": "harder", "budget": "less"}]}
    fake_llm.script = [fake_llm.Step(json.dumps(reply))]
    if name == "gemini":
        monkeypatch.setenv("GEMINI_API_KEY", KEY)
    request, outcome = _interface_step(name, registry, gridwalk, fake_llm, tmp_path, interface="decisions", decision_step=0.25)
    before, after = request.current_config.groups, outcome.config.groups
    size = next(k for k in gridwalk.knobs if k.name == "size")
    assert size.harder == "up"
    assert after["k9"].size < before["k9"].size and after["k3"].size > before["k3"].size
    assert after["k9"].ratio > before["k9"].ratio and after["k3"].ratio < before["k3"].ratio
    assert all(after[g].size == before[g].size for g in before if g not in ("k3", "k9"))
    assert "Decisions: k9: easier, budget more; k3: harder, budget less" in (tmp_path / "response.md").read_text()


@pytest.mark.parametrize("name", ["openai-compatible", "gemini"])
def test_read_first_decisions_hold_every_group_with_its_reading_before_its_words(name, registry, gridwalk, fake_llm, monkeypatch,
                                                                                  tmp_path):
    """read_first: "decisions" is an object with every group in the config's order, each its success rate read off
    the evidence (success_pct, 0-100) before difficulty and budget; required, so keep/same is written, not left out.
    The server checks the reply against that schema (strict), the words move the knobs as the list form's do, and
    response.md records each reading beside its decision."""
    groups = [f"k{k}" for k in range(3, 11)]
    words = {"k3": ("harder", "less"), "k9": ("easier", "more")}
    reply = {"analysis": "k3 is solved, k9 never succeeds.",
             "decisions": {g: {"success_pct": {"k3": 98, "k9": 0}.get(g, 40), "difficulty": words.get(g, ("keep", "same"))[0],
                               "budget": words.get(g, ("keep", "same"))[1]} for g in groups}}
    fake_llm.script = [fake_llm.Step(json.dumps(reply))]
    if name == "gemini":
        monkeypatch.setenv("GEMINI_API_KEY", KEY)
    request, outcome = _interface_step(name, registry, gridwalk, fake_llm, tmp_path, interface="decisions", read_first=True,
                                       decision_step=0.25)
    body = fake_llm.requests[0]["body"]
    schema = (body["response_format"]["json_schema"]["schema"] if name == "openai-compatible"
              else body["generationConfig"]["responseJsonSchema"])
    decided = schema["properties"]["decisions"]
    assert list(decided["properties"]) == groups and decided["required"] == groups
    assert list(decided["properties"]["k5"]["properties"]) == ["success_pct", "difficulty", "budget"]
    assert decided["properties"]["k5"]["properties"]["success_pct"] == {
        "type": "integer", "minimum": 0, "maximum": 100, "description": "this group's success rate in percent, as the evidence shows it"}
    sent = json.dumps(body)
    assert "first its success rate in percent as the evidence above shows it" in sent
    before, after = request.current_config.groups, outcome.config.groups
    assert after["k9"].size < before["k9"].size and after["k3"].size > before["k3"].size
    assert after["k9"].ratio > before["k9"].ratio and after["k3"].ratio < before["k3"].ratio
    assert all(after[g].size == before[g].size for g in before if g not in ("k3", "k9"))
    assert "Decisions: k3 (read 98%): harder, budget less; k4 (read 40%): keep, budget same" in (tmp_path / "response.md").read_text()


def test_read_first_is_the_decisions_interfaces_option(registry, flat_arith):
    """read_first with another interface is refused by name; on a task without a knob table the reply is one object,
    its reading then its word."""
    from envengineer.design.structured import decided_config, decisions_schema

    with pytest.raises(ConfigError, match="read_first: the decisions interface's option"):
        registry.create("engineer", "openai-compatible", {"model": "served", "base_url": "http://127.0.0.1:1/v1", "structured": True,
                                                          "interface": "changes", "read_first": True})
    schema = decisions_schema(flat_arith, flat_arith.default_config(), read_first=True)
    assert list(schema["properties"]["decisions"]["properties"]) == ["success_pct", "difficulty"]
    config, problem, lines = decided_config({"success_pct": 95, "difficulty": "harder"}, flat_arith, flat_arith.config_model(terms=4))
    assert problem is None and config == {"terms": 5} and lines == ["harder (read 95%)"]


def test_decisions_schema_offers_the_words_the_task_can_act_on(registry, gridwalk):
    from envengineer.design.structured import decisions_schema

    schema = decisions_schema(gridwalk, gridwalk.default_config())
    item = schema["properties"]["decisions"]["items"]
    assert item["properties"]["group"]["enum"] == [f"k{k}" for k in range(3, 11)]
    assert item["properties"]["difficulty"]["enum"] == ["harder", "easier", "keep"]
    assert item["properties"]["budget"]["enum"] == ["more", "less", "same"]
    assert schema["properties"]["decisions"]["maxItems"] == 8 and item["additionalProperties"] is False


def test_decisions_on_a_task_without_groups_move_its_one_set_of_knobs(flat_arith):
    """A task without a knob table (arith with its difficulty knob at the top level): one decision, no group, no
    budget word (one group holds the whole budget)."""
    from envengineer.design.structured import decided_config, decisions_schema

    schema = decisions_schema(flat_arith, flat_arith.default_config())
    assert set(schema["properties"]["decisions"]["items"]["properties"]) == {"difficulty"}
    assert schema["properties"]["decisions"]["maxItems"] == 1
    config, problem, lines = decided_config([{"difficulty": "harder"}], flat_arith, flat_arith.config_model(terms=4), step=0.1)
    assert problem is None and config == {"terms": 5} and lines == ["harder"]
    assert decided_config([], flat_arith, flat_arith.config_model(terms=4)) == ({}, None, [])


def test_config_moves_reads_a_proposal_back_into_the_decisions_words(gridwalk, flat_arith):
    """config_moves is decided_config's inverse on what moved: the words decided come back per group, whatever
    interface wrote the config; every group harder with budgets untouched is the uniform move (a copied word)."""
    from envengineer.design.structured import config_moves, decided_config
    from envengineer.plugins.engineer_bench.statistics import uniform_move

    current = gridwalk.default_config()
    decided = [{"group": "k3", "difficulty": "harder", "budget": "less"}, {"group": "k9", "difficulty": "easier", "budget": "more"}]
    partial, problem, _ = decided_config(decided, gridwalk, current)
    moves = config_moves(gridwalk, current, gridwalk.project(partial, current).config)
    assert problem is None and moves["k3"] == {"difficulty": "harder", "budget": "less"}
    assert moves["k9"] == {"difficulty": "easier", "budget": "more"}
    # the other groups' shares moved with the renormalisation, their difficulty did not
    assert all(moves[g]["difficulty"] == "keep" for g in moves if g not in ("k3", "k9")) and uniform_move(moves) is None
    every, _, _ = decided_config([{"group": f"k{k}", "difficulty": "harder"} for k in range(3, 11)], gridwalk, current)
    moves = config_moves(gridwalk, current, gridwalk.project(every, current).config)
    assert uniform_move(moves) == "harder" and all(m == {"difficulty": "harder", "budget": "same"} for m in moves.values())
    assert uniform_move(config_moves(gridwalk, current, current)) is None  # a restatement moves nothing
    # a task without a knob table: one group, `all`, and no budget word
    assert config_moves(flat_arith, flat_arith.config_model(terms=4), flat_arith.config_model(terms=3)) == {"all": {"difficulty": "easier"}}


@pytest.mark.parametrize("decisions, problem", [
    ({"k9": "harder"}, "the decision of k9 must be an object"),
    ("harder", "must be a list"),
    ([{"group": "k99", "difficulty": "harder"}], "decision 1 names no group"),
    ([{"group": "k9", "difficulty": "harder"}, {"group": "k9", "budget": "more"}], "decides on k9 twice"),
    ([{"group": "k9", "difficulty": "much harder"}], "difficulty is one of"),
])
def test_decisions_that_cannot_be_read_say_why(decisions, problem, gridwalk):
    from envengineer.design.structured import decided_config

    config, why, _ = decided_config(decisions, gridwalk, gridwalk.default_config())
    assert config is None and problem in why


def test_analysis_chars_bounds_the_analysis_in_every_interface(registry, gridwalk, fake_llm, monkeypatch, tmp_path):
    """analysis_chars becomes the analysis string's maxLength, whatever the interface; unset, the string is unbounded."""
    from envengineer.design.structured import interface_schema

    for interface in ("config", "changes", "decisions"):
        bounded, _ = interface_schema(interface, gridwalk, gridwalk.default_config(), analysis_chars=300)
        assert bounded["properties"]["analysis"]["maxLength"] == 300
        assert "maxLength" not in interface_schema(interface, gridwalk, gridwalk.default_config())[0]["properties"]["analysis"]
    fake_llm.script = [fake_llm.Step(json.dumps(CHANGES))]
    engineer = registry.create("engineer", "openai-compatible", {"model": "served", "base_url": fake_llm.url + "/v1", "structured": True,
                                                                 "interface": "changes", "analysis_chars": 300, **_fast()})
    assert not design(engineer, _request(gridwalk), out_dir=tmp_path, summarize=False).fallback
    sent = fake_llm.requests[0]["body"]["response_format"]["json_schema"]["schema"]
    assert sent["properties"]["analysis"]["maxLength"] == 300 and not fake_llm.schema_errors


def test_structured_is_off_by_default(registry, gridwalk, fake_llm, monkeypatch):
    fake_llm.script = [fake_llm.Step("```yaml\ngroups: {k9: {ratio: 0.3}}\n```")]
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    engineer = registry.create("engineer", "openai", {"model": "gpt-4.1", "base_url": fake_llm.url + "/v1", **_fast()})
    assert not design(engineer, _request(gridwalk), summarize=False).fallback
    assert "response_format" not in fake_llm.requests[0]["body"]


# ------------------------------------------------ the forced block's token limit

TASKS = [("mapf-frozenlake", {"agents": 2}), ("grid-walk", {}), ("reasoning-gym", {"datasets": ["chain_sum"]})]


def _longest_instance(node):
    """A JSON text of ``node`` as long as the grammar allows: every number with the most fractional digits."""
    if node["type"] == "object":
        return "{" + ", ".join(f"{json.dumps(k)}: {_longest_instance(v)}" for k, v in node["properties"].items()) + "}"
    low, high = node["minimum"], node["maximum"]
    if node["type"] == "integer":
        return max(str(low), str(high), key=len)
    digits = "123456789"[:BOUNDED_NUMBER_FRACTION_DIGITS]
    value = f"{max(int(low), int(high) - 1)}.{digits}"
    assert low <= float(value) <= high  # our knobs' bounds: a value with every digit lies inside
    return value


def _matcher(schema):
    xgrammar = pytest.importorskip("xgrammar")
    compiled = xgrammar.GrammarCompiler(xgrammar.TokenizerInfo(["a"]), max_threads=1).compile_json_schema(
        json.dumps(schema), any_whitespace=False)  # as checkpoint._forced_block compiles it
    return xgrammar.GrammarMatcher(compiled, terminate_without_stop_token=True)


@pytest.mark.parametrize("task, options", TASKS)
def test_the_block_limit_fits_the_longest_block_the_grammar_allows(task, options, registry):
    """The forced block gets block_token_limit(schema) new tokens: the longest block xgrammar accepts under
    the task's schema is exactly that many bytes less the end-of-sequence token (a token is at least a byte),
    so no forced block is ever cut, with 8 groups x 3 knobs (mapf) as with one dataset (reasoning-gym)."""
    generator, _ = registry.task(task, options)
    schema = config_schema(generator, generator.default_config())
    longest = _longest_instance(schema)
    matcher = _matcher(schema)
    assert matcher.accept_string(longest) and matcher.is_terminated()
    assert not matcher.accept_string("0")  # nothing can follow it
    assert len(longest.encode()) + 1 == block_token_limit(schema)
    assert yaml.safe_load(longest) == json.loads(longest)  # the block as the design step parses it


def test_xgrammar_bounds_the_fraction_digits_the_limit_counts():
    """The limit counts BOUNDED_NUMBER_FRACTION_DIGITS fractional digits and no exponent for a bounded number:
    xgrammar refuses one digit more (if a new xgrammar allowed more, this fails before a block is cut)."""
    number = {"type": "number", "minimum": 0.02, "maximum": 1.0}
    assert _matcher(number).accept_string("0." + "3" * BOUNDED_NUMBER_FRACTION_DIGITS)
    assert not _matcher(number).accept_string("0." + "3" * (BOUNDED_NUMBER_FRACTION_DIGITS + 1))
    assert not _matcher(number).accept_string("5e-1")
    assert block_token_limit(number) == len("0.") + BOUNDED_NUMBER_FRACTION_DIGITS + 1
    assert block_token_limit({"type": "number", "minimum": -2.5, "maximum": 1000.0}) == len("-1000.") + BOUNDED_NUMBER_FRACTION_DIGITS + 1
    assert block_token_limit({"type": "integer", "minimum": -40, "maximum": 7}) == len("-40") + 1


def test_a_schema_without_a_longest_form_is_refused():
    with pytest.raises(ValueError, match="unbounded"):
        block_token_limit({"type": "number", "minimum": 0})
    with pytest.raises(ValueError, match="not closed"):
        block_token_limit({"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 1}}, "required": []})
    with pytest.raises(ValueError, match="maxLength"):
        block_token_limit({"type": "string"})
    with pytest.raises(ValueError, match="maxItems"):
        block_token_limit({"type": "array", "items": {"type": "boolean"}})


def test_the_longest_form_of_an_interfaces_reply():
    # a bounded string: 2 quotes and at most a 6-byte escape a character; an enum: its longest value quoted; an array:
    # brackets, maxItems of the longest item and ", " between them; anyOf: the longest option; a boolean: false
    assert block_token_limit({"type": "string", "maxLength": 10}) == 2 + 60 + 1
    assert block_token_limit({"type": "string", "enum": ["keep", "harder"]}) == len('"harder"') + 1
    item = {"anyOf": [{"type": "integer", "minimum": 3, "maximum": 7}, {"type": "string", "enum": ["easier"]}]}
    assert block_token_limit({"type": "array", "items": item, "maxItems": 3}) == 2 + 3 * len('"easier"') + 2 * 2 + 1
    assert block_token_limit({"type": "boolean"}) == 5 + 1


# ------------------------------------------------------- checkpoint engineer


def test_vllm_child_sends_structured_outputs(registry, gridwalk, tiny_models, monkeypatch, tmp_path):
    pytest.importorskip("xgrammar")
    fake = Path(__file__).resolve().parent / "fake_vllm"
    log = tmp_path / "fake-vllm.jsonl"
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(fake), *filter(None, [os.environ.get("PYTHONPATH")])]))
    monkeypatch.setenv("FAKE_VLLM_LOG", str(log))
    model = tiny_models.char_model(tmp_path / "tiny", hidden_size=32, layers=1, head_dim=16, max_positions=8192,
                                   chars='abcdefghijklmnopqrstuvwxyz0123456789{}[]":,.-_ ')  # JSON's characters: the grammar has tokens to allow
    engineer = registry.create("engineer", "checkpoint", {"backend": "vllm", "structured": True, "max_new_tokens": 24, "model_path": str(model)})
    outcome = design(engineer, _request(gridwalk), out_dir=tmp_path / "out", reask=0, summarize=False)
    chat = [entry for entry in map(json.loads, log.read_text().splitlines()) if entry.get("call") == "chat"]
    assert chat, outcome.reason
    sampling = chat[0]["sampling"][0]
    assert "structured_outputs=StructuredOutputsParams(json=" in sampling and "'analysis'" in sampling
    # 24 tokens of a random model cannot finish the object: a recorded, explained fallback
    assert outcome.fallback and "structured reply" in outcome.reason


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
def test_smollm2_structured_step_is_applied(registry, gridwalk, tmp_path, monkeypatch, smollm2_folder):
    """One real design step: SmolLM2-135M-Instruct on CPU, free analysis, then the block forced by xgrammar."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    pytest.importorskip("xgrammar")
    import torch

    torch.set_num_threads(1)
    current = gridwalk.default_config()
    prompt = (
        "You configure a training task generator. Groups k3..k10 are walk lengths; each has ratio (share of training) "
        "and size (grid side). The policy fails on k9 and k10 and solves k3-k5. Current config:\n```yaml\n"
        + yaml.safe_dump(current.model_dump()) + "```\nIn one sentence say what to change, then give the new config in a fenced YAML block."
    )
    # max_new_tokens 1: the forced block is bounded by the schema's longest block, never by max_new_tokens
    engineer = registry.create("engineer", "base", {"model_path": "smollm2-135m-instruct", "backend": "transformers", "structured": True,
                                                    "analysis_tokens": 32, "max_new_tokens": 1, "temperature": 0.0})
    started = time.monotonic()
    outcome = design(engineer, _request(gridwalk, prompt), out_dir=tmp_path, reask=0, summarize=False)
    seconds = time.monotonic() - started
    print(f"structured SmolLM2 step: {seconds:.1f} s, fallback {outcome.fallback}")
    assert not outcome.fallback, outcome.reason
    assert outcome.projection.accepted
    call = json.loads((tmp_path / "calls.jsonl").read_text().splitlines()[0])
    usage = call["usage"]
    assert call["structured"].startswith("fenced block grammar") and usage["block_token_limit"] == block_token_limit(config_schema(gridwalk, current))
    assert 1 < usage["block_tokens"] < usage["block_token_limit"] and usage["completion_tokens"] == usage["analysis_tokens"] + usage["block_tokens"]


def test_the_checkpoint_engineer_samples_by_the_requests_seed_and_answers_a_forced_question(registry, gridwalk, tiny_models, tmp_path):
    """The sampling seed mixes the seed option with the request's: one request samples the same reply twice, two
    requests (two proposals of the engineer benchmark) sample two; ``ask`` forces its answer under the schema given
    (the self-prediction's), so even a random model's answer parses."""
    pytest.importorskip("xgrammar")
    from dataclasses import replace

    from envengineer.plugins.engineer_bench.predictions import parse_prediction, prediction_schema
    from envengineer.plugins.engineers.checkpoint import sampling_seed

    model = tiny_models.char_model(tmp_path / "tiny", hidden_size=32, layers=1, head_dim=16, max_positions=4096,
                                   chars='abcdefghijklmnopqrstuvwxyz0123456789{}[]":,.-_ `\n')
    engineer = registry.create("engineer", "checkpoint", {"backend": "transformers", "max_new_tokens": 12, "temperature": 1.0,
                                                          "model_path": str(model), "analysis_tokens": 0})  # stop strings need a real tokenizer
    request = _request(gridwalk)
    one, again = (engineer.propose(replace(request, seed=7)).text for _ in range(2))
    other = engineer.propose(replace(request, seed=8)).text
    assert one == again and one != other
    assert sampling_seed(0, None) == 0 and sampling_seed(0, 7) == sampling_seed(0, 7) != sampling_seed(0, 8) != sampling_seed(1, 8)
    groups = ["k3", "k4"]
    reply = engineer.ask(request, [{"role": "user", "content": "predict"}], prediction_schema(groups))
    predicted, problem = parse_prediction(reply.text.replace(" ", ""), groups)  # this test tokenizer decodes with a space between characters
    assert predicted is not None and set(predicted) == set(groups) and all(0 <= v <= 1 for v in predicted.values()), (reply.text, problem)
    assert reply.calls[0]["structured"].startswith("fenced block grammar")


@pytest.mark.parametrize("interface", ["changes", "decisions", "decisions-read-first"])
def test_the_checkpoint_engineer_answers_in_every_interface(interface, registry, gridwalk, tiny_models, tmp_path):
    """interface changes/decisions on the in-process engineers: transformers forces the whole reply as JSON under the
    interface's schema (no free analysis first; the analysis bounded at 400 characters when analysis_chars is null), so
    even a random model's reply is that interface's object, and the design step reads it as such."""
    pytest.importorskip("xgrammar")
    from envengineer.api import interface_schema
    from envengineer.plugins.engineers.checkpoint import WHOLE_ANALYSIS_CHARS

    model = tiny_models.char_model(tmp_path / "tiny", hidden_size=32, layers=1, head_dim=16, max_positions=8192,
                                   chars='abcdefghijklmnopqrstuvwxyz0123456789{}[]":,.-_ `\n')
    from envengineer.api import ConfigError

    read_first = interface == "decisions-read-first"
    interface = "decisions" if read_first else interface
    with pytest.raises(ConfigError, match="set structured: true"):
        registry.create("engineer", "checkpoint", {"interface": interface})
    engineer = registry.create("engineer", "checkpoint", {"backend": "transformers", "structured": True, "interface": interface,
                                                          "temperature": 1.0, "model_path": str(model), "read_first": read_first})
    request = _request(gridwalk)
    reply = engineer.propose(request)
    raw = reply.calls[0]
    assert raw["structured"].startswith("fenced block grammar") and raw["usage"]["analysis_tokens"] == 0
    schema, _ = interface_schema(interface, gridwalk, request.current_config, WHOLE_ANALYSIS_CHARS, read_first=read_first)
    assert raw["usage"]["block_token_limit"] == block_token_limit(schema)
    # the reply is the free-text form of that interface's object, or says why the object could not be used
    if reply.problem is None:
        assert "```yaml" in reply.text
    else:
        assert "structured reply" in reply.problem or "change" in reply.problem or "decision" in reply.problem, reply.problem
    outcome = design(engineer, request, out_dir=tmp_path / "out", reask=0, summarize=False)
    if reply.problem is not None:  # the same reply again (same seed): the step falls back and says why
        assert outcome.fallback and reply.problem in outcome.reason, outcome.reason


def test_a_seed_option_sends_each_requests_own_seed(registry, gridwalk, fake_llm, tmp_path):
    """seed on an OpenAI-style engineer: each request carries seed = sampling_seed(option, the design request's seed),
    the same for the same request, another for another request (K proposals are K draws); none without the option."""
    from dataclasses import replace

    from envengineer.plugins.engineers.checkpoint import sampling_seed

    fake_llm.script = [fake_llm.Step(json.dumps(CHANGES))] * 4
    base = {"structured": True, "interface": "changes", **_fast(), "model": "served", "base_url": fake_llm.url + "/v1"}
    seeded = registry.create("engineer", "openai-compatible", {**base, "seed": 5})
    request = _request(gridwalk)
    for seed in (7, 7, 8):
        seeded.propose(replace(request, seed=seed))
    registry.create("engineer", "openai-compatible", base).propose(replace(request, seed=7))
    sent = [r["body"].get("seed") for r in fake_llm.requests]
    assert sent == [sampling_seed(5, 7), sampling_seed(5, 7), sampling_seed(5, 8), None] and sent[0] != sent[2]
