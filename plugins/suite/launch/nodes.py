"""A run on several nodes under ``envengineer suite --launcher slurm``: one Slurm job of ``nodes``
nodes, one task per node, that makes a Ray cluster of its nodes and runs the suite's worker on it.

Every task runs :func:`main` (submitit starts it on each node; :class:`submitit.JobEnvironment`
says which rank it is and the job's hosts):

- rank 0 starts a Ray head on its node at a free port (``ray start --head --block`` with this
  interpreter), and once the head answers writes its address to ``<config>/seed-<s>.ray-head.json``
  beside the run directory (the job's id with it, so that a file left by an earlier job is never
  read as this one's);
- every other rank waits for that file, starts a Ray node that joins the head
  (``ray start --address HEAD --block``) and stays until rank 0 says stop in the same file;
- rank 0 waits, at most ``join_timeout_s``, until ``nodes`` nodes each offering ``per_node`` of
  ``resource`` (GPUs) have joined (else the run fails with an error naming the hosts that did not
  join), runs the suite worker (:func:`envengineer.plugins.suite.worker.main`) with ``RAY_ADDRESS`` set to
  the head, so that verl's ``ray.init()`` and its node check attach to this cluster, then says
  stop, waits for the other nodes to leave and stops its head. Only rank 0 records the run's outcome.

Each node's Ray keeps its files in a temporary folder of its own (``--temp-dir``): it never
becomes the cluster ``ray.init("auto")`` finds for another job on a shared node. Ray is imported
only here, and only inside these jobs.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envengineer.api import free_port
from envengineer.errors import EnvEngineerError
from envengineer.plugins.suite.launch.base import ray_nodes_offering

JOB_SUFFIX, HEAD_SUFFIX = ".job.json", ".ray-head.json"


@dataclass(frozen=True)
class RayNodes:
    """The Ray cluster a multi-node job makes of its nodes, and when rank 0 considers it formed."""

    nodes: int
    per_node: float = 0  # of ``resource`` each node must offer (the run's GPUs per node)
    resource: str = "GPU"
    num_gpus: int | None = None  # ray start --num-gpus; None: Ray counts the GPUs the job was given (CUDA_VISIBLE_DEVICES)
    num_cpus: int | None = None  # ray start --num-cpus; None: Ray counts the job's CPUs
    resources: Mapping[str, float] = field(default_factory=dict)  # ray start --resources
    join_timeout_s: float = 600.0
    stop_timeout_s: float = 60.0
    poll_s: float = 1.0


def head_file(job_file: str | os.PathLike[str]) -> Path:
    """``<config>/seed-<s>.ray-head.json`` for the job file ``<config>/seed-<s>.job.json``."""
    path = Path(job_file)
    stem = path.name[: -len(JOB_SUFFIX)] if path.name.endswith(JOB_SUFFIX) else path.stem
    return path.with_name(stem + HEAD_SUFFIX)


def main(job_file: str, spec: RayNodes) -> int:
    """What each task of the Slurm job runs: rank 0 the head and the run, the others a Ray node."""
    import submitit

    env = submitit.JobEnvironment()
    hosts = list(env.hostnames)
    name = hosts[env.node] if env.node < len(hosts) else env.hostname
    restarts = os.environ.get("SLURM_RESTART_COUNT", "0")  # a requeued job keeps its id: its handoff file must not
    attempt = env.job_id if restarts in ("", "0") else f"{env.job_id}.{restarts}"
    if env.global_rank == 0:
        return run_head(job_file, spec, hosts, name, attempt)
    join(job_file, spec, name, attempt)
    return 0


# ------------------------------------------------------------------ rank 0


def run_head(job_file: str, spec: RayNodes, hosts: Sequence[str], name: str, job_id: str) -> int:
    """Start the head, wait for the cluster, run the suite worker on it, stop the cluster; the worker's status."""
    from envengineer.fileio import write_json

    job = json.loads(Path(job_file).read_text(encoding="utf-8"))
    log, handoff = Path(job["log"]), head_file(job_file)
    handoff.unlink(missing_ok=True)

    def failed(error: str) -> int:
        _note(log, f"job {job_id}: {error}")
        write_json(job["result"], {"ok": False, "error": error})
        return 1

    _auth_env()  # before Ray is imported: it reads the mode once
    try:
        import ray  # noqa: F401
    except ImportError:
        return failed(f"a run on {spec.nodes} nodes needs Ray in the job's Python ({sys.executable}): "
                      'pip install "envengineer[ray]" (the verl extra brings it too)')
    ip, port = node_ip(), free_port()
    address = f"{ip}:{port}"
    process = start_ray(head_args(port), spec, name, ip)
    try:
        try:
            joined = await_cluster(address, spec, hosts, process,
                                   lambda: write_json(handoff, {"address": address, "job": job_id, "head": name}))
        except Exception as exc:  # noqa: BLE001 - recorded as the run's outcome, like the worker's own failures
            return failed(str(exc) if isinstance(exc, EnvEngineerError) else f"the job's Ray cluster: {type(exc).__name__}: {exc}")
        _note(log, f"job {job_id}: Ray cluster at {address}, {len(joined)} node(s): {', '.join(joined)}")
        os.environ["RAY_ADDRESS"] = address
        from envengineer.plugins.suite import worker as suite_worker

        return suite_worker.main([str(job_file)])
    finally:
        stop_cluster(handoff, address, job_id, process, spec)


