"""Reading a run directory's records without failing on a partial run: each reader notes what it could
not read in ``problems`` and returns None or nothing; the design-step helpers the loop and the report
share (each round's latest design, a fallback streak, the alarm a report and the loop print), and a
stage's validation verdicts paired with the base's."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envengineer.errors import InputError
from envengineer.store.rundir import Step


def paired_with_base(stage: list[tuple[str, bool]] | None, base: list[tuple[str, bool]] | None) -> dict[str, Any] | None:
    """A stage's validation verdicts against the base's on the same instances (+gained, −lost,
    sign test p), or None unless both have (id, valid) verdicts for the same ids in the same order."""
    from envengineer.components.metrics import paired_change

    if not stage or not base or [i for i, _ in stage] != [i for i, _ in base]:
        return None
    return paired_change([v for _, v in base], [v for _, v in stage])


def read_verdicts(path: Path, problems: list[str] | None = None) -> list[tuple[str, bool]] | None:
    """(id, valid) per line of a ``verdicts.jsonl`` (``RunDir.eval_verdicts(round)``), or None without one."""
    if not path.is_file():
        return None
    lines = noted_jsonl(path, problems if problems is not None else [])
    return [(str(v.get("id")), bool(v.get("valid"))) for v in lines] or None


# ------------------------------------------------------------------ design steps


def latest_designs(history: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    """Each round's latest ``design`` history line: a design redone on resume supersedes the one that stopped the run."""
    return {line["round"]: line for line in history if line.get("step") == Step.DESIGN and isinstance(line.get("round"), int)}


def fallback_streak(designs: dict[int, dict[str, Any]], round: int) -> list[int]:
    """The rounds, oldest first, of the unbroken run of fallen-back designs that ends at ``round``."""
    streak: list[int] = []
    while round in designs and designs[round].get("fallback"):
        streak.insert(0, round)
        round -= 1
    return streak


@dataclass
class DesignAlarm:
    """How loudly to say that design steps fell back: ``failed`` when the experiment is void."""

    failed: bool
    headline: str
    detail: str


def design_alarm(designs: list[tuple[bool, str]], *, halted: bool = False) -> DesignAlarm | None:
    """From each design step's (fell back, reason), oldest first: None when none fell back.

    A run whose every design fell back never changed its generator config: it trained like
    the fixed baseline, and its numbers say nothing about the engineer.
    """
    reasons = [reason for fell, reason in designs if fell]
    if not reasons:
        return None
    last = reasons[-1] or "no reason recorded"
    n, k = len(designs), len(reasons)
    if halted:
        return DesignAlarm(True, f"FAILED EXPERIMENT: the run was stopped by design.max_fallbacks after {k} of {n} design step(s) fell back",
                           f"Last reason: {last}. Fix the cause and rerun the same config: the stopped design step is redone.")
    if k == n:
        return DesignAlarm(True, f"FAILED EXPERIMENT: all {n} design step(s) fell back",
                           f"The engineer never changed the generator config, so this run trained like the fixed baseline. Last reason: {last}")
    return DesignAlarm(False, f"{k} of {n} design steps fell back (the previous config was kept)", f"Last reason: {last}")


# ------------------------------------------------------------------ reading, noting what could not be read


def noted_json(path: Path, problems: list[str]) -> Any:
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        problems.append(f"{path}: {exc}")
        return None


def noted_yaml(path: Path, problems: list[str]) -> Any:
    from envengineer.fileio import read_yaml

    if not path.is_file():
        return None
    try:
        return read_yaml(path)
    except InputError as exc:
        problems.append(str(exc))
        return None


def noted_text(path: Path, problems: list[str]) -> str | None:
    if not path.is_file():
        return None
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(f"{path}: {exc}")
        return None


def noted_jsonl(path: Path, problems: list[str]) -> list[dict[str, Any]]:
    """Every well-formed object line; a bad line (e.g. cut by a crash) is skipped and noted."""
    if not path.is_file():
        return []
    records: list[dict[str, Any]] = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        problems.append(f"{path}: {exc}")
        return []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(f"{path}, line {number}: not valid JSON ({exc.msg}); skipped")
            continue
        if isinstance(obj, dict):
            records.append(obj)
    return records
