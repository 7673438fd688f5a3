"""The ``tensorboard`` tracker: TensorBoard event files under the run directory (``tb/`` by default).

Written with TensorBoard's own event-file writer (no torch, no TensorFlow): scalars at step = the
round (the base policy's at 0), the config and the engineer's notes as text, the run config as
hyperparameters (the HPARAMS dashboard). The ``trl`` trainer writes its step metrics into the same
directory through TRL's ``report_to``, at the round's step offset; other trainers' ``curves.jsonl``
is written as ``curves/*`` at the same global steps. ``tensorboard --logdir runs/<name>/tb``.
"""

from __future__ import annotations

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
    hookimpl,
    hyperparameters,
    missing_package,
    needs_curves,
    notes_text,
    round_scalars,
)


class TensorBoardOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    log_dir: str | None = Field(None, description="where the event files go (default: tb/ in the run directory; a relative path is "
                                "taken from the run directory)")


def _code(text: str) -> str:
    """``text`` as a Markdown code block (TensorBoard's text dashboard renders Markdown)."""
    return "\n".join("    " + line for line in text.splitlines())


class TensorBoardTracker(Tracker):
    name: ClassVar[str] = "tensorboard"
    description: ClassVar[str] = "TensorBoard event files under the run directory (tb/): rates, config, notes, hyperparameters"
    Options: ClassVar[type[BaseModel]] = TensorBoardOptions
    options: TensorBoardOptions
    extra: ClassVar[str] = "tensorboard"

    def __init__(self, options: BaseModel | None = None) -> None:
        super().__init__(options)
        self.run_name: str | None = None  # <arm>/seed-<seed>
        self.writer: Any = None
        self.log_dir: Path | None = None

    # ------------------------------------------------------------------ writing

    def _event(self, step: int, values: list[Any]) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2

        if values:
            self.writer.add_event(event_pb2.Event(wall_time=time.time(), step=int(step), summary=summary_pb2.Summary(value=values)))

    def scalars(self, values: dict[str, float], step: int) -> None:
        from tensorboard.compat.proto import summary_pb2

        self._event(step, [summary_pb2.Summary.Value(tag=tag, simple_value=value) for tag, value in values.items()])

    def text(self, tag: str, text: str, step: int) -> None:
        from tensorboard.compat.proto import summary_pb2, tensor_pb2, tensor_shape_pb2, types_pb2
        from tensorboard.plugins.text import metadata

        tensor = tensor_pb2.TensorProto(dtype=types_pb2.DT_STRING, string_val=[text.encode("utf-8")],
                                        tensor_shape=tensor_shape_pb2.TensorShapeProto(dim=[tensor_shape_pb2.TensorShapeProto.Dim(size=1)]))
        meta = metadata.create_summary_metadata(display_name=tag, description="")
        self._event(step, [summary_pb2.Summary.Value(tag=tag, metadata=meta, tensor=tensor)])

    def flush(self) -> None:
        if self.writer is not None:
            self.writer.flush()

    # ------------------------------------------------------------------ the hooks

    @hookimpl
    def on_run_start(self, run_dir: Any, info: dict) -> None:
        try:
            from tensorboard.plugins.hparams import summary_v2 as hparams
            from tensorboard.summary.writer.event_file_writer import EventFileWriter
        except ImportError:
            raise missing_package(self.name, "tensorboard", self.extra) from None
        given = Path(self.options.log_dir).expanduser() if self.options.log_dir else None
        self.log_dir = (given if given is not None and given.is_absolute() else Path(run_dir.path) / (given or "tb")).resolve()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.run_name = display_name(info)
        self.writer = EventFileWriter(str(self.log_dir))
        self._event(0, list(hparams.hparams_pb(hyperparameters(info), trial_id=display_name(info)).value))
        self.text("run/config", _code(yaml.safe_dump(info.get("config") or {}, sort_keys=False)), 0)
        self.flush()

    @hookimpl
    def on_benchmark_end(self, benchmark: dict) -> None:
        self.scalars(benchmark_scalars(benchmark), benchmark_step(benchmark))
        self.flush()

    @hookimpl
    def on_design_end(self, round: int, design: dict) -> None:
        self.scalars(design_scalars(design), round)
        self.text("engineer/notes", notes_text(design), round)
        self.flush()

    @hookimpl
    def on_round_end(self, round: int, metrics: dict) -> None:
        self.scalars(round_scalars(metrics), round)
        if metrics.get("config_yaml"):
            self.text("config/yaml", _code(metrics["config_yaml"]), round)
        if needs_curves(metrics, self.name):
            for step, values in curve_points(metrics):
                self.scalars(values, step)
        self.flush()

    @hookimpl
    def on_run_end(self, metrics: dict) -> None:
        self.close()

    def trainer_settings(self) -> dict[str, Any] | None:
        return {"log_dir": str(self.log_dir), "name": self.run_name} if self.writer is not None else None

    def close(self) -> None:
        if self.writer is not None:
            writer, self.writer = self.writer, None
            writer.close()
