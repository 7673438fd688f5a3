"""The proposal pipeline: extraction, strict parsing, re-ask, fallback, recorded files."""

import json

import pytest
import yaml
from hypothesis import given, settings, strategies as st

from envengineer.components import Engineer
from envengineer.design.contract import EngineerReply
from envengineer.design.step import design
from envengineer.design.prompts import build_request
from envengineer.design.proposals import UnusableProposal, extract_yaml_block, parse_proposal
from envengineer.design.evidence import load_evidence


class Scripted(Engineer):
    """An engineer that replays texts (or raises) in order; the last one repeats."""

    name = "scripted"

    def __init__(self, replies):
        super().__init__()
        self.replies, self.seen = list(replies), []

    def propose(self, request):
        self.seen.append(request)
        item = self.replies[min(len(self.seen) - 1, len(self.replies) - 1)]
        if isinstance(item, BaseException):
            raise item
        return EngineerReply(text=item, model="scripted")


@pytest.fixture
def request_(recorded_run, registry):
    return build_request(load_evidence(recorded_run, 1, registry), registry, "V6")


def test_last_yaml_block_wins_and_other_languages_are_skipped():
    text = "```yaml\na: 1\n```\nthen\n```python\nprint(1)\n```\n```\nb: 2\n```\n"
    assert parse_proposal(extract_yaml_block(text)) == {"b": 2}
    assert parse_proposal(extract_yaml_block("~~~yml\nc: 3\n~~~")) == {"c": 3}


@pytest.mark.parametrize("text,why", [
    ("no block here", "no fenced YAML"),
    ("", "empty"),
    ("```yaml\n- 1\n- 2\n```", "mapping"),
    ("```yaml\na: &x 1\nb: *x\n```", "anchors"),
    ("```yaml\na: !!python/object:os.system ls\n```", "tags"),
    ("```yaml\na: !custom 1\n```", "tags"),
    ("```yaml\na: [1\n```", "does not parse"),
    ("```yaml\n" + "a: 1\n" * 5000 + "```", "too long"),
])
def test_unusable_blocks_say_why(text, why):
    with pytest.raises(UnusableProposal, match=why):
        parse_proposal(extract_yaml_block(text))


@settings(max_examples=60, deadline=None)
@given(st.text(max_size=300))
def test_parsing_never_raises_anything_else(text):
    try:
        parse_proposal(extract_yaml_block(text))
    except UnusableProposal:
        pass


def test_design_never_raises_on_engineer_bugs(request_, tmp_path):
    outcome = design(Scripted([RuntimeError("boom")]), request_, out_dir=tmp_path)
    assert outcome.fallback and "RuntimeError: boom" in outcome.reason
    assert json.loads((tmp_path / "calls.jsonl").read_text().splitlines()[0])["error"]


@pytest.mark.parametrize("reask,calls", [(0, 1), (1, 2), (3, 4)])
def test_reask_count_is_configurable(request_, reask, calls):
    engineer = Scripted(["nothing useful"])
    outcome = design(engineer, request_, reask=reask)
    assert outcome.fallback and len(engineer.seen) == calls
    if calls > 1:
        assert "no fenced YAML block" in engineer.seen[1].messages[-1]["content"]
        assert engineer.seen[1].messages[-2] == {"role": "assistant", "content": "nothing useful"}


def test_empty_proposal_keeps_the_config_without_fallback(request_):
    outcome = design(Scripted(["```yaml\n{}\n```"]), request_)
    assert not outcome.fallback and outcome.config == request_.current_config


def test_files_written(request_, tmp_path):
    design(Scripted(["bad", "```yaml\nsizes: {5x5: {wait_ratio: 0.6}}\n```"]), request_, out_dir=tmp_path)
    prompt = (tmp_path / "prompt.md").read_text()
    assert prompt.startswith(request_.prompt) and "re-ask" in prompt
    assert yaml.safe_load((tmp_path / "proposal.yaml").read_text()) == {"sizes": {"5x5": {"wait_ratio": 0.6}}}
    projection = yaml.safe_load((tmp_path / "projection.yaml").read_text())
    assert projection["fallback"] is False and projection["accepted"] == ["sizes.5x5.wait_ratio"]
    assert projection["config"]["sizes"]["5x5"]["wait_ratio"] == 0.6
    assert len((tmp_path / "calls.jsonl").read_text().splitlines()) == 2


def test_prompt_has_context_and_current_config(request_):
    assert "## Failure breakdown (F)" in request_.prompt and "## Current configuration" in request_.prompt
    assert "$context" not in request_.prompt and "Then propose the configuration for round 2," in request_.prompt


def test_every_engineer_has_forbidding_options(registry):
    for name in registry.names("engineer"):
        cls = registry.get("engineer", name)
        assert cls.Options.model_config.get("extra") == "forbid", name


def test_cli_context_and_propose(recorded_run):
    from typer.testing import CliRunner

    from envengineer.cli.commands import app

    runner = CliRunner()
    result = runner.invoke(app, ["context", "--run", str(recorded_run), "--round", "1", "--modules", "F,H"])
    assert result.exit_code == 0, result.output
    assert "## Failure breakdown (F)" in result.output and "## Training details" not in result.output
    # --round 1 is round-01, and the context calls it round 1 (rounds are numbered from 0 everywhere)
    assert "Validation after round 1: " in result.output and "Round 1 (the round just finished)" in result.output
    assert "after round 2" not in result.output and "Round 2" not in result.output
    result = runner.invoke(app, ["propose", "--run", str(recorded_run), "--round", "1", "--engineer", "learnability"])
    assert result.exit_code == 0, result.output
    assert "proposal" in result.output and "sizes.7x7.ratio" in result.output
    assert "config: round 1 -> round 2" in result.output  # the design step after round 1 writes round 2's config
