"""``envengineer suite --launcher ray``: each run as a detached Ray actor on a cluster.

The actor asks for the run's CPUs and GPUs (:func:`envengineer.plugins.suite.launch.jobs.run_resources`); once
Ray places it on a node it starts the run's worker process there and stays until the suite has
seen the run end. Detached and named (``<namespace>/<config>-seed-<s>-<random>``), it outlives the
suite's own process: the same command run again finds it by its name and follows it. The run is
started with ``RAY_ADDRESS=local`` (:meth:`Launcher.job_env`), so a trainer that starts its own Ray
(verl) does so inside the GPUs Ray gave the actor instead of asking the cluster for more.

A run on several nodes (``trainer.nnodes`` above 1) is different: its actor asks for one CPU (the
run's own process, the driver), waits until the cluster has ``nodes`` alive nodes with the run's
GPUs each (pending until then), and starts the run with ``RAY_ADDRESS`` set to this cluster, so
that verl's ``ray.init()`` attaches to it and places its workers across the nodes through its
placement groups.

Ray is imported only here, and only for ``--launcher ray``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from typing import Any, ClassVar

from envengineer.components import Resources
from envengineer.errors import EnvEngineerError
from envengineer.plugins.suite.launch.base import ENDED, PENDING, RUNNING, UNKNOWN, Job, Launcher, LauncherOptions, new_id, ray_nodes_offering


#: What a multi-node run's actor answers while the cluster lacks the nodes it needs.
WAITING = "waiting"


class RunActor:
    """On its node: the run's worker process (:mod:`envengineer.plugins.suite.worker`), started when placed, or for
    a run on several nodes once the cluster has them (``nodes`` nodes with ``gpus_per_node`` GPUs each)."""

    def __init__(self, job_file: str, nodes: int = 1, gpus_per_node: int = 0) -> None:
        self.job_file, self.nodes, self.gpus_per_node = job_file, nodes, gpus_per_node
        self.process: subprocess.Popen | None = None
        self.poll()

    def poll(self) -> int | str | None:
        """The worker's exit status, None while it runs, WAITING while the cluster lacks the run's nodes."""
        if self.process is None:
            if self.nodes > 1:
                import ray

                if cluster_lacks(ray.nodes(), self.nodes, self.gpus_per_node):
                    return WAITING
            from envengineer.processes import start

            self.process = start([sys.executable, "-m", "envengineer.plugins.suite.worker", self.job_file],
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return self.process.poll()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            from envengineer.processes import end_group

            end_group(self.process)  # the run's whole process group, grandchildren included


def cluster_lacks(nodes: list[dict[str, Any]], count: int, gpus_per_node: float) -> str | None:
    """Why the Ray cluster whose ``ray.nodes()`` are ``nodes`` cannot take a run on ``count`` nodes with
    ``gpus_per_node`` GPUs each (None: it can)."""
    enough = len(ray_nodes_offering(nodes, GPU=gpus_per_node))
    if enough >= count:
        return None
    return (f"the Ray cluster has {enough} alive node(s) with {gpus_per_node} GPU(s) and the run trains on {count}: "
            "it waits (pending) until enough nodes join")


class RayLauncher(Launcher):
    name: ClassVar[str] = "ray"

    def __init__(self, options: LauncherOptions, *, start: bool = True) -> None:
        try:
            import ray
        except ImportError:
            raise EnvEngineerError('--launcher ray needs Ray: pip install "envengineer[ray]"') from None
        self.ray, self.namespace = ray, options.namespace
        self.connected_here = not ray.is_initialized()
        if self.connected_here:
            address = options.address if (options.address or start) else "auto"
            try:
                ray.init(address=address, namespace=self.namespace, log_to_driver=False)
            except ConnectionError as exc:
                raise EnvEngineerError(f"--launcher ray: no Ray cluster at {address} ({exc})") from None
        self.address = ray.get_runtime_context().gcs_address
        self.polls: dict[str, Any] = {}  # job id -> its poll call still under way (an actor not placed yet)

    def submit(self, jobs: Sequence[Job]) -> list[str]:
        ids = []
        for job in jobs:
            job_id = f"{job.name}-{new_id()}"
            r = job.resources
            several = r.nodes > 1  # the driver only: verl's workers ask the cluster for the GPUs themselves
            actor = self.ray.remote(RunActor).options(
                name=job_id, namespace=self.namespace, lifetime="detached", max_restarts=0,
                num_cpus=1 if several else r.cpus, num_gpus=0 if several else r.gpus_per_node,
            )
            actor.remote(str(job.file(".job.json")), r.nodes, r.gpus_per_node)
            ids.append(job_id)
        return ids

    def state(self, job_id: str) -> str:
        ray = self.ray
        try:
            actor = ray.get_actor(job_id, namespace=self.namespace)
        except ValueError:
            return ENDED  # no such actor: released, or the cluster restarted
        call = self.polls.get(job_id)
        if call is None:
            call = self.polls[job_id] = actor.poll.remote()
        ready, _ = ray.wait([call], timeout=0.5)
        if not ready:
            return PENDING  # not placed on a node yet (or busy starting)
        del self.polls[job_id]
        try:
            code = ray.get(call)
        except ray.exceptions.RayActorError:
            return ENDED  # the actor died (its node failed): the run reported nothing
        except ray.exceptions.RayError:
            return UNKNOWN
        return PENDING if code == WAITING else RUNNING if code is None else ENDED

    def job_env(self, resources: Resources) -> dict[str, str]:
        """On several nodes the run's trainer attaches to this cluster; on one, it starts its own inside the actor's GPUs."""
        return {"RAY_ADDRESS": self.address} if resources.nodes > 1 else super().job_env(resources)

    def fits(self, resources: Resources) -> str | None:
        if resources.nodes > 1:
            return cluster_lacks(self.ray.nodes(), resources.nodes, resources.gpus_per_node)
        if ray_nodes_offering(self.ray.nodes(), CPU=resources.cpus, GPU=resources.gpus_per_node):
            return None
        return (f"no node of the Ray cluster has {resources.cpus} CPU(s) and {resources.gpus_per_node} GPU(s); "
                "the run waits until one joins (set launcher.cpus / launcher.gpus_per_node to ask for less)")

    def record(self) -> dict[str, Any]:
        return {"address": self.address, "namespace": self.namespace}

    def release(self, job_id: str) -> None:
        self.polls.pop(job_id, None)
        try:
            self.ray.kill(self.ray.get_actor(job_id, namespace=self.namespace))
        except ValueError:
            pass

    def close(self) -> None:
        if self.connected_here:
            self.ray.shutdown()
