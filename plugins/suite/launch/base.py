"""How ``envengineer suite`` runs a suite's runs: the ``launcher:`` section of a manifest and the
``--launcher``/``--address``/``--slurm-*`` options, as one checked model (the options win over the
manifest), and the interface each cluster launcher implements (:class:`Launcher`: Ray in
:mod:`envengineer.plugins.suite.launch.ray`, Slurm in :mod:`envengineer.plugins.suite.launch.slurm`). Submitting and
following the jobs is the same for all of them: :mod:`envengineer.plugins.suite.launch.jobs`."""

from __future__ import annotations

import abc
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envengineer.components import Resources
from envengineer.errors import ConfigError
from envengineer.plugins.suite.model import SuiteEntry, SuiteRun

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
    address: str | None = Field(None, description="ray: the cluster (e.g. head:6379); default: the one started on this machine, else a new local one")
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


def suite_launcher(entries: Sequence[SuiteEntry], file: Path | None = None, overrides: Mapping[str, Any] | None = None) -> LauncherOptions:
    """A suite's launcher: ``file`` (a YAML mapping with the fields of a manifest's ``launcher:``
    section) if given, else its manifests' section (two manifests that set different ones are
    refused), with the command line's ``overrides`` on top."""
    import json

    from envengineer.fileio import read_yaml

    if file is not None:
        if not Path(file).is_file():
            raise ConfigError(f"--launcher-file {file}: no such file")
        section = read_yaml(file)
        if not isinstance(section, dict):
            raise ConfigError(f"{file}: expected a mapping of launcher settings (name, partition, time, ...)")
        return launcher_options(section, overrides, where=str(file))
    sections = {json.dumps(e.launcher, sort_keys=True, default=str): e for e in entries if e.launcher}
    if len(sections) > 1:
        first, second = list(sections.values())[:2]
        raise ConfigError(f"{first.path} and {second.path} set different launcher sections; give the one to use with --launcher-file")
    entry = next(iter(sections.values()), None)
    return launcher_options(entry.launcher if entry else None, overrides, where=str(entry.path) if entry else "")


PENDING, RUNNING, ENDED, UNKNOWN = "pending", "running", "ended", "unknown"


@dataclass
class Job:
    """One run as a cluster job: its resources and its files beside the run directory."""

    entry: SuiteEntry
    run: SuiteRun
    key: str
    resources: Resources

    def file(self, suffix: str) -> Path:
        """``<config>/seed-<s><suffix>`` beside the run directory, absolute: a node may start the job elsewhere."""
        return (self.run.run_dir.parent / f"{self.run.run_dir.name}{suffix}").absolute()

    @property
    def name(self) -> str:
        return f"{self.entry.stem}-seed-{self.run.seed}"


class Launcher(abc.ABC):
    """Puts jobs on a cluster and says where they are. A job runs ``python -m envengineer.plugins.suite.worker
    JOB.json`` (:func:`envengineer.plugins.suite.worker.main`) on a node with the job's resources."""

    name: ClassVar[str] = ""

    def job_env(self, resources: Resources) -> dict[str, str]:
        """Variables the run is started with. On one node ``RAY_ADDRESS=local``: a trainer that starts its
        own Ray (verl) starts a new one inside the job's GPUs instead of joining a cluster it finds on
        the node (the suite's own, or another job's on a shared Slurm node). On several nodes the
        launcher says which cluster the run's trainer attaches to."""
        return {"RAY_ADDRESS": "local"} if resources.nodes <= 1 else {}

    @abc.abstractmethod
    def submit(self, jobs: Sequence[Job]) -> list[str]:
        """Submit the jobs; their ids, in order."""

    @abc.abstractmethod
    def state(self, job_id: str) -> str:
        """PENDING, RUNNING, ENDED (over, however it ended) or UNKNOWN (the cluster cannot say now)."""

    def fits(self, resources: Resources) -> str | None:
        """Why no node of the cluster can take a run asking for ``resources`` now (None: one can, or cannot tell)."""
        return None

    def record(self) -> dict[str, Any]:
        """Saved with each job id: what finds the job again from another invocation (e.g. Ray's address)."""
        return {}

    def release(self, job_id: str) -> None:
        """Free what an ended job still holds on the cluster."""

    def close(self) -> None:
        """Disconnect (the jobs still pending or running go on)."""


def ray_nodes_offering(nodes: Sequence[dict[str, Any]], **need: float) -> list[dict[str, Any]]:
    """The alive nodes of a ``ray.nodes()`` answer whose resources hold at least ``need`` of each
    (``GPU=4``, ``CPU=5``); every alive node when ``need`` is empty."""
    return [n for n in nodes if n.get("Alive") and all(n.get("Resources", {}).get(k, 0) >= v for k, v in need.items())]


def new_id() -> str:
    """A short random suffix that keeps two submissions of one run apart (it names jobs, never results)."""
    return secrets.token_hex(4)
