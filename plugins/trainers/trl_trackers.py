"""The ``trl`` trainer's own step metrics, into the run's trackers: TRL's reporting callbacks, joined across rounds.

Each round is a fresh TRL trainer whose ``global_step`` starts at 0, so the callbacks TRL's
``report_to`` would install (transformers' ``TensorBoardCallback``, ``WandbCallback``,
``MLflowCallback``) are installed as subclasses that see ``global_step`` plus the round's step
offset (the optimizer steps of the rounds before) and write into the run's own tracker runs.
``report_to`` itself stays ``none``: with a name in it, TRL's profiling timers would also log to
W&B and MLflow directly, at the round's own step (no offset), and the rounds' timings would overlap.

- ``tensorboard``: the tracker's log directory (``<run>/tb``), one more event file a round;
- ``wandb``: the W&B run the tracker started in this process (``train/*`` against ``train/global_step``);
- ``mlflow``: the MLflow run the tracker started (its active run); TRL's arguments are not logged as
  params (MLflow params are immutable, and a round's differ from the last's).

A callback that fails (the run it should write to is not active, a writer raising) stops writing
for the round with one warning; the round goes on, and the tracker then logs the round's
``curves.jsonl`` itself at the round's end (the round's ``live_trackers`` metric leaves it out).
"""

from __future__ import annotations

import copy
import logging
from typing import Any

from transformers.integrations.integration_utils import MLflowCallback, TensorBoardCallback, WandbCallback

from envengineer.api import TrainRequest, redact

logger = logging.getLogger(__name__)

#: The trackers whose runs TRL's own reporting integrations can write to.
INTEGRATIONS = ("tensorboard", "wandb", "mlflow")


class _Joined:
    """A reporting callback at the round's step offset, its errors contained."""

    tracker = ""

    def _join(self, settings: dict[str, Any], offset: int) -> None:
        self.settings, self.offset, self.failed = settings, int(offset), None

    def _guarded(self, event: str, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        if self.failed is not None:
            return None
        shifted = copy.copy(state)
        shifted.global_step = state.global_step + self.offset
        try:
            return getattr(super(), event)(args, shifted, control, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the tracker never fails the round
            self.failed = redact(f"{type(exc).__name__}: {' '.join(str(exc).split())}")
            logger.warning("tracker %s: the trl trainer stopped writing its step metrics for this round (%s); "
                           "the round's curves.jsonl goes to the tracker at the round's end instead", self.tracker, self.failed)
            return None

    def on_train_begin(self, args, state, control, **kwargs):
        return self._guarded("on_train_begin", args, state, control, **kwargs)

    def on_log(self, args, state, control, **kwargs):
        return self._guarded("on_log", args, state, control, **kwargs)

    def on_train_end(self, args, state, control, **kwargs):
        return self._guarded("on_train_end", args, state, control, **kwargs)

    def on_save(self, args, state, control, **kwargs):
        return self._guarded("on_save", args, state, control, **kwargs)

    def on_evaluate(self, args, state, control, **kwargs):
        return self._guarded("on_evaluate", args, state, control, **kwargs)

    def on_predict(self, args, state, control, **kwargs):
        return self._guarded("on_predict", args, state, control, **kwargs)


class JoinedTensorBoard(_Joined, TensorBoardCallback):
    """TRL's TensorBoard reporting into the tracker's log directory."""

    tracker = "tensorboard"

    def __init__(self, settings: dict[str, Any], offset: int) -> None:
        TensorBoardCallback.__init__(self)
        self._join(settings, offset)
        self.logging_dir = settings["log_dir"]


class JoinedWandb(_Joined, WandbCallback):
    """TRL's W&B reporting into the W&B run the tracker started in this process."""

    tracker = "wandb"

    def __init__(self, settings: dict[str, Any], offset: int) -> None:
        WandbCallback.__init__(self)
        self._join(settings, offset)

    def setup(self, args, state, model, **kwargs):
        run = self._wandb.run
        if run is None or run.id != self.settings.get("run_id"):
            raise RuntimeError(f"the run's W&B run {self.settings.get('run_id')} is not the active run in this process")
        return super().setup(args, state, model, **kwargs)


class JoinedMlflow(_Joined, MLflowCallback):
    """TRL's MLflow reporting into the tracker's MLflow run (the active run), without TRL's arguments as params."""

    tracker = "mlflow"

    def __init__(self, settings: dict[str, Any], offset: int) -> None:
        MLflowCallback.__init__(self)
        self._join(settings, offset)

    def setup(self, args, state, model):
        active = self._ml_flow.active_run()
        if active is None or active.info.run_id != self.settings.get("run_id"):
            raise RuntimeError(f"the run's MLflow run {self.settings.get('run_id')} is not the active run in this process")
        self._initialized, self._auto_end_run, self._log_artifacts = True, False, False
        self._nested_run, self._run_id, self._async_log = False, None, False


CALLBACKS = {"tensorboard": JoinedTensorBoard, "wandb": JoinedWandb, "mlflow": JoinedMlflow}
STOCK = {"tensorboard": TensorBoardCallback, "wandb": WandbCallback, "mlflow": MLflowCallback}


def joined_callbacks(request: TrainRequest) -> list[Any]:
    """A joined callback for each of the run's live trackers TRL can report to (one whose package is missing
    is left out with a warning)."""
    out = []
    for name in INTEGRATIONS:
        settings = request.trackers.get(name)
        if settings is None:
            continue
        try:
            out.append(CALLBACKS[name](settings, request.step_offset))
        except Exception as exc:  # noqa: BLE001
            logger.warning("tracker %s: the trl trainer cannot write its step metrics to it (%s); the round's curves.jsonl "
                           "goes to the tracker at the round's end instead", name, redact(f"{type(exc).__name__}: {exc}"))
    return out


def install(trainer: Any, callbacks: list[Any]) -> None:
    """Add the joined callbacks to ``trainer`` (in place of any stock one of the same integration)."""
    stock = tuple(STOCK[cb.tracker] for cb in callbacks)
    for callback in list(trainer.callback_handler.callbacks):
        if type(callback) in stock:
            trainer.callback_handler.remove_callback(callback)
    for callback in callbacks:
        trainer.add_callback(callback)


def live(callbacks: list[Any]) -> str:
    """The trackers the round's step metrics reached without a failure, as the round's ``live_trackers`` metric."""
    return ",".join(cb.tracker for cb in callbacks if cb.failed is None)
