"""Built-in trainers: GRPO through TRL on one machine, and through verl on GPU clusters."""

from envengineer.api import TrainRequest, TrainResult, hookimpl

__all__ = ["TrainRequest", "TrainResult", "doctor_checks", "register_trainers"]


@hookimpl
def register_trainers(register):
    from envengineer.plugins.trainers.trl_grpo import TrlGrpoTrainer
    from envengineer.plugins.trainers.verl_grpo import VerlGrpoTrainer

    register(TrlGrpoTrainer)
    register(VerlGrpoTrainer)


@hookimpl
def doctor_checks(components):
    """verl's needs (in the Python that runs it), for ``envengineer doctor`` or a run with the ``verl`` trainer; a custom
    ``module`` (a recipe's main, a stand-in) is trusted to know its own."""
    from envengineer.plugins.trainers.verl_doctor import checks
    from envengineer.plugins.trainers.verl_grpo import VerlGrpoTrainer

    if components is None:
        return checks(VerlGrpoTrainer())
    for component in components:
        if isinstance(component, VerlGrpoTrainer) and component.options.module.startswith("verl."):
            return checks(component)
    return []
