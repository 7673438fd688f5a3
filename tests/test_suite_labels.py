"""A suite's labels (its table's name, the arms' order) are not part of a run's identity: reordering a
manifest's arms or renaming its table finds the finished runs finished, and the loop resumes them (issue 44)."""

from pathlib import Path

import yaml
from typer.testing import CliRunner

from envengineer.cli.commands import app

REPO = Path(__file__).resolve().parents[1]
ENV = {"ENVENGINEER_LOAD_PLUGINS": "", "COLUMNS": "250"}


def _manifest(folder: Path, table: str, arms: list[str]) -> None:
    rows = {"fixed": {"engineer.name": "fixed", "rounds": 1}, "learnability": {"engineer.name": "learnability", "rounds": 1}}
    (folder / "suite.yaml").write_text(yaml.safe_dump({"base": "base.yaml", "table": table, "arms": {a: rows[a] for a in arms}},
                                                      sort_keys=False))


def test_reordered_arms_and_a_renamed_table_keep_their_finished_runs(tmp_path):
    folder = tmp_path / "suite"
    folder.mkdir()
    (folder / "base.yaml").write_text((REPO / "examples" / "sim-student" / "base.yaml").read_text())
    _manifest(folder, "first", ["fixed", "learnability"])
    runner = CliRunner()
    out = tmp_path / "out"
    done = runner.invoke(app, ["suite", str(folder), "--seeds", "1", "--output", str(out)], env=ENV)
    assert done.exit_code == 0, done.output
    histories = {arm: (out / arm / "seed-0" / "history.jsonl").read_text() for arm in ("fixed", "learnability")}
    _manifest(folder, "renamed", ["learnability", "fixed"])
    plan = runner.invoke(app, ["suite", str(folder), "--seeds", "1", "--output", str(out), "--dry-run"], env=ENV)
    assert plan.exit_code == 0, plan.output
    assert plan.output.count("finished") >= 2 and "different run" not in plan.output, plan.output
    again = runner.invoke(app, ["suite", str(folder), "--seeds", "1", "--output", str(out)], env=ENV)
    assert again.exit_code == 0 and "2 finished run(s) skipped" in again.output, again.output
    assert {arm: (out / arm / "seed-0" / "history.jsonl").read_text() for arm in histories} == histories  # nothing ran again
    # the loop itself resumes a finished run whose suite labels changed: run.yaml holds no suite section
    assert "suite" not in yaml.safe_load((out / "fixed" / "seed-0" / "run.yaml").read_text())
