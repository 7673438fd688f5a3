"""The ``mlflow`` tracker: one MLflow run per envengineer run.

By default the tracking store is a local SQLite database under the run directory
(``<run>/mlflow/mlflow.db``, artifacts in ``<run>/mlflow/artifacts``: MLflow 3 refuses its old
``./mlruns`` file store unless told otherwise); ``MLFLOW_TRACKING_URI`` (or the ``tracking_uri``
option) points it elsewhere, a server included, whose credentials MLflow reads from its own
environment variables. The run is named ``<arm>/seed-<seed>`` and tagged with the suite table, the
arm, the seed, the task, the engineer and the trainer; its params are the run config (flattened),
its metrics the rates, knobs, signal and engineer tokens at step = the round, its artifacts
``run.yaml``, each round's ``config/round-NN.yaml`` and the engineer's ``engineer/round-NN.md``.
The ``trl`` trainer logs its step metrics into the same run (TRL's ``report_to``, at the round's
step offset); other trainers' ``curves.jsonl`` go in as ``curves/*`` at the same global steps.
The run's id is kept in ``<run>/trackers/mlflow.json``: a resumed run continues it.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any, ClassVar

import yaml
from pydantic import BaseModel, ConfigDict, Field

from envengineer.api import (
    Tracker,
    benchmark_scalars,
    benchmark_step,
    curve_points,
    design_scalars,
    display_name,
    group_name,
    hookimpl,
    hyperparameters,
    missing_package,
    needs_curves,
    notes_text,
    read_state,
    redacted,
    round_scalars,
    write_state,
)

#: What MLflow accepts in a metric or param name (others become _).
_INVALID = re.compile(r"[^/\w.\- :]")

STATUS = {"finished": "FINISHED", "failed": "FAILED", "interrupted": "KILLED"}


def _key(name: str) -> str:
    return _INVALID.sub("_", name)


class MlflowOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tracking_uri: str | None = Field(
        None, description="MLflow tracking URI (default: MLFLOW_TRACKING_URI, else a SQLite store in the run directory's mlflow/)",
    )
    experiment: str | None = Field(None, description="MLflow experiment (default: MLFLOW_EXPERIMENT_NAME, else envengineer)")


class MlflowTracker(Tracker):
    name: ClassVar[str] = "mlflow"
    description: ClassVar[str] = "an MLflow run per run (a SQLite store under the run directory, or MLFLOW_TRACKING_URI)"
    Options: ClassVar[type[BaseModel]] = MlflowOptions
    options: MlflowOptions
    extra: ClassVar[str] = "mlflow"

    def __init__(self, options: BaseModel | None = None) -> None:
        super().__init__(options)
        self.run_name: str | None = None  # <arm>/seed-<seed>
        self.client: Any = None
        self.run_id: str | None = None
        self.experiment_id: str | None = None
        self.tracking_uri: str | None = None
        self.own = False
        self.ended = False

    # ------------------------------------------------------------------ writing

    def metrics(self, values: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        stamp = int(time.time() * 1000)
        batch = [Metric(_key(key), value, stamp, int(step)) for key, value in values.items()]
        for start in range(0, len(batch), 1000):
            self.client.log_batch(self.run_id, metrics=batch[start:start + 1000], synchronous=True)

    def _params(self, params: dict[str, Any]) -> None:
        from mlflow.entities import Param
        from mlflow.utils.validation import MAX_PARAM_VAL_LENGTH, MAX_PARAMS_TAGS_PER_BATCH

        existing = self.client.get_run(self.run_id).data.params  # params are immutable: a resumed run adds what is new
        fresh = [Param(_key(k), str(v)[:MAX_PARAM_VAL_LENGTH]) for k, v in params.items() if _key(k) not in existing]
        for start in range(0, len(fresh), MAX_PARAMS_TAGS_PER_BATCH):
            self.client.log_batch(self.run_id, params=fresh[start:start + MAX_PARAMS_TAGS_PER_BATCH], synchronous=True)

    # ------------------------------------------------------------------ the hooks

    @hookimpl
    def on_run_start(self, run_dir: Any, info: dict) -> None:
        try:
            import mlflow
            from mlflow.tracking import MlflowClient
        except ImportError:
            raise missing_package(self.name, "mlflow", self.extra) from None
        self.run_name = display_name(info)
        folder = Path(run_dir.path).resolve() / "mlflow"
        uri = self.options.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI")
        local = not uri
        if local:
            folder.mkdir(parents=True, exist_ok=True)
            uri = f"sqlite:///{folder / 'mlflow.db'}"
        self.tracking_uri = uri
        given = os.environ.get("MLFLOW_TRACKING_URI")
        mlflow.set_tracking_uri(uri)  # the fluent API (and TRL's MLflow callback) log to this store
        # MLflow 3 also exports the URI as MLFLOW_TRACKING_URI: the next run in this process (a suite) must not log here
        if given is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = given
        self.client = MlflowClient(uri)
        name = self.options.experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or "envengineer"
        experiment = self.client.get_experiment_by_name(name)
        self.experiment_id = experiment.experiment_id if experiment is not None else self.client.create_experiment(
            name, artifact_location=(folder / "artifacts").as_uri() if local else None)
        active = mlflow.active_run()
        if active is not None:  # a run the caller started: log into it, leave it open
            self.run_id, self.own = active.info.run_id, False
        else:
            resume = read_state(run_dir, self.name).get("run_id")
            if resume is not None:
                try:
                    self.client.get_run(resume)
                except Exception:  # noqa: BLE001 - not in this store: start afresh
                    resume = None
            run = mlflow.start_run(run_id=resume) if resume else mlflow.start_run(experiment_id=self.experiment_id, run_name=display_name(info))
            self.run_id, self.own = run.info.run_id, True
            self.experiment_id = run.info.experiment_id
            # the id, never a URI that may hold credentials (user:password@host)
            write_state(run_dir, self.name, {"run_id": self.run_id, "experiment_id": self.experiment_id,
                                             **({"tracking_uri": uri} if "@" not in uri else {})})
        suite = info.get("suite") or {}
        tags = {"envengineer.run": info.get("name"), "envengineer.seed": info.get("seed"), "envengineer.task": info.get("task"),
                "envengineer.engineer": info.get("engineer"), "envengineer.trainer": info.get("trainer"),
                "envengineer.run_dir": str(run_dir.path), "envengineer.table": group_name(info), "envengineer.arm": suite.get("row")}
        for key, value in tags.items():
            if value is not None:
                self.client.set_tag(self.run_id, key, str(value))
        self._params(hyperparameters(info))
        self.client.log_text(self.run_id, yaml.safe_dump(redacted(info.get("config") or {}), sort_keys=False), "run.yaml")

    @hookimpl
    def on_benchmark_end(self, benchmark: dict) -> None:
        self.metrics(benchmark_scalars(benchmark), benchmark_step(benchmark))

    @hookimpl
    def on_design_end(self, round: int, design: dict) -> None:
        self.metrics(design_scalars(design), round)
        self.client.log_text(self.run_id, notes_text(design) + "\n", f"engineer/round-{round:02d}.md")

    @hookimpl
    def on_round_end(self, round: int, metrics: dict) -> None:
        self.metrics(round_scalars(metrics), round)
        if metrics.get("config_yaml"):
            self.client.log_text(self.run_id, metrics["config_yaml"], f"config/round-{round:02d}.yaml")
        if needs_curves(metrics, self.name):
            for step, values in curve_points(metrics):
                self.metrics(values, step)

    @hookimpl
    def on_run_end(self, metrics: dict) -> None:
        self.client.set_tag(self.run_id, "envengineer.status", str(metrics.get("status")))
        self._end(STATUS.get(str(metrics.get("status")), "FAILED"))

    def _end(self, status: str) -> None:
        if not self.own or self.ended:
            return
        import mlflow

        self.ended = True
        try:
            mlflow.flush_async_logging()  # what TRL's callback logged asynchronously, if it did
        except Exception:  # noqa: BLE001 - older MLflow
            pass
        active = mlflow.active_run()
        if active is not None and active.info.run_id == self.run_id:
            mlflow.end_run(status=status)
        else:
            self.client.set_terminated(self.run_id, status=status)

    def trainer_settings(self) -> dict[str, Any] | None:
        if self.run_id is None or self.ended:
            return None
        return {"tracking_uri": self.tracking_uri, "run_id": self.run_id, "experiment_id": self.experiment_id, "name": self.run_name}

    def close(self) -> None:
        if self.run_id is not None:
            self._end("FAILED")
