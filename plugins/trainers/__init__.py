"""Built-in trainers: GRPO through TRL on one machine (verl comes with its own plugin)."""

from envengineer.hookspecs import hookimpl
from envengineer.training import TrainRequest, TrainResult

__all__ = ["TrainRequest", "TrainResult", "register_trainers"]


@hookimpl
def register_trainers(register):
    from envengineer.plugins.trainers.trl_grpo import TrlGrpoTrainer

    register(TrlGrpoTrainer)
