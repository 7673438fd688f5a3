"""Running one verl job: the child process, its log, its metrics followed into ``curves.jsonl``.

verl's file logger writes ``{"step": N, "data": {...}}`` lines; :class:`MetricsFollower` turns the
training steps among them into the curve lines the reports read, while the job runs.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envengineer.api import CURVE_KEYS, EnvEngineerError
from envengineer.processes import KILL_GRACE_S, Stalled, end_group, file_sizes, sigterm_as_interrupt, start, watch  # core-internal: process groups

#: verl's file-logger keys -> curves.jsonl keys (the first key present wins).
METRIC_KEYS: dict[str, tuple[str, ...]] = {
    "reward_mean": ("critic/score/mean", "critic/rewards/mean"),
    "kl": ("actor/kl_loss",),
    "completion_length": ("response_length/mean",),
    "loss": ("actor/pg_loss",),
    "learning_rate": ("actor/lr",),
    # beyond CURVE_KEYS: diagnostics
    "grad_norm": ("actor/grad_norm",),
    "throughput": ("perf/throughput",),
    "step_seconds": ("timing_s/step",),
    "epoch": ("training/epoch",),
}

class LaunchOptions(BaseModel):
    """The ``verl`` trainer's options about launching and watching the job (beside verl's own settings)."""

    model_config = ConfigDict(extra="forbid")

    stall_timeout_minutes: float = Field(
        30, ge=0, description="fail the round when neither verl.log nor the metrics file grows for this long (0: never)",
    )
    kill_grace_seconds: float = Field(30, ge=0, description="between SIGTERM and SIGKILL when the job's process group is ended")
    check_nodes: bool = Field(True, description="before a multi-node round, check every Ray node (Python environment, model, run directory)")

    @property
    def stall_timeout_s(self) -> float | None:
        return self.stall_timeout_minutes * 60 or None


class TrainingFailed(EnvEngineerError):
    """The training job failed (its log's tail is in the message)."""


def log_tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def curve_line(step: int, data: dict[str, Any]) -> dict[str, Any]:
    """One line of curves.jsonl from one line of verl's file logger."""
    line: dict[str, Any] = {"step": int(step)}
    for key in CURVE_KEYS[1:]:
        line[key] = None
    for target, sources in METRIC_KEYS.items():
        for source in sources:
            value = data.get(source)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                line[target] = float(value)
                break
    return line


class MetricsFollower:
    """Reads verl's file-logger lines as they are written and appends curve lines to ``curves.jsonl``.

    Only training steps become curve lines: validation-only lines (``val-core/...`` keys and
    no training metrics) are skipped. A line still being written (no newline yet) waits.
    """

    def __init__(self, source: Path, curves: Path) -> None:
        self.source, self.curves = Path(source), Path(curves)
        self.offset = 0
        self.lines: list[dict[str, Any]] = []

    def poll(self) -> list[dict[str, Any]]:
        if not self.source.exists():
            return []
        with self.source.open("rb") as handle:
            handle.seek(self.offset)
            chunk = handle.read()
        end = chunk.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        new = []
        for raw in chunk[: end + 1].splitlines():
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            data, step = entry.get("data"), entry.get("step")
            if not isinstance(data, dict) or not isinstance(step, int):
                continue
            line = curve_line(step, data)
            if line["reward_mean"] is None and line["loss"] is None:
                continue  # validation only
            new.append(line)
        if new:
            with self.curves.open("a") as handle:
                for line in new:
                    handle.write(json.dumps(line) + "\n")
            self.lines.extend(new)
        return new


def run_job(
    command: list[str], env: dict[str, str], paths: dict[str, Path], steps: int, name: str, *,
    stall_timeout_s: float | None = None, grace_s: float = KILL_GRACE_S,
) -> list[dict[str, Any]]:
    """Run verl, its output to ``verl.log``, its metrics into ``curves.jsonl`` as they come; the curve lines.

    The job runs in a process group of its own (:mod:`envengineer.processes`): when it fails, stalls
    (neither ``verl.log`` nor the metrics file grows for ``stall_timeout_s``), or this process is interrupted
    (Ctrl-C, SIGTERM), the whole group is ended, Ray's and vLLM's workers with it."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    for key in ("metrics", "curves"):
        paths[key].unlink(missing_ok=True)
    paths["curves"].write_text("")
    follower = MetricsFollower(paths["metrics"], paths["curves"])
    with paths["log"].open("wb") as log, sigterm_as_interrupt(), Progress(
        TextColumn("verl GRPO"), BarColumn(), MofNCompleteColumn(), TextColumn("{task.fields[reward]}"), TimeElapsedColumn(),
        transient=True,
    ) as progress:
        log.write(("$ " + shlex.join(command) + "\n").encode())
        log.flush()
        task = progress.add_task("train", total=steps or None, reward="")
        process = start(command, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(paths["log"].parent))
        try:
            returncode = watch(process, activity=lambda: file_sizes(paths["log"], paths["metrics"]), stall_timeout_s=stall_timeout_s,
                               on_poll=lambda: _advance(progress, task, follower.poll()))
        except Stalled as stalled:
            end_group(process, grace_s)
            raise TrainingFailed(
                f"trainer.verl: {name} stalled: {stalled} in {paths['log']} or {paths['metrics']} "
                f"(trainer.verl.stall_timeout_minutes: {stalled_minutes(stall_timeout_s)}); the job and every process it "
                f"started were ended. The end of {paths['log']}:\n" + log_tail(paths["log"])
            ) from None
        except BaseException:
            end_group(process, grace_s)
            raise
        end_group(process, grace_s)  # what the job left behind in its group
        _advance(progress, task, follower.poll())
    if returncode != 0:
        raise TrainingFailed(
            f"trainer.verl: {name} exited with code {returncode}; the end of {paths['log']}:\n"
            + log_tail(paths["log"])
        )
    if not follower.lines:
        raise TrainingFailed(f"trainer.verl: verl finished but logged no training step to {paths['metrics']}; see {paths['log']}")
    return follower.lines


def stalled_minutes(seconds: float | None) -> str:
    return "off" if not seconds else f"{seconds / 60:g}"


def _advance(progress: Any, task: Any, new: list[dict[str, Any]]) -> None:
    if new:
        reward = new[-1].get("reward_mean")
        progress.update(task, completed=new[-1]["step"], reward="" if reward is None else f"reward {reward:.3f}")
