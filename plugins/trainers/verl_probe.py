"""What the Python that runs verl has, here and on every node of its Ray cluster.

The launcher's own interpreter may not be the one that runs verl (``trainer.verl.python``), and on
several nodes every node must have the same environment, the base model at the same path and the
run directory on shared storage. So the facts are read where they matter:

- ``python -m envengineer.plugins.trainers.verl_probe PATH...`` in the job's interpreter prints this
  machine's facts as JSON (:func:`probe`): the Python, the versions of the packages verl's job uses,
  whether flash-attn *imports* (an installed flash-attn built for another torch fails here), and
  whether each PATH exists.
- ``... --nodes ADDRESS PATH...`` connects to the running Ray cluster at ADDRESS (never starts one)
  and gathers the same facts from one task pinned to each alive node (``NodeAffinitySchedulingStrategy``,
  not soft), printing them by node (:func:`probe_nodes`). :func:`node_problems` compares them with
  this machine's and names the node that lacks something.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

from envengineer.api import ConfigError

#: The distributions a verl job imports, compared across nodes.
PACKAGES = ("envengineer", "verl", "vllm", "torch", "transformers", "ray", "flash_attn", "TransferQueue")
#: Seconds the probe (and the tasks on the nodes) may take: importing torch and flash-attn on a busy node is slow.
PROBE_TIMEOUT_S = 300


def facts(paths: Sequence[str] = ()) -> dict[str, Any]:
    """This interpreter's facts (run here, in a subprocess, or in a Ray task on a node)."""
    import importlib.metadata

    packages: dict[str, str | None] = {}
    for name in PACKAGES:
        try:
            packages[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            packages[name] = None
    flash: dict[str, Any] = {"imports": False, "error": None}
    if packages["flash_attn"] is not None:
        try:
            import flash_attn  # noqa: F401 - an ABI mismatch with torch shows only on import

            flash["imports"] = True
        except Exception as exc:  # noqa: BLE001 - any failure means verl cannot use it
            flash["error"] = f"{type(exc).__name__}: {' '.join(str(exc).split())[:300]}"
    return {
        "host": socket.gethostname(),
        "torch_cuda": torch_cuda_build(),
        "python": platform.python_version(),
        "executable": sys.executable,
        "packages": packages,
        "flash_attn": flash,
        "paths": {path: os.path.exists(path) for path in paths},
        "nccl": {k: v for k, v in sorted(os.environ.items()) if k.startswith("NCCL_")},
    }


def torch_cuda_build() -> str | None:
    """The CUDA version this interpreter's torch was built for, read from ``torch/version.py`` (importing torch is slow
    and not needed); None for a CPU-only build or no torch."""
    import importlib.util
    import re

    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        with open(os.path.join(spec.submodule_search_locations[0], "version.py"), encoding="utf-8") as handle:
            match = re.search(r"^cuda(?::[^=]*)?=\s*'([^']+)'", handle.read(), re.MULTILINE)
    except OSError:
        return None
    return match.group(1) if match else None


def probe_nodes(address: str, paths: Sequence[str]) -> dict[str, dict[str, Any]]:
    """:func:`facts` from every alive node of the Ray cluster at ``address``, keyed ``IP (node id prefix)``."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ray.init(address=address, logging_level="ERROR", log_to_driver=False, include_dashboard=False)
    try:
        remote = ray.remote(num_cpus=0)(facts)
        nodes = [node for node in ray.nodes() if node.get("Alive")]
        refs = {f"{node['NodeManagerAddress']} ({node['NodeID'][:8]})": remote.options(
            scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)).remote(list(paths)) for node in nodes}
        values = ray.get(list(refs.values()), timeout=PROBE_TIMEOUT_S)
        return dict(zip(refs, values))
    finally:
        ray.shutdown()


def _run(python: str, args: list[str]) -> Any:
    try:
        done = subprocess.run([python, "-m", __name__, *args], capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ConfigError(f"trainer.verl.python: {python} could not be probed: {exc}") from None
    if done.returncode != 0:
        tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-8:])
        raise ConfigError(f"trainer.verl.python: probing {python} failed (exit {done.returncode}):\n{tail}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def probe(python: str, paths: Sequence[str] = ()) -> dict[str, Any]:
    """:func:`facts` of the interpreter ``python`` (the one that runs verl), in a subprocess."""
    return _run(python, list(paths))


def probe_cluster(python: str, address: str, paths: Sequence[str]) -> dict[str, dict[str, Any]]:
    """:func:`probe_nodes` run by the interpreter ``python`` (Ray is verl's, in that environment)."""
    return _run(python, ["--nodes", address, *paths])


def node_problems(here: dict[str, Any], nodes: dict[str, dict[str, Any]], *, nnodes: int) -> list[str]:
    """What each node lacks, compared with ``here`` (this machine, the job's interpreter): the Python version, the
    packages' versions, the paths; and fewer alive nodes than ``nnodes``."""
    problems = []
    if len(nodes) < nnodes:
        problems.append(f"the Ray cluster has {len(nodes)} alive node(s), trainer.verl.nnodes is {nnodes}")
    for node, theirs in sorted(nodes.items()):
        lacks = []
        if theirs["python"] != here["python"]:
            lacks.append(f"Python {theirs['python']} (here {here['python']})")
        for name in PACKAGES:
            mine, other = here["packages"].get(name), theirs["packages"].get(name)
            if mine != other:
                lacks.append(f"{name} {other or 'not installed'} (here {mine or 'not installed'})")
        if here["flash_attn"]["imports"] and not theirs["flash_attn"]["imports"]:
            lacks.append(f"flash-attn does not import ({theirs['flash_attn']['error'] or 'not installed'})")
        lacks += [f"no {path}" for path, exists in theirs["paths"].items() if not exists]
        if lacks:
            problems.append(f"node {node}, host {theirs['host']}: " + "; ".join(lacks))
    return problems


def main(argv: Sequence[str]) -> int:
    args = list(argv)
    if args[:1] == ["--nodes"]:
        print(json.dumps(probe_nodes(args[1], args[2:])))
    else:
        print(json.dumps(facts(args)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
