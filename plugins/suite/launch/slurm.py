"""``envengineer suite --launcher slurm``: each run as a Slurm job (or the runs as job arrays) through
submitit.

A job asks for one node with the run's GPUs (``--gpus-per-node``) and CPUs (``--cpus-per-task``),
the launcher's partition, time limit and account, and any further ``#SBATCH`` options
(:func:`sbatch_parameters`); it runs :func:`envengineer.plugins.suite.worker.main` on the node. submitit
keeps its scripts and its own logs under ``<suite output>/.submitit/``. With ``executor: local``
the same jobs run on this machine through submitit's local executor (a rehearsal of the Slurm path:
the same files, no cluster).

A run on several nodes (``trainer.nnodes`` above 1) is one job of that many nodes, one task per
node with the run's GPUs on each, that makes a Ray cluster of its nodes and runs the run on it:
:mod:`envengineer.plugins.suite.launch.nodes`.

submitit is imported only here, and only for ``--launcher slurm``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from envengineer.components import Resources
from envengineer.errors import EnvEngineerError
from envengineer.plugins.suite.launch.base import ENDED, PENDING, RUNNING, UNKNOWN, Job, Launcher, LauncherOptions

#: Slurm's job states (sacct/squeue) as the suite follows them; any other state has ended.
_WAITING = {"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "RESV_DEL_HOLD", "SUSPENDED"}
_RUNNING = {"RUNNING", "CONFIGURING", "COMPLETING", "RESIZING", "SIGNALING", "STAGE_OUT"}
#: Not known yet (sacct has not seen a job just submitted) or not reachable.
_UNKNOWN = {"UNKNOWN", "READY"}


def sbatch_parameters(resources: Resources, options: LauncherOptions, name: str) -> dict[str, Any]:
    """submitit's ``SlurmExecutor`` parameters for one run (its ``#SBATCH`` lines)."""
    params: dict[str, Any] = {
        "job_name": name, "time": options.time, "nodes": resources.nodes, "ntasks_per_node": 1,
        "cpus_per_task": resources.cpus, "array_parallelism": options.array_parallelism,
    }
    if resources.gpus_per_node:
        params["gpus_per_node"] = resources.gpus_per_node
    if options.partition:
        params["partition"] = options.partition
    if options.account:
        params["account"] = options.account
    if options.setup:
        params["setup"] = list(options.setup)
    if options.sbatch:
        params["additional_parameters"] = dict(options.sbatch)
    return params


def job_call(job: Job) -> tuple[Any, ...]:
    """What each task of the run's job calls: the suite worker on one node; on several, the Ray cluster
    over the job's nodes with the worker on its first (:func:`envengineer.plugins.suite.launch.nodes.main`)."""
    file = str(job.file(".job.json"))
    if job.resources.nodes <= 1:
        from envengineer.plugins.suite import worker as suite_worker

        return suite_worker.main, [file]
    from envengineer.plugins.suite.launch import nodes as suite_launch_nodes

    return suite_launch_nodes.main, file, suite_launch_nodes.RayNodes(nodes=job.resources.nodes, per_node=job.resources.gpus_per_node)


class SlurmLauncher(Launcher):
    name: ClassVar[str] = "slurm"

    def __init__(self, options: LauncherOptions, output: Path) -> None:
        try:
            import submitit
        except ImportError:
            raise EnvEngineerError('--launcher slurm needs submitit: pip install "envengineer[slurm]"') from None
        self.submitit, self.options = submitit, options
        self.folder = Path(output).absolute() / ".submitit"
        self.jobs: dict[str, Any] = {}  # the jobs submitted by this process, by id

    def executor(self, resources: Resources, name: str) -> Any:
        submitit, o = self.submitit, self.options
        if o.executor == "local":
            executor = submitit.LocalExecutor(folder=self.folder)
            executor.update_parameters(timeout_min=o.time, gpus_per_node=resources.gpus_per_node, nodes=1, tasks_per_node=1,
                                       **({"setup": list(o.setup)} if o.setup else {}))
            return executor
        try:
            executor = submitit.SlurmExecutor(folder=self.folder)
        except RuntimeError as exc:  # no srun: not on a Slurm cluster
            raise EnvEngineerError(f"--launcher slurm: {exc} (executor: local runs the jobs on this machine)") from None
        executor.update_parameters(**sbatch_parameters(resources, o, name))
        return executor

    def submit(self, jobs: Sequence[Job]) -> list[str]:
        """One job per run, or with ``array`` one job array per group of runs asking for the same resources."""
        groups: dict[Resources, list[Job]] = {}
        for job in jobs:
            groups.setdefault(job.resources, []).append(job)
        submitted: dict[str, str] = {}
        for resources, members in groups.items():
            if self.options.array and self.options.executor == "slurm" and len(members) > 1:
                executor = self.executor(resources, "envengineer-suite")
                with executor.batch():
                    handles = [executor.submit(*job_call(job)) for job in members]
            else:
                handles = [self.executor(resources, job.name).submit(*job_call(job)) for job in members]
            for job, handle in zip(members, handles):
                self.jobs[handle.job_id] = handle
                submitted[job.key] = handle.job_id
        return [submitted[job.key] for job in jobs]

    def state(self, job_id: str) -> str:
        if self.options.executor == "local":
            handle = self.jobs.get(job_id)
            if handle is not None:
                return ENDED if handle.done() else RUNNING
            return RUNNING if _alive(job_id) else ENDED  # submitted by an earlier invocation: the job id is its process id
        try:
            state = str(self.submitit.SlurmJob(folder=self.folder, job_id=job_id).state).upper()
        except Exception:  # noqa: BLE001 - sacct unreachable: asked again at the next look
            return UNKNOWN
        state = state.split()[0] if state else "UNKNOWN"
        if state in _WAITING:
            return PENDING
        if state in _RUNNING:
            return RUNNING
        return UNKNOWN if state in _UNKNOWN else ENDED

    def record(self) -> dict[str, Any]:
        return {"executor": self.options.executor, "folder": str(self.folder)}


def _alive(pid: str) -> bool:
    """Whether the local job's process runs (a zombie, ended but not yet reaped, does not)."""
    try:
        os.kill(int(pid), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{int(pid)}/stat").read_text()
    except OSError:
        return True  # no /proc: alive as far as kill says
    return stat.rsplit(")", 1)[-1].split()[0] != "Z"
