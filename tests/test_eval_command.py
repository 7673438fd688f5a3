"""`envengineer eval`: a policy on a benchmark, rates per subset/size/hole ratio, Sum, files on disk."""

import json

import pytest
from typer.testing import CliRunner

from envengineer.cli.commands import app


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from envengineer.plugins.policies import tiny_model

    tokenizer = tiny_model.build_tokenizer()
    model = tiny_model.build_model(tokenizer, hidden_size=32, layers=1, ffn=64, seed=2)
    path = tmp_path_factory.mktemp("eval-model")
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def test_eval_writes_rates_per_subset_size_and_hole_ratio(model_dir, tmp_path):
    out = tmp_path / "eval"
    result = CliRunner().invoke(app, [
        "eval", "--policy", f"transformers:{model_dir}", "--style", "compact", "--bench", "mapf-3agents",
        "--limit", "30", "--output", str(out),
    ])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "mapf-3agents" / "summary.json").read_text())
    assert summary["overall"]["n"] == 30
    assert set(summary["by"]["subset"]) == {"wr_025", "wr_050", "wr_075"}  # an evenly spread sample keeps every subset
    assert len(summary["by"]["size"]) >= 5 and len(summary["by"]["hole_ratio"]) == 5
    assert "sum_over_subsets" in summary and summary["settings"]["prompt_style"] == "compact"
    assert summary["settings"]["path"] == str(model_dir)
    verdicts = (out / "mapf-3agents" / "verdicts.jsonl").read_text().splitlines()
    assert len(verdicts) == 30
    assert (out / "mapf-3agents" / "rates.csv").read_text().startswith("dimension,group,n,")
    assert "Sum over subsets" in result.output and "wr_050" in result.output


def test_eval_rejects_unknown_policies_and_benchmarks(tmp_path):
    from envengineer.cli.commands import main

    for args in (["eval", "--policy", "no-such", "--bench", "mapf-3agents"],
                 ["eval", "--policy", "transformers:/nonexistent", "--bench", "no-such-bench"]):
        with pytest.raises(SystemExit) as info:
            main(args)
        assert info.value.code == 2


# ------------------------------------------------------------- API policies (no weights)

KEY = "sk-test-POLICY-0a1b2c3d4e"


def _api_policy(tmp_path, fake_llm, monkeypatch, **options):
    """A policy-config file for the openai-compatible policy, pointed at the loopback server."""
    import yaml

    pytest.importorskip("openai")
    monkeypatch.setenv("SOLVER_KEY", KEY)
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump({
        "model": "gpt-5", "base_url": fake_llm.url + "/v1", "api_key_env": "SOLVER_KEY",
        "concurrency": 1, "max_retries": 0, "timeout": 10, "max_tokens": 2048, **options,
    }))
    return path


def _bench_records(limit):
    from envengineer.loop.evaluation import spread
    from envengineer.fileio import read_jsonl
    from envengineer.registry import load_registry

    registry = load_registry()
    spec = registry.benchmark("mapf-3agents")
    generator, _ = registry.task(spec.task, dict(spec.options))
    return generator, spread(read_jsonl(spec.path), limit)


def test_eval_runs_an_api_policy_without_weights(tmp_path, fake_llm, monkeypatch):
    generator, records = _bench_records(6)
    # one optimal answer per instance, in the order a single-connection policy asks
    fake_llm.script = [fake_llm.Step(generator.reference_answer(record)) for record in records]
    out = tmp_path / "eval"
    result = CliRunner().invoke(app, [
        "eval", "--policy", "openai-compatible", "--policy-config", str(_api_policy(tmp_path, fake_llm, monkeypatch)),
        "--bench", "mapf-3agents", "--limit", "6", "--output", str(out),
    ])
    assert result.exit_code == 0, result.output
    summary = json.loads((out / "mapf-3agents" / "summary.json").read_text())
    assert summary["overall"]["n"] == 6 and summary["overall"]["valid_rate"] == 1.0
    assert summary["calls"] == {"responses": 6, "failed": 0, "first_error": None}
    assert len(fake_llm.requests) == 6
    for request in fake_llm.requests:  # gpt-5's rules: the loopback server refused nothing
        body = request["body"]
        assert body["model"] == "gpt-5" and body["max_completion_tokens"] == 2048
        assert "max_tokens" not in body and "temperature" not in body
    for path in out.rglob("*"):
        if path.is_file():
            assert KEY not in path.read_text(), path


def test_eval_records_failed_calls_and_their_first_error(tmp_path, fake_llm, monkeypatch, capsys):
    from envengineer.cli.commands import main

    generator, records = _bench_records(4)
    answer = generator.reference_answer(records[0])
    fake_llm.script = [fake_llm.Step(answer), fake_llm.Step(status=503), fake_llm.Step(answer, thoughts=4000), fake_llm.Step(answer)]
    out = tmp_path / "eval"
    main(["eval", "--policy", "openai-compatible", "--policy-config", str(_api_policy(tmp_path, fake_llm, monkeypatch)),
          "--bench", "mapf-3agents", "--limit", "4", "--output", str(out)])
    calls = json.loads((out / "mapf-3agents" / "summary.json").read_text())["calls"]
    assert calls["responses"] == 4 and calls["failed"] == 2
    assert "503" in calls["first_error"]
    err = " ".join(capsys.readouterr().err.split())
    assert "2 of 4 calls gave no answer" in err and "503" in err
    responses = [json.loads(line)["response"] for line in (out / "mapf-3agents" / "responses.jsonl").read_text().splitlines()]
    assert responses[1] == "" and responses[2] == ""  # refused, and reasoning used up max_completion_tokens


def test_eval_fails_when_every_call_fails(tmp_path, fake_llm, monkeypatch, capsys):
    from envengineer.cli.commands import main

    fake_llm.script = [fake_llm.Step("<answer></answer>")]
    # forcing a temperature on gpt-5: the service refuses every call
    config = _api_policy(tmp_path, fake_llm, monkeypatch, send_temperature=True, temperature=0.0)
    out = tmp_path / "eval"
    with pytest.raises(SystemExit) as info:
        main(["eval", "--policy", "openai-compatible", "--policy-config", str(config), "--bench", "mapf-3agents",
              "--limit", "3", "--output", str(out)])
    assert info.value.code == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "every call to policy openai-compatible failed" in err and "Unsupported value: 'temperature'" in err
    assert "Traceback" not in err and KEY not in err
    calls = json.loads((out / "mapf-3agents" / "summary.json").read_text())["calls"]
    assert calls["failed"] == 3 and "temperature" in calls["first_error"]
