"""How ``envengineer suite`` runs a suite's runs: the ``launcher:`` section of a manifest and the
``--launcher``/``--address``/``--slurm-*`` options, as one checked model (the options win over the
manifest). The launchers themselves are in :mod:`envengineer.suite_launch`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envengineer.errors import ConfigError

LAUNCHERS = ("local", "ray", "slurm")


class LauncherOptions(BaseModel):
    """Where a suite's runs go and what each asks for. Resources default to what the run's trainer
    and policy declare (e.g. verl: ``trainer.n_gpus_per_node`` GPUs on ``trainer.nnodes`` nodes)."""

    model_config = ConfigDict(extra="forbid")

    name: Literal["local", "ray", "slurm"] = Field("local", description="local: this machine (--jobs N); ray: a Ray cluster; slurm: Slurm through submitit")
    gpus_per_node: int | None = Field(None, ge=0, description="GPUs each run asks for (default: its trainer's and policy's)")
    cpus: int | None = Field(None, ge=1, description="CPUs each run asks for (default: its trainer's and policy's)")
    poll_seconds: float = Field(10.0, gt=0, description="how often the suite looks at the runs it follows")
    # ray
    address: str | None = Field(None, description="ray: the cluster (e.g. auto, or ray://head:10001); default: the one started on this machine, else a new local one")
    namespace: str = Field("envengineer", min_length=1, description="ray: the namespace the runs' actors are named in")
    # slurm
    partition: str | None = Field(None, description="slurm: the partition (default: the cluster's)")
    time: int = Field(24 * 60, ge=1, description="slurm: each run's time limit in minutes (a run cut off resumes on the next invocation)")
    account: str | None = Field(None, description="slurm: the account charged")
    array: bool = Field(False, description="slurm: submit the runs that ask for the same resources as one job array")
    array_parallelism: int = Field(256, ge=1, description="slurm: at most this many of an array's runs at once")
    setup: list[str] = Field(default_factory=list, description="slurm: shell lines run before each run (e.g. module load, source venv/bin/activate)")
    sbatch: dict[str, Any] = Field(default_factory=dict, description="slurm: further #SBATCH options by name (e.g. {qos: high, mem: 200G})")
    executor: Literal["slurm", "local"] = Field("slurm", description="slurm: submitit's executor; local runs the same jobs on this machine (a rehearsal of the Slurm path)")


def launcher_options(section: Mapping[str, Any] | None, overrides: Mapping[str, Any] | None = None, where: str = "") -> LauncherOptions:
    """The manifest's section with the command line's options on top (None values: not given);
    errors read ``<where>: launcher.<field>: ...``."""
    data = dict(section or {})
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        return LauncherOptions.model_validate(data)
    except ValidationError as exc:
        from envengineer.registry import format_validation_error

        message = format_validation_error(exc, "launcher")
        raise ConfigError(f"{where}: {message}" if where else message) from None
