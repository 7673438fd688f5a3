"""bench/served_replies.py's reading of a read_first reply: each group's success as the model read it off the
evidence, and the report's mean distance from the evidence's p."""

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest import import_bench

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "served_replies.py"


def _bench():
    return import_bench("served_replies")


def test_readings_are_read_from_the_decisions_only():
    bench = _bench()
    raw = json.dumps({"analysis": "k3 is solved (read 12%) here.",
                      "decisions": {"k3": {"success_pct": 98, "difficulty": "harder", "budget": "less"},
                                    "k10": {"success_pct": 0, "difficulty": "keep", "budget": "same"}}})
    assert bench.readings(raw) == {"k3": 98, "k10": 0}  # the analysis's own "(read 12%)" is not a reading
    listed = json.dumps({"analysis": "", "decisions": [{"group": "k3", "difficulty": "harder", "budget": "less"}]})
    assert bench.readings(listed) == {}  # the list form reads nothing
    assert bench.readings(json.dumps({"analysis": "", "decisions": {"success_pct": 5, "difficulty": "easier"}})) == {"all": 5}  # no groups
    assert bench.readings(None) == {} and bench.readings("not json") == {}
    assert bench.interface_options("decisions-read") == {"interface": "decisions", "read_first": True}
    assert bench.interface_options("changes") == {"interface": "changes"}


def test_the_report_gives_the_mean_reading_error_per_interface(tmp_path):
    def record(interface, groups):
        return {"model": "m", "run": "r", "task": "grid-walk", "round": 1, "preset": "V6", "interface": interface, "order": "stable-first",
                "analysis_chars": 400, "outcome": "applied", "reason": "", "restated": False, "seconds": 10.0,
                "calls": [{"usage": {"prompt_tokens": 100, "completion_tokens": 10}, "latency_s": 10.0, "error": None}],
                "groups": groups, "replies": [""]}

    path = tmp_path / "replies.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (
        record("decisions-read", {"k3": {"p": 0.98, "wanted": "harder", "moved": "harder", "verdict": "toward", "read_pct": 90},
                                  "k9": {"p": 0.0, "wanted": "easier", "moved": "keep", "verdict": "still", "read_pct": 20}}),
        record("decisions", {"k3": {"p": 0.98, "wanted": "harder", "moved": "harder", "verdict": "toward"}}))) + "\n")
    done = subprocess.run([sys.executable, str(SCRIPT), "--report", str(path), "--markdown", str(tmp_path / "t.md")],
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "250"})
    assert done.returncode == 0, done.stderr
    rows = {line.split(" | ")[3]: line for line in (tmp_path / "t.md").read_text().splitlines() if line.startswith("| m | all")}
    assert " | 14.0 | " in rows["decisions-read"]  # (|90 − 98| + |20 − 0|) / 2
    assert " | — | " in rows["decisions"]
