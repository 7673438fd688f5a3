"""The run directory: where every arrow of the loop leaves a file.

Files are written atomically; a step that produces a folder builds it under a
``.partial`` name and renames it when complete, then appends its line to
``history.jsonl``. A step counts as done only when its history line exists, so a
resumed run redoes exactly the steps that had not finished, and throws away their
partial folders first. One finished step is redone too: a design step whose line says
``halted`` (it stopped the run, see ``design.max_fallbacks``); its new line is appended
and, being the latest, is the one that counts.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from typing import Any

from envengineer.fileio import append_jsonl, iter_jsonl

class Step(str, Enum):
    """The resume protocol's steps: the ``step`` of every ``history.jsonl`` line, in the order a run records them.

    A round's steps are ``generate``, ``train``, ``eval``, ``bench`` (when due), ``design`` (not after the last
    round) and ``round_end``; ``pretrain`` and ``base_eval`` come once, before round 0. A step is done when the
    history holds its line (:meth:`RunDir.done`); readers (the suite, the report, trackers) count the same names.
    """

    PRETRAIN = "pretrain"
    BASE_EVAL = "base_eval"
    GENERATE = "generate"
    TRAIN = "train"
    EVAL = "eval"
    BENCH = "bench"
    DESIGN = "design"
    ROUND_END = "round_end"

    def __str__(self) -> str:
        return self.value


#: Every step's name, in order.
STEPS = tuple(step.value for step in Step)


def as_step(step: Step | str) -> Step:
    """``step`` as a :class:`Step`; an unknown name is an error naming the known ones (a typo never reads as "not done")."""
    try:
        return Step(step)
    except ValueError:
        raise ValueError(f"unknown run step {step!r}; the steps are {', '.join(STEPS)}") from None


def clock() -> tuple[float, float]:
    """Now, for :meth:`RunDir.record`: (monotonic wall seconds, this process's CPU seconds)."""
    return time.monotonic(), time.process_time()


class RunDir:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._history: list[dict[str, Any]] | None = None  # read once, then appended to

    # ---------------------------------------------------------------- layout
    @property
    def run_yaml(self) -> Path:
        return self.path / "run.yaml"

    @property
    def history_path(self) -> Path:
        return self.path / "history.jsonl"

    def round_dir(self, round: int) -> Path:
        return self.path / f"round-{round:02d}"

    @property
    def base_dir(self) -> Path:
        return self.path / "base"

    def stage_dir(self, round: int | None) -> Path:
        """``base/`` (``round`` None: the starting policy) or ``round-NN/``."""
        return self.base_dir if round is None else self.round_dir(round)

    def config_path(self, round: int) -> Path:
        """The generator config round ``round`` trains on."""
        return self.round_dir(round) / "config.yaml"

    def train_set(self, round: int) -> Path:
        return self.round_dir(round) / "train.jsonl"

    def train_dir(self, round: int) -> Path:
        """What the trainer wrote for round ``round`` (its checkpoint, curves, details)."""
        return self.round_dir(round) / "train"

    def train_details(self, round: int) -> Path:
        """The training details the T context module shows (``full`` and ``bookkeeping``)."""
        return self.train_dir(round) / "details.json"

    def rollouts(self, round: int) -> Path:
        """The training signal: one line per training prompt the trainer sampled (:mod:`envengineer.loop.signal`)."""
        return self.train_dir(round) / "rollouts.jsonl"

    def drawn(self, round: int) -> Path:
        """Instances the trainer drew beyond ``train.jsonl`` (``budget_mode: kept_prompts``)."""
        return self.train_dir(round) / "drawn.jsonl"

    def signal(self, round: int) -> Path:
        """``rollouts.jsonl`` aggregated by the task's groupings (written by the train step)."""
        return self.train_dir(round) / "signal.json"

    def curves(self, round: int) -> Path:
        return self.train_dir(round) / "curves.jsonl"

    def checkpoint(self, round: int) -> Path:
        """The policy that round ``round`` trained (a Hugging Face model directory): the folder its trainer
        returned, as the train step recorded it (relative to ``train/``, or absolute), else ``train/checkpoint``."""
        line = self.done("train", round)
        recorded = line.get("checkpoint") if line else None
        if isinstance(recorded, str) and recorded:
            path = Path(recorded)
            return path if path.is_absolute() else self.train_dir(round) / path
        return self.train_dir(round) / "checkpoint"

    def dry_run_dir(self) -> Path:
        """What ``envengineer run --dry-run`` prepared for round 0's training."""
        return self.round_dir(0) / "dry-run"

    def eval_dir(self, round: int | None) -> Path:
        """The validation set's evaluation of round ``round``'s policy (None: the starting policy)."""
        return self.stage_dir(round) / "eval"

    def eval_summary(self, round: int | None) -> Path:
        return self.eval_dir(round) / "summary.json"

    def eval_examples(self, round: int | None) -> Path:
        """The failing examples the F context module shows."""
        return self.eval_dir(round) / "examples.jsonl"

    def eval_verdicts(self, round: int | None) -> Path:
        return self.eval_dir(round) / "verdicts.jsonl"

    def bench_dir(self, round: int | None, name: str) -> Path:
        """Benchmark ``name``'s evaluation of round ``round``'s policy (None: the starting policy)."""
        return self.stage_dir(round) / "bench" / name

    def bench_names(self, round: int | None) -> list[str]:
        """The benchmarks evaluated (finished folders) for round ``round``'s policy (None: the starting policy)."""
        root = self.stage_dir(round) / "bench"
        if not root.is_dir():
            return []
        return sorted(sub.name for sub in root.iterdir() if sub.is_dir() and not sub.name.endswith(".partial"))

    def rounds_on_disk(self) -> list[int]:
        """The round numbers with a ``round-NN`` folder, in order (a reader meets partial runs)."""
        found = []
        for folder in self.path.glob("round-*"):
            match = re.fullmatch(r"round-(\d+)", folder.name)
            if match and folder.is_dir():
                found.append(int(match[1]))
        return sorted(found)

    def engineer_dir(self, round: int) -> Path:
        """The design step after round ``round`` (prompt, response, proposal, projection, note)."""
        return self.round_dir(round) / "engineer"

    def projection(self, round: int) -> Path:
        return self.engineer_dir(round) / "projection.yaml"

    def summary_note(self, round: int) -> Path:
        """The engineer's S note after round ``round``."""
        return self.engineer_dir(round) / "summary.md"

    def base_policy(self) -> Path | None:
        """The starting weights the run used, as its ``pretrain`` step recorded them (None before)."""
        line = self.done("pretrain")
        base = line.get("base") if line else None
        return Path(base) if isinstance(base, str) and base else None

    # --------------------------------------------------------------- history
    def history(self) -> list[dict[str, Any]]:
        if self._history is None:
            self._history = list(iter_jsonl(self.history_path)) if self.history_path.exists() else []
        return self._history

    def done(self, step: Step | str, round: int | None = None) -> dict[str, Any] | None:
        """The step's latest history line (a redone step appends a newer one), or None."""
        step = as_step(step)
        for line in reversed(self.history()):
            if line.get("step") == step and line.get("round") == round:
                return line
        return None

    def record(self, step: Step | str, round: int | None, started: float | tuple[float, float], **fields: Any) -> dict[str, Any]:
        """Append a step's history line. ``started``: :func:`clock` when the step began (the line gets its
        wall seconds ``duration_s`` and this process's CPU seconds ``cpu_s``, all threads), or a
        ``time.monotonic()`` (wall seconds only)."""
        wall, cpu = started if isinstance(started, tuple) else (started, None)
        line = {
            "round": round,
            "step": as_step(step).value,
            "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "duration_s": round_(time.monotonic() - wall),
            **({} if cpu is None else {"cpu_s": round_(time.process_time() - cpu)}),
            **fields,
        }
        append_jsonl(self.history_path, line)
        self.history().append(line)
        return line

    def clean(self) -> list[Path]:
        """Remove what a killed run left half-built: ``*.partial`` folders and atomic-write temp files."""
        removed = []
        if not self.path.exists():
            return removed
        for partial in sorted(self.path.rglob("*.partial"), reverse=True):
            if partial.is_dir():
                shutil.rmtree(partial, ignore_errors=True)
                removed.append(partial)
        for tmp in self.path.rglob(".*.tmp"):
            if tmp.is_file():
                tmp.unlink(missing_ok=True)
                removed.append(tmp)
        return removed

    # -------------------------------------------------------- folder steps
    @contextmanager
    def building(self, target: Path) -> Iterator[Path]:
        """Yield ``target.partial`` (emptied); rename it to ``target`` when the block succeeds."""
        partial = target.with_name(target.name + ".partial")
        if partial.exists():
            shutil.rmtree(partial)
        partial.mkdir(parents=True)
        yield partial
        if target.exists():
            shutil.rmtree(target)
        partial.rename(target)


def round_(value: float) -> float:
    return float(f"{value:.3f}")
