"""Real SmolLM2-135M-Instruct replies (recorded by bench/engineer_replies.py and
tests/test_real_server.py on 2026-12-02) through the proposal parser: each one is refused or
projected as the contract says (docs/engineers.md: a closed fenced yaml/yml/untagged block, a
mapping, unknown fields never applied, values projected into bounds), with a reason the
re-ask can quote."""

import pytest

from envengineer.design.contract import EngineerReply
from envengineer.design.proposals import UnusableProposal, extract_yaml_block, nothing_applied, proposal_of
from envengineer.design.structured import reply_text

# transformers serve, openai-compatible engineer, max_tokens 64: the fence opened, then the limit
CUT_AT_LIMIT = "```\n#\n# 1.\n# 2.\n# 3.\n# 4.\n# 5.\n# 6.\n# 7.\n# 8.\n# 9.\n# 10.\n# 11.\n# 1"

# checkpoint engineer, V1, round 0 of a quickstart run, 300 new tokens: no block at all
NO_BLOCK = (
    "The task is to take a simple task, which is to take a data set, identify which part of it fails, and what the "
    "current configuration does about it. To do that, you need to consider the policy fails, and you need to take a "
    "configuration that is too hard. So you need to take a configuration that is too easy to take a configuration "
    "that is too hard to make a configuration that is too easy to take a configuration"
)

# structured off, a JSON flow mapping in a yaml fence, keyed by names the task does not have
UNKNOWN_GROUPS = (
    "To change the config, you can use the `-f` option to create a new config file with the desired configuration.\n\n"
    "```yaml\n"
    '{"groups": {"k3": {"ratio": 0.125, "size": 5}, "k4": {"ratio": 0.125, "size": 5}}}\n'
    "```\n"
)


# checkpoint engineer, V4, round 0 of a quickstart run (mapf), structured off, the re-ask's answer: a JSON
# mapping that repeats keys in one object ("shape", "type", "default-fill-fill-pattern"); PyYAML kept the
# last value silently
REPEATED_KEYS = (
    'o modify it to make it fail.\n\nThe current configuration is:\n```\n{\n  "round-1": {\n    "shape": "single-tile",\n'
    '    "type": "finite-domain",\n    "default-fill-fill-pattern": {\n      "fill-fill-pattern": "square"\n    },\n'
    '    "size": 3x3,\n    "shape": "single-tile",\n    "type": "finite-domain",\n    "default-fill-fill-pattern": "square"\n  },\n'
    '  "configuration": {\n    "shape": "single-tile",\n    "type": "finite-domain",\n    "default-fill-fill-pattern": "square"\n  },\n'
    '  "parameters": {\n    "shape": "single-tile",\n    "type": "finite-domain",\n    "default-fill-fill-pattern": "square"\n  },\n'
    '  "inputs": {\n    "shape": "single-tile",\n    "type": "finite-domain",\n    "default-fill-fill-pattern": "square"\n  }\n}\n```'
)

# checkpoint engineer, structured on, grid-walk (round 0 of a simulated-student run), V6: free analysis, then
# the forced block (177-180 of its 318-token limit), every knob at the value it had
REPEATS_CONFIG = (
    "The task is to introduce a new configuration that combines the previous one with a new\nspecification.\n\n```yaml\n"
    '{"groups": {"k3": {"ratio": 0.125, "size": 5}, "k4": {"ratio": 0.125, "size": 5}, "k5": {"ratio": 0.125, "size": 5}, '
    '"k6": {"ratio": 0.125, "size": 5}, "k7": {"ratio": 0.125, "size": 5}, "k8": {"ratio": 0.125, "size": 5}, '
    '"k9": {"ratio": 0.125, "size": 5}, "k10": {"ratio": 0.125, "size": 5}}}\n```\n'
)


def test_a_key_repeated_in_one_mapping_is_refused_and_named():
    with pytest.raises(UnusableProposal, match=r"the key 'shape' appears twice in one mapping"):
        proposal_of(EngineerReply(text=REPEATED_KEYS))


