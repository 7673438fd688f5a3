"""A context budget (engineer option max_prompt_tokens): no budget changes nothing; a budget is met by cuts in
the documented order (history, rows, compact, drop), recorded in the prompt and in engineer/budget.json;
a budget no prompt can meet is an error naming the option."""

import json
from pathlib import Path

import pytest
from envengineer.components.prompt_budget import estimate_tokens
from envengineer.design.budget import STAGES
from envengineer.errors import ConfigError
from envengineer.design.evidence import RoundRecord, load_evidence
from envengineer.design.prompts import build_request

SNAPSHOTS = Path(__file__).with_name("snapshots") / "context"


@pytest.fixture
def evidence(recorded_run, registry):
    ev = load_evidence(recorded_run, 1, registry)
    # a longer run: rounds 0..5 finished, so H has old rounds to cut
    ev.history = [RoundRecord(n, ev.config, ev.report, fallback=False) for n in range(5)]
    ev.round = 5
    ev.rounds_total = 8
    return ev


def engineer(registry, tokens):
    options = {"model": "test-model", "base_url": "http://127.0.0.1:9"}
    if tokens is not None:
        options["max_prompt_tokens"] = tokens
    return registry.create("engineer", "openai-compatible", options)


def stages(request):
    return [c["stage"] for c in request.budget["cuts"]]


def test_no_budget_leaves_the_prompt_byte_identical(registry, recorded_run):
    evidence = load_evidence(recorded_run, 1, registry)
    plain = build_request(evidence, registry, "V6")
    for eng in (engineer(registry, None), registry.create("engineer", "heuristic", {})):
        request = build_request(evidence, registry, "V6", engineer=eng)
        assert request.prompt == plain.prompt and request.context == plain.context and request.budget is None
    assert plain.prompt == (SNAPSHOTS / "prompt-analysis-V6.md").read_text(encoding="utf-8")


def test_a_budget_the_prompt_already_fits_cuts_nothing(registry, evidence):
    plain = build_request(evidence, registry, "V6")
    request = build_request(evidence, registry, "V6", engineer=engineer(registry, 100_000))
    assert request.prompt == plain.prompt
    assert request.budget["cuts"] == [] and request.budget["tokens_before"] == estimate_tokens(plain.prompt)


def test_budgets_are_met_by_cuts_in_the_documented_order(registry, evidence):
    full = estimate_tokens(build_request(evidence, registry, "V6").prompt)
    seen = []
    for fraction in (0.9, 0.75, 0.6, 0.45):
        limit = int(full * fraction)
        request = build_request(evidence, registry, "V6", engineer=engineer(registry, limit))
        record = request.budget
        assert record["tokens_before"] == full and record["tokens_after"] == estimate_tokens(request.prompt) <= limit
        assert record["counter"].startswith("estimate")
        order = [STAGES.index(s) for s in stages(request)]
        assert order == sorted(order) and order  # never a later stage before an earlier one
        assert f"_Context shortened to fit {limit} prompt tokens (was {full}," in request.prompt
        assert "## Failure breakdown (F)" in request.prompt  # F is never left out
        assert len(record["cuts"]) >= len(seen) and record["cuts"][: len(seen)] == seen  # a tighter budget cuts more
        seen = record["cuts"]
    whats = [c["what"] for c in seen]
    assert whats[:4] == ["H: 3 rounds in full of 6", "H: 2 rounds in full of 6", "H: round 0 left out", "F: 2 failing example(s) of 3"]


def test_cuts_shorten_what_they_say(registry, evidence):
    full = estimate_tokens(build_request(evidence, registry, "V6").prompt)
    first = build_request(evidence, registry, "V6", engineer=engineer(registry, full - 1))
    assert [c["what"] for c in first.budget["cuts"]] == ["H: 3 rounds in full of 6"]
    assert "Rounds 1–3, configs omitted" in first.context and "\nRound 4: valid" in first.context
    tight = build_request(evidence, registry, "V6", engineer=engineer(registry, int(full * 0.41)))
    assert "drop" in stages(tight)
    dropped = [c["what"][0] for c in tight.budget["cuts"] if c["stage"] == "drop"]
    assert dropped == ["T", "S", "H", "G"][: len(dropped)]  # last in prompt order first
    for name in dropped:
        assert f"({name})\n\n" not in tight.context
    assert "failing example" not in tight.context.split("_Context shortened")[0].lower()


def test_deterministic(registry, evidence):
    limit = int(estimate_tokens(build_request(evidence, registry, "V6").prompt) * 0.6)
    a = build_request(evidence, registry, "V6", engineer=engineer(registry, limit))
    b = build_request(evidence, registry, "V6", engineer=engineer(registry, limit))
    assert a.prompt == b.prompt and a.budget == b.budget


