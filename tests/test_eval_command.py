"""`envengineer eval`: a policy on a benchmark, rates per subset/size/hole ratio, Sum, files on disk."""

import json

import pytest
from typer.testing import CliRunner

from envengineer.cli import app


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    from envengineer.plugins.policies import tiny

    tokenizer = tiny.build_tokenizer()
    model = tiny.build_model(tokenizer, hidden_size=32, layers=1, ffn=64, seed=2)
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
    from envengineer.cli import main

    for args in (["eval", "--policy", "no-such", "--bench", "mapf-3agents"],
                 ["eval", "--policy", "transformers:/nonexistent", "--bench", "no-such-bench"]):
        with pytest.raises(SystemExit) as info:
            main(args)
        assert info.value.code == 2
