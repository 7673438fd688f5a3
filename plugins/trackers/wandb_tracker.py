"""The ``wandb`` tracker: one Weights & Biases run per envengineer run.

The run is named ``<arm>/seed-<seed>`` and grouped by its suite table; its config is the run config
(under ``run``). Rates, config knobs, training signal and the engineer's tokens are logged against
the ``round`` axis, the engineer's notes and the round's config YAML as tables. The ``trl`` trainer
logs its step metrics into the same run (TRL's ``report_to``, ``train/*`` against
``train/global_step``, offset per round); other trainers' ``curves.jsonl`` go in as ``curves/*``
against ``curves/step``.

``WANDB_MODE=offline`` writes the run under the run directory (``<run>/wandb/offline-run-*``;
``wandb sync`` uploads it later). Online, the key comes from the environment (``WANDB_API_KEY``) or
``wandb login``; without one the tracker is disabled with a warning, never prompting. The run's id
is kept in ``<run>/trackers/wandb.json`` so that a resumed run continues the same W&B run
(``WANDB_RUN_ID`` overrides it).
"""

from __future__ import annotations

import os
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field

from envengineer.api import (
    Tracker,
    TrackerUnavailable,
    benchmark_scalars,
    benchmark_step,
    curve_points,
    design_scalars,
    display_name,
    group_name,
    hookimpl,
    missing_package,
    needs_curves,
    read_state,
    redacted,
    round_scalars,
    write_state,
)

#: Metric prefixes logged against the ``round`` axis.
ROUND_PREFIXES = ("validation", "signal", "round", "config", "engineer", "bench", "base")


def _new_id() -> str:
    """A fresh W&B run id: 8 lowercase letters and digits."""
    import secrets
    import string

    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))


class WandbOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    project: str | None = Field(None, description="W&B project (default: WANDB_PROJECT, else envengineer)")
    entity: str | None = Field(None, description="W&B entity (default: WANDB_ENTITY, else your default entity)")
    group: str | None = Field(None, description="W&B group (default: the run's suite table)")
    tags: list[str] = Field(default_factory=list, description="W&B tags added to the run's own (task, engineer, trainer)")
    mode: Literal["online", "offline", "disabled"] | None = Field(
        None, description="online, offline (written under the run directory; wandb sync uploads it) or disabled "
        "(default: WANDB_MODE, else online)",
    )


class WandbTracker(Tracker):
    name: ClassVar[str] = "wandb"
    description: ClassVar[str] = "a Weights & Biases run per run (offline under the run directory with WANDB_MODE=offline)"
    Options: ClassVar[type[BaseModel]] = WandbOptions
    options: WandbOptions
    extra: ClassVar[str] = "wandb"

    def __init__(self, options: BaseModel | None = None) -> None:
        super().__init__(options)
        self.run: Any = None
        self.own = False  # started here (finished here); False: a run already active in this process
        self.mode = "online"
        self.run_dir: str | None = None
        self.notes: list[list[Any]] = []
        self.configs: list[list[Any]] = []

    @hookimpl
    def on_run_start(self, run_dir: Any, info: dict) -> None:
        try:
            import wandb
        except ImportError:
            raise missing_package(self.name, "wandb", self.extra) from None
        o = self.options
        self.mode = o.mode or os.environ.get("WANDB_MODE") or "online"
        if self.mode == "dryrun":
            self.mode = "offline"
        self.run_dir = str(run_dir.path)
        if wandb.run is not None:  # a run the caller started: log into it, leave it open
            self.run, self.own = wandb.run, False
        else:
            if self.mode not in ("offline", "disabled") and not wandb.login(prompt=False, verify=False):
                raise TrackerUnavailable(
                    "no W&B API key: set WANDB_API_KEY or run `wandb login`, or set WANDB_MODE=offline to write the run "
                    "under the run directory (wandb sync uploads it later)"
                )
            state = read_state(run_dir, self.name)
            run_id = os.environ.get("WANDB_RUN_ID") or state.get("run_id") or _new_id()
            tags = [t for t in (info.get("task"), info.get("engineer"), info.get("trainer")) if t] + list(o.tags)
            self.run = wandb.init(
                project=o.project or os.environ.get("WANDB_PROJECT") or "envengineer",
                entity=o.entity or os.environ.get("WANDB_ENTITY") or None,
                group=o.group or group_name(info),
                name=display_name(info),
                job_type="envengineer",
                tags=list(dict.fromkeys(tags)),
                dir=self.run_dir,
                id=run_id,
                resume="allow",
                mode=self.mode,
                config={"run": redacted(info.get("config") or {}), "suite": info.get("suite"), "run_dir": self.run_dir},
            )
            self.own = True
            write_state(run_dir, self.name, {"run_id": self.run.id, "project": self.run.project, "mode": self.mode})
        self.run.define_metric("round")
        for prefix in ROUND_PREFIXES:
            self.run.define_metric(f"{prefix}/*", step_metric="round")
        self.run.define_metric("curves/step")
        self.run.define_metric("curves/*", step_metric="curves/step")

    @hookimpl
    def on_benchmark_end(self, benchmark: dict) -> None:
        self.run.log({"round": benchmark_step(benchmark), **benchmark_scalars(benchmark)})

    @hookimpl
    def on_design_end(self, round: int, design: dict) -> None:
        import wandb

        self.notes.append([round, design.get("engineer"), bool(design.get("fallback")), design.get("reason") or "", design.get("notes") or ""])
        table = wandb.Table(columns=["round", "engineer", "fallback", "reason", "notes"], data=[list(row) for row in self.notes])
        self.run.log({"round": round, **design_scalars(design), "engineer/notes": table})

    @hookimpl
    def on_round_end(self, round: int, metrics: dict) -> None:
        import wandb

        data: dict[str, Any] = {"round": round, **round_scalars(metrics)}
        if metrics.get("config_yaml"):
            self.configs.append([round, metrics["config_yaml"]])
            data["config/yaml"] = wandb.Table(columns=["round", "config"], data=[list(row) for row in self.configs])
        self.run.log(data)
        if needs_curves(metrics, self.name):
            for step, values in curve_points(metrics):
                self.run.log({"curves/step": step, **values})

    @hookimpl
    def on_run_end(self, metrics: dict) -> None:
        self.run.summary["status"] = metrics.get("status")
        if self.own:
            run, self.run = self.run, None
            run.finish(exit_code=0 if metrics.get("status") == "finished" else 1)

    def trainer_settings(self) -> dict[str, Any] | None:
        if self.run is None:
            return None
        return {"run_id": self.run.id, "project": self.run.project, "entity": self.run.entity or None,
                "group": self.run.group or None, "name": self.run.name, "dir": self.run_dir, "mode": self.mode}

    def close(self) -> None:
        if self.own and self.run is not None:
            run, self.run = self.run, None
            run.finish(exit_code=1)