def test_too_small_a_budget_names_the_option(registry, evidence):
    with pytest.raises(ConfigError, match=r"engineer\.openai-compatible\.max_prompt_tokens: the analysis prompt needs \d+ tokens .* more than the budget of 50; raise max_prompt_tokens to at least \d+"):
        build_request(evidence, registry, "V6", engineer=engineer(registry, 50))


def test_the_option_is_checked(registry):
    with pytest.raises(ConfigError, match="max_prompt_tokens"):
        engineer(registry, 0)
    assert registry.create("engineer", "checkpoint", {"max_prompt_tokens": 2048}).max_prompt_tokens == 2048
    assert registry.create("engineer", "heuristic", {}).max_prompt_tokens is None


def test_the_design_record_holds_the_cuts(registry, evidence, tmp_path):
    from envengineer.design.contract import DesignOutcome
    from envengineer.design.step import write_outcome

    limit = int(estimate_tokens(build_request(evidence, registry, "V6").prompt) * 0.6)
    request = build_request(evidence, registry, "V6", engineer=engineer(registry, limit))
    outcome = DesignOutcome(config=request.current_config, projection=None, fallback=True, reason="test")
    write_outcome(tmp_path, request, outcome, request, ["(none)"], [])
    assert json.loads((tmp_path / "budget.json").read_text()) == request.budget
    assert "_Context shortened to fit" in (tmp_path / "prompt.md").read_text()
    plain = build_request(evidence, registry, "V6")
    write_outcome(tmp_path / "plain", plain, outcome, plain, ["(none)"], [])
    assert not (tmp_path / "plain" / "budget.json").exists()


@pytest.fixture(scope="module")
def smollm2(smollm2_folder):
    return smollm2_folder


def test_checkpoint_engineer_counts_with_its_tokenizer(registry, evidence, smollm2):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2)
    count = lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"])
    full = count(build_request(evidence, registry, "V6").prompt)
    for limit in (full - 1, 2048, 1500):
        eng = registry.create("engineer", "checkpoint", {"model_path": str(smollm2), "max_prompt_tokens": limit})
        request = build_request(evidence, registry, "V6", engineer=eng)
        assert request.budget["counter"] == f"the tokenizer of {smollm2}"
        assert request.budget["tokens_before"] == full and count(request.prompt) == request.budget["tokens_after"] <= limit


def test_a_design_step_under_a_budget_records_it(registry, recorded_run, tmp_path):
    """envengineer propose (the loop's design step offline): the engineer reads the shortened prompt; its files
    hold the note and budget.json, whatever the engineer then answers (here: no server, a recorded fallback)."""
    from envengineer.loop.replay import propose_offline

    config = tmp_path / "engineer.yaml"
    config.write_text("name: openai-compatible\nmodel: test-model\nbase_url: http://127.0.0.1:9\nmax_retries: 0\ntimeout: 2\nmax_prompt_tokens: 1500\n")
    out = tmp_path / "design"
    request, outcome = propose_offline(registry, recorded_run, 1, None, config, out_dir=out, reask=0)
    assert outcome.fallback and request.budget["tokens_after"] <= 1500 and request.budget["cuts"]
    assert json.loads((out / "budget.json").read_text()) == request.budget
    assert "_Context shortened to fit 1500 prompt tokens" in (out / "prompt.md").read_text()
    config.write_text("name: openai-compatible\nmodel: test-model\nbase_url: http://127.0.0.1:9\nmax_prompt_tokens: 20\n")
    with pytest.raises(ConfigError, match=r"engineer\.openai-compatible\.max_prompt_tokens"):
        propose_offline(registry, recorded_run, 1, None, config, out_dir=tmp_path / "never", reask=0)
    assert not (tmp_path / "never").exists()


def test_the_loop_passes_the_engineer_and_records_the_cuts(tmp_path, registry):
    """A whole run (simulated student): the design step's engineer files hold budget.json, its history line prompt_cuts."""
    from envengineer.loop.steps import run

    config = tmp_path / "sim.yaml"
    config.write_text("name: sim\nrounds: 2\nbudget: 60\ntask: {name: mapf-frozenlake}\npolicy: simulated\ntrainer: simulated\n"
                      "eval: {limit: 48}\nengineer: {name: openai-compatible, model: m, base_url: 'http://127.0.0.1:9', max_retries: 0, "
                      "timeout: 2, max_prompt_tokens: 1200}\n")
    run(config, registry=registry, output=str(tmp_path / "run"))
    record = json.loads((tmp_path / "run" / "round-00" / "engineer" / "budget.json").read_text())
    assert record["tokens_after"] <= 1200 < record["tokens_before"] and record["cuts"]
    lines = [json.loads(line) for line in (tmp_path / "run" / "history.jsonl").read_text().splitlines()]
    [design] = [line for line in lines if line.get("step") == "design"]
    assert design["prompt_cuts"] == len(record["cuts"]) and design["fallback"]