def test_a_knob_written_twice_is_refused_not_the_last_value_taken(registry):
    # what PyYAML alone would do: keep 0.4, silently; which value was meant is unknown
    text = "```yaml\nsizes:\n  9x9: {ratio: 0.1, ratio: 0.4}\n```"
    with pytest.raises(UnusableProposal, match=r"the key 'ratio' appears twice in one mapping \(write each field once\)"):
        proposal_of(EngineerReply(text=text))
    with pytest.raises(UnusableProposal, match=r"the key '9x9' appears twice"):
        proposal_of(EngineerReply(text="```yaml\nsizes:\n  9x9: {ratio: 0.1}\n  9x9: {hole_ratio: 0.2}\n```"))
    # the same key in two mappings is no repetition
    assert proposal_of(EngineerReply(text="```yaml\nsizes:\n  8x8: {ratio: 0.1}\n  9x9: {ratio: 0.1}\n```")) == {
        "sizes": {"8x8": {"ratio": 0.1}, "9x9": {"ratio": 0.1}}}


def test_a_whole_json_reply_with_a_repeated_key_is_unusable():
    text, problem = reply_text('{"analysis": "more 9x9", "config": {"sizes": {"9x9": {"ratio": 0.1, "ratio": 0.4}}}}')
    assert problem and "the key 'ratio' appears twice in one object" in problem


def test_a_forced_block_that_repeats_the_config_is_a_change_of_nothing(registry):
    generator, _ = registry.task("grid-walk", {})
    config = generator.default_config()
    proposal = proposal_of(EngineerReply(text=REPEATS_CONFIG))
    projection = generator.project(proposal, config)
    assert projection.config == config and nothing_applied(proposal, projection) is None  # "keep every knob": allowed


def test_a_fence_cut_at_the_token_limit_is_refused_and_named():
    with pytest.raises(UnusableProposal, match=r"opens a fenced block \(```\) that is never closed"):
        extract_yaml_block(CUT_AT_LIMIT)


def test_a_cut_yml_fence_after_prose_is_refused_too():
    with pytest.raises(UnusableProposal, match=r"\(```yml\) that is never closed"):
        extract_yaml_block("More budget to 9x9.\n\n```yml\nsizes:\n  9x9: {ratio: 0.2")


def test_an_open_fence_of_another_language_is_no_yaml_block():
    with pytest.raises(UnusableProposal, match="no fenced YAML block"):
        extract_yaml_block("```python\nprint('hi')\n")


def test_closed_blocks_before_a_cut_one_still_pair_up():
    # a closed python block, then a yaml fence that never closes: the yaml one is named
    with pytest.raises(UnusableProposal, match=r"\(```yaml\) that is never closed"):
        extract_yaml_block("```python\nx = 1\n```\n\n```yaml\nsizes:\n")


def test_prose_without_a_block_is_refused():
    with pytest.raises(UnusableProposal, match="no fenced YAML block"):
        proposal_of(EngineerReply(text=NO_BLOCK))


def test_unknown_keys_apply_nothing(registry):
    generator, _ = registry.task("mapf-frozenlake", {"agents": 2})
    proposal = proposal_of(EngineerReply(text=UNKNOWN_GROUPS))
    assert proposal == {"groups": {"k3": {"ratio": 0.125, "size": 5}, "k4": {"ratio": 0.125, "size": 5}}}
    config = generator.default_config()
    projection = generator.project(proposal, config)
    assert projection.config == config
    problem = nothing_applied(proposal, projection)
    assert problem and "groups: unknown field" in problem


def test_out_of_bounds_values_are_clipped_never_taken(registry):
    generator, _ = registry.task("mapf-frozenlake", {"agents": 2})
    proposal = proposal_of(EngineerReply(text="```yaml\nsizes:\n  9x9: {hole_ratio: 7.5, wait_ratio: -3}\n```"))
    projection = generator.project(proposal, generator.default_config())
    knobs = projection.config.model_dump()["sizes"]["9x9"]
    assert 0 <= knobs["hole_ratio"] < 1 and 0 <= knobs["wait_ratio"] <= 1
    assert {c.field for c in projection.changes} >= {"sizes.9x9.hole_ratio", "sizes.9x9.wait_ratio"}