def head_args(port: int) -> list[str]:
    """``ray start`` options of the job's head at ``port`` (no dashboard: nobody browses it)."""
    return ["--head", "--port", str(port), "--ray-client-server-port", str(free_port()), "--include-dashboard", "false"]


def await_cluster(address: str, spec: RayNodes, hosts: Sequence[str], head: subprocess.Popen, ready: Callable[[], None]) -> list[str]:
    """Wait until the head at ``address`` answers (then call ``ready``: the others may join), then until
    ``spec.nodes`` alive nodes offer ``spec.per_node`` of ``spec.resource``; their names. Past
    ``spec.join_timeout_s``: :class:`EnvEngineerError` naming the hosts of ``hosts`` that did not join."""
    import ray

    deadline = time.monotonic() + spec.join_timeout_s
    host, port = address.rsplit(":", 1)
    while not _listening(host, int(port)):
        if head.poll() is not None:
            raise EnvEngineerError(f"the Ray head on {hosts[0] if hosts else host} exited with status {head.returncode} before it answered "
                                   "(its output is in the job's task 0 log under .submitit/)")
        if time.monotonic() > deadline:
            raise EnvEngineerError(f"the Ray head at {address} did not answer within {spec.join_timeout_s:g}s")
        time.sleep(min(spec.poll_s, 0.2))
    ray.init(address=address, log_to_driver=False, logging_level="ERROR")
    try:
        ready()
        while True:
            nodes = ray.nodes()
            alive, enough = ray_nodes_offering(nodes), ray_nodes_offering(nodes, **{spec.resource: spec.per_node})
            if len(enough) >= spec.nodes:
                return sorted(str(n.get("NodeName")) for n in enough)
            if time.monotonic() > deadline:
                raise EnvEngineerError(_not_formed(spec, hosts, alive, enough))
            time.sleep(spec.poll_s)
    finally:
        ray.shutdown()


def _not_formed(spec: RayNodes, hosts: Sequence[str], alive: list[dict[str, Any]], enough: list[dict[str, Any]]) -> str:
    missing = list((Counter(hosts) - Counter(str(n.get("NodeName")) for n in alive)).elements())
    short = [f"{n.get('NodeName')} ({n.get('Resources', {}).get(spec.resource, 0):g} {spec.resource})" for n in alive if n not in enough]
    text = (f"the job's Ray cluster did not form within {spec.join_timeout_s:g}s: {len(enough)} of {spec.nodes} node(s) joined "
            f"with {spec.per_node:g} {spec.resource} each")
    if missing:
        text += f"; not joined: {', '.join(missing)}"
    if short:
        text += f"; joined with too few {spec.resource}: {', '.join(short)}"
    return text + " (each node's task log under .submitit/ says why it did not join)"


