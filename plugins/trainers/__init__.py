"""Built-in trainers: GRPO through TRL on one machine, and through verl on GPU clusters."""

from envengineer.hookspecs import hookimpl
from envengineer.training import TrainRequest, TrainResult

__all__ = ["TrainRequest", "TrainResult", "register_trainers"]


@hookimpl
def register_trainers(register):
    from envengineer.plugins.trainers.trl_grpo import TrlGrpoTrainer
    from envengineer.plugins.trainers.verl_grpo import VerlGrpoTrainer

    register(TrlGrpoTrainer)
    register(VerlGrpoTrainer)
