"""bench/llm_engineer_claims.py on suites laid out as the loop writes them: the seed-level test (part 2 of
docs/results-engineer-scale.md) and the pre-registrations' reading rules, from per-seed outcomes planted so that
each verdict is known."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
N = 100  # instances of the planted benchmark


def plant(root: Path, arm: str, rates: list[int]) -> None:
    """ARM/seed-S runs whose last round's benchmark has rates[S] of N instances valid (the first ones), with one
    design step and one training step in the history."""
    for seed, valid in enumerate(rates):
        run = root / arm / f"seed-{seed}"
        (run / "round-00" / "bench" / "b").mkdir(parents=True)
        lines = [{"round": 0, "step": "train", "trained_prompts": 40}, {"round": 0, "step": "design", "fallback": False}]
        (run / "history.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
        (run / "round-00" / "bench" / "b" / "verdicts.jsonl").write_text(
            "".join(json.dumps({"id": f"i{i}", "valid": i < valid}) + "\n" for i in range(N)))


def claims(root: Path) -> dict:
    done = subprocess.run([sys.executable, str(REPO / "bench/llm_engineer_claims.py"), str(root), "--primary", "bench:b",
                           "--llm", "llm", "--test", "seeds", "--rule-arms", "learnability", "rlve", "--control", "learnability"],
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "200"})
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((root / "claims.json").read_text())


def row(report: dict, family: str, a: str, b: str) -> dict:
    return next(r for r in report["tests"] if r["family"] == family and r["a"] == a and r["b"] == b)


def test_an_engineer_no_better_than_fixed_leaves_claim_b_untestable(tmp_path):
    fixed = [30, 32, 28, 31, 29, 30, 33, 27]
    plant(tmp_path, "fixed", fixed)
    plant(tmp_path, "learnability", [f + 10 for f in fixed])  # +10 points at every seed: the smallest p, 2/2^8
    plant(tmp_path, "rlve", [f - 5 for f in fixed])
    plant(tmp_path, "llm-v6", [f + d for f, d in zip(fixed, [1, -1, 0, 2, -2, 1, -1, 0])])
    plant(tmp_path, "llm-v6-donor", fixed)
    plant(tmp_path, "llm-no-f", fixed)
    report = claims(tmp_path)
    control = row(report, "control", "learnability", "fixed")
    assert control["p_seeds"] == 2 / 2 ** 8 and control["beats"] and control["mean_diff"] == 0.10
    assert report["strongest_rule_arm"] == "learnability" and [r["b"] for r in report["tests"] if r["family"] == "a"] == ["fixed", "learnability"]
    assert not row(report, "a", "llm-v6", "fixed")["beats"]
    assert report["reading"] == {"control_detects": True, "read": True, "claim_a": "not supported", "claim_b": "not testable"}


def test_an_engineer_that_beats_fixed_the_strongest_and_its_donor_supports_both_claims(tmp_path):
    fixed = [30, 32, 28, 31, 29, 30, 33, 27]
    plant(tmp_path, "fixed", fixed)
    plant(tmp_path, "learnability", [f + 10 for f in fixed])
    plant(tmp_path, "rlve", [f + 12 for f in fixed])  # the strongest rule arm, not the control
    plant(tmp_path, "llm-v6", [f + 20 for f in fixed])
    plant(tmp_path, "llm-v6-donor", [f + 11 for f in fixed])
    plant(tmp_path, "llm-no-f", [f + 20 - (s % 2) for s, f in enumerate(fixed)])  # one point lower at odd seeds: mean +0.5
    report = claims(tmp_path)
    assert report["strongest_rule_arm"] == "rlve" and [r["a"] for r in report["tests"] if r["family"] == "control"] == ["learnability"]
    assert row(report, "a", "llm-v6", "rlve")["beats"] and row(report, "b", "llm-v6", "llm-v6-donor")["beats"]
    no_f = row(report, "b", "llm-v6", "llm-no-f")
    assert no_f["mean_diff"] == 0.005 and no_f["p_seeds"] == 2 / 2 ** 4 and no_f["p_seeds_holm"] == 0.125 and not no_f["beats"]
    assert report["reading"] == {"control_detects": True, "read": True, "claim_a": "supported", "claim_b": "supported"}


def test_a_control_that_does_not_detect_reads_nothing(tmp_path):
    fixed = [30, 32, 28, 31, 29, 30, 33, 27]
    for arm in ("fixed", "learnability", "llm-v6-donor", "llm-no-f"):
        plant(tmp_path, arm, fixed)
    plant(tmp_path, "llm-v6", [f + 20 for f in fixed])
    reading = claims(tmp_path)["reading"]
    assert reading["control_detects"] is False and reading["read"] is False