def stop_cluster(handoff: Path, address: str, job_id: str, head: subprocess.Popen, spec: RayNodes) -> None:
    """Tell the other nodes to stop (in the handoff file), wait until they left (at most ``stop_timeout_s``), stop the head."""
    from envengineer.fileio import write_json

    write_json(handoff, {"address": address, "job": job_id, "stop": True})
    deadline = time.monotonic() + spec.stop_timeout_s
    if head.poll() is None and _listening(*address.rsplit(":", 1)):
        import ray

        try:
            ray.init(address=address, log_to_driver=False, logging_level="ERROR")
            while sum(1 for n in ray.nodes() if n.get("Alive")) > 1 and time.monotonic() < deadline:
                time.sleep(spec.poll_s)
        except Exception:  # noqa: BLE001 - the head is going anyway; the other nodes stop on the file alone
            pass
        finally:
            ray.shutdown()
    stop_ray(head, max(deadline - time.monotonic(), 10.0))


# ------------------------------------------------------------------ the other ranks


def join(job_file: str, spec: RayNodes, name: str, job_id: str) -> None:
    """Wait for this job's head address, join it, stay until rank 0 says stop; :class:`EnvEngineerError` if this
    node's Ray ends before that."""
    handoff = head_file(job_file)
    _auth_env()  # before Ray is imported: it reads the mode once
    deadline = time.monotonic() + spec.join_timeout_s
    while (found := _handoff(handoff, job_id)) is None:
        if time.monotonic() > deadline:
            raise EnvEngineerError(f"{name}: no Ray head address for job {job_id} in {handoff} after {spec.join_timeout_s:g}s")
        time.sleep(spec.poll_s)
    if found.get("stop"):
        return  # rank 0 has already given up
    ip = node_ip()
    process = start_ray(["--address", str(found["address"])], spec, name, ip)
    try:
        while process.poll() is None:
            found = _handoff(handoff, job_id)
            if found is None or found.get("stop"):
                return
            time.sleep(spec.poll_s)
        raise EnvEngineerError(f"{name}: its Ray node exited with status {process.returncode} before the job's head said stop "
                               "(its output is above, in this task's log)")
    finally:
        stop_ray(process, spec.stop_timeout_s)


def _handoff(path: Path, job_id: str) -> dict[str, Any] | None:
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return found if isinstance(found, dict) and str(found.get("job")) == str(job_id) else None


# ------------------------------------------------------------------ one node's Ray


def start_ray(args: Sequence[str], spec: RayNodes, name: str, ip: str) -> subprocess.Popen:
    """``ray start --block`` with this interpreter, in a session of its own (:func:`stop_ray` ends all of it),
    its files in a fresh temporary folder and every port of its own free (several Ray nodes may share a machine)."""
    command = [sys.executable, "-m", "ray.scripts.scripts", "start", "--block", *args,
               "--node-ip-address", ip, "--node-name", name, "--disable-usage-stats",
               "--temp-dir", tempfile.mkdtemp(prefix="envengineer-ray-", dir="/tmp"),
               "--dashboard-agent-listen-port", str(free_port()), "--dashboard-agent-grpc-port", str(free_port()),
               "--metrics-export-port", str(free_port()), "--runtime-env-agent-port", str(free_port())]
    if spec.num_gpus is not None:
        command += ["--num-gpus", str(spec.num_gpus)]
    if spec.num_cpus is not None:
        command += ["--num-cpus", str(spec.num_cpus)]
    if spec.resources:
        command += ["--resources", json.dumps(dict(spec.resources))]
    return subprocess.Popen(command, stdin=subprocess.DEVNULL, start_new_session=True)


def stop_ray(process: subprocess.Popen, timeout_s: float) -> None:
    """End one node's Ray: SIGTERM to its ``ray start --block`` (it drains the node and stops the raylet and
    the rest), SIGKILL to its whole session if it has not ended within ``timeout_s``."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout_s)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)  # whatever of its session is left (nothing, normally)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def _auth_env() -> None:
    """Ray's token authentication as ``ray start`` chooses it (on when a token is found: ``RAY_AUTH_TOKEN``,
    ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``; ``RAY_AUTH_MODE`` set by the user wins), made explicit so
    that the drivers on the cluster (the wait here, verl's ``ray.init()``) authenticate the same way."""
    if "RAY_AUTH_MODE" in os.environ:
        return
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH") or (Path.home() / ".ray" / "auth_token").is_file():
        os.environ["RAY_AUTH_MODE"] = "token"


def node_ip() -> str:
    import ray.util

    return ray.util.get_node_ip_address()


def _listening(host: str, port: int | str) -> bool:
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except OSError:
        return False


def _note(log: Path, line: str) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a", encoding="utf-8") as handle:
        handle.write(line + "\n")
