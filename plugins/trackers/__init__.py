"""Built-in experiment trackers: TensorBoard, Weights & Biases, MLflow (docs/trackers.md).

Each is chosen per run by the run config's ``trackers`` list and imports its package only when a
run starts it, so ``import envengineer`` stays light.
"""

from envengineer.api import hookimpl


@hookimpl
def register_trackers(register):
    from envengineer.plugins.trackers.mlflow_tracker import MlflowTracker
    from envengineer.plugins.trackers.tensorboard_tracker import TensorBoardTracker
    from envengineer.plugins.trackers.wandb_tracker import WandbTracker

    register(TensorBoardTracker)
    register(WandbTracker)
    register(MlflowTracker)
