"""The ``verl`` trainer's checks for ``envengineer doctor`` and before a run: read in the Python that runs verl.

verl, vLLM, TransferQueue and flash-attn are looked for in the job's interpreter
(``trainer.verl.python``, default this one), through :func:`envengineer.plugins.trainers.verl_probe.probe`;
Ray's cluster is asked about only when one is running (``ray_address``, ``RAY_ADDRESS`` or the
file ``ray start`` leaves), never started.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from envengineer.api import Check, ConfigError, package_check
from envengineer.plugins._shared.vllm_child import TESTED_VLLM
from envengineer.plugins.trainers.verl_config import INSTALL_HINT

#: The versions the ``verl`` extra installs (verl[vllm]==0.9.1 pins vLLM 0.24.0) and the tests follow.
TESTED = {"verl": "0.9.1", "vllm": TESTED_VLLM}
#: Where ``ray start`` records the address of the cluster this node belongs to.
RAY_CURRENT_CLUSTER = "/tmp/ray/ray_current_cluster"
FLASH_ATTN_DOC = "install a flash-attn built for that Python's torch and CUDA (the flash-attn section of docs/verl.md)"

_NODES = """
import json, ray
ray.init(address={address!r}, logging_level="ERROR", log_to_driver=False)
print(json.dumps([{{"address": n["NodeManagerAddress"], "alive": n["Alive"], "gpus": n["Resources"].get("GPU", 0),
                   "cpus": n["Resources"].get("CPU", 0)}} for n in ray.nodes()]))
ray.shutdown()
"""


def flash_attn_check(facts: dict[str, Any], attention: str) -> Check:
    """flash-attn in the job's interpreter: verl's fast path (flash_attention_2 with padding removal) or not."""
    version, flash = facts["packages"].get("flash_attn"), facts["flash_attn"]
    if flash["imports"]:
        used = "used" if attention in ("auto", "flash_attention_2") else f"installed, but attention is {attention}"
        return Check("flash-attn", "ok", f"{version}: flash_attention_2 with padding removal ({used})")
    why = f"installed ({version}) but does not import: {flash['error']}" if version else "not installed"
    status = "missing" if attention == "flash_attention_2" else "warn"
    then = "verl cannot start with attention: flash_attention_2" if status == "missing" else (
        "verl runs sdpa without padding removal: every micro-batch is padded to its longest sequence (slower, more memory)")
    return Check("flash-attn", status, f"{why}; {then}", FLASH_ATTN_DOC)


def job_torch_check(version: str | None, cuda_build: str | None, read_gpus: Any = None) -> Check:
    """torch in the Python that runs verl (when it is not this one), and whether this machine's driver runs its CUDA build."""
    from envengineer.api import driver_problem, torch_check
    from envengineer.api import read_gpus as machine_gpus

    check = torch_check(version, cuda_build)
    if check.status != "ok":
        return Check("verl torch", check.status, f"in the Python that runs verl: {check.detail}", check.fix)
    gpus = (read_gpus or machine_gpus)()
    problem = driver_problem(gpus[0].driver, cuda_build) if gpus else None
    if problem:
        return Check("verl torch", "missing", f"{version}: {problem}", "a newer driver, or torch built for an older CUDA in that Python")
    return Check("verl torch", "ok", f"{check.detail}, in the Python that runs verl")


def running_cluster(ray_address: str | None) -> str | None:
    """The address of a Ray cluster to ask, when one is known to run; None: none (and none is started)."""
    if ray_address:
        return ray_address
    if os.environ.get("RAY_ADDRESS"):
        return os.environ["RAY_ADDRESS"]
    return "auto" if os.path.exists(RAY_CURRENT_CLUSTER) else None


def ray_check(python: str, found: str | None, ray_address: str | None, nnodes: int) -> Check:
    if found is None:
        return package_check("ray", None, install=INSTALL_HINT, where="the Python that runs verl")
    address = running_cluster(ray_address)
    if address is None:
        if nnodes > 1:
            return Check("ray", "missing", f"{found}; no running Ray cluster, and nnodes is {nnodes}",
                         "ray start --head on one node, ray start --address HEAD:6379 on the others; ray_address: auto")
        return Check("ray", "ok", f"{found}; no running cluster: verl starts a local one")
    try:
        done = subprocess.run([python, "-c", _NODES.format(address=address)], capture_output=True, text=True, timeout=60)
        nodes = json.loads(done.stdout.strip().splitlines()[-1]) if done.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError):
        nodes = None
    if nodes is None:
        return Check("ray", "missing" if ray_address or nnodes > 1 else "warn", f"{found}; the Ray cluster at {address} does not answer",
                     "check `ray status` on the head node")
    alive = [n for n in nodes if n["alive"]]
    text = "; ".join(f"{n['address']}: {n['gpus']:g} GPUs, {n['cpus']:g} CPUs" for n in alive)
    if len(alive) < nnodes:
        return Check("ray", "missing", f"{found}; cluster at {address} has {len(alive)} alive node(s), nnodes is {nnodes}: {text}",
                     "start Ray on the missing nodes (ray start --address HEAD:6379)")
    return Check("ray", "ok", f"{found}; cluster at {address}, {len(alive)} alive node(s): {text}")


def checks(trainer: Any) -> list[Check]:
    """Every check for a round of ``trainer`` (a ``verl`` trainer: its options, and the facts of the Python that runs
    verl it probed, the same the round uses)."""
    options = trainer.options
    python = options.python or sys.executable
    try:
        facts = trainer.job_facts()
    except ConfigError as exc:
        return [Check("verl python", "missing", str(exc), "trainer.verl.python: a Python with envengineer and verl installed")]
    found = facts["packages"]
    where = [] if python == sys.executable else [Check("verl python", "ok", f"{facts['python']} at {python}"),
                                                 job_torch_check(found.get("torch"), facts.get("torch_cuda"))]
    job = "the Python that runs verl"
    return where + [
        package_check("verl", found.get("verl"), tested=TESTED["verl"], install=INSTALL_HINT, where=job),
        package_check("vllm", found.get("vllm"), tested=TESTED["vllm"], install=INSTALL_HINT, where=job),
        package_check("TransferQueue", found.get("TransferQueue"), install=f"{INSTALL_HINT}, or pip install 'TransferQueue>=0.1.10'", where=job),
        flash_attn_check(facts, options.attention),
        ray_check(python, found.get("ray"), options.ray_address, options.nnodes),
    ]


class PreLaunch:
    """The ``verl`` trainer's checks before it launches a round: the Python that runs verl (what it has, what attention
    it allows), and on several nodes every node of the Ray cluster. Mixed into :class:`VerlGrpoTrainer`."""

    options: Any

    def job_facts(self) -> dict[str, Any]:
        """What the Python that runs verl has (``python`` option, default this one): read once, by a subprocess of that
        interpreter (:func:`envengineer.plugins.trainers.verl_probe.probe`), not from this process's imports."""
        if getattr(self, "_job_facts", None) is None:
            from envengineer.plugins.trainers.verl_probe import probe

            self._job_facts = probe(self.options.python or sys.executable)
        return self._job_facts

    def launch_record(self) -> dict[str, Any]:
        """How this machine runs the round (``details.json``'s ``launch``): the attention kernels and the job's Python."""
        facts = self.job_facts()
        attention, remove_padding = self.attention()
        flash = facts["flash_attn"]
        return {"attention": attention, "remove_padding": remove_padding, "python": facts["executable"],
                "flash_attn": facts["packages"].get("flash_attn") if flash["imports"] else None,
                **({"flash_attn_error": flash["error"]} if flash["error"] else {})}

    def warn_slow_attention(self, record: dict[str, Any]) -> None:
        """Say at launch that verl leaves the fast path (sdpa without padding removal) because flash-attn is missing."""
        if self.options.attention != "auto" or record["remove_padding"]:
            return
        from rich.console import Console

        why = f"does not import there ({record['flash_attn_error']})" if record.get("flash_attn_error") else "is not installed there"
        Console(stderr=True).print(
            f"[yellow]trainer.verl: flash-attn {why}, {record['python']}: verl runs sdpa without padding removal "
            "(slower, more memory). docs/verl.md says how to install flash-attn for the pinned torch and CUDA.[/]", highlight=False)

    def check_nodes(self, policy_path: Path, out_dir: Path) -> list[str]:
        """Before a multi-node round: every node of the Ray cluster has this node's Python environment, the base model
        at the same path and sees the round's folder (a marker written here); raises :class:`ConfigError` naming the
        nodes that lack something. The node names checked, in order."""
        from envengineer.plugins.trainers.verl_probe import node_problems, probe_cluster

        o = self.options
        marker = Path(out_dir).resolve() / ".node-check"
        marker.write_text("written by the launching node; every node must see it\n")
        model = Path(policy_path).resolve() / "config.json"
        try:
            nodes = probe_cluster(o.python or sys.executable, o.ray_address or "auto", [str(model), str(marker)])
        finally:
            marker.unlink(missing_ok=True)
        problems = node_problems(self.job_facts(), nodes, nnodes=o.nnodes)
        if problems:
            raise ConfigError(
                "trainer.verl: the Ray cluster is not ready for this round (every node needs the same Python environment, the "
                "base model at the same path and the run directory on shared storage; docs/verl.md, 'Several nodes'):\n- "
                + "\n- ".join(problems)
            )
        return sorted(nodes)

    def preflight(self, cfg: Any) -> None:
        """What verl's own entry point needs installed to launch, in the Python that runs it (not for the checks above);
        another ``module`` (a recipe's main) is trusted to know its own needs."""
        if not self.options.module.startswith("verl."):
            return
        facts = self.job_facts()
        where = f"in {facts['executable']}"
        if cfg.trainer.get("use_v1", False) and facts["packages"].get("TransferQueue") is None:
            raise ConfigError(
                f"trainer.verl: verl's main_ppo imports TransferQueue (trainer.use_v1 is true) and it is not installed {where}; "
                f"plain `pip install verl` does not bring it: {INSTALL_HINT}, or pip install 'TransferQueue>=0.1.10'"
            )
        if facts["packages"].get("vllm") is None:
            raise ConfigError(f"trainer.verl: vLLM (verl's rollout engine) is not installed {where}: {INSTALL_HINT}")
        if self.options.attention == "flash_attention_2" and not facts["flash_attn"]["imports"]:
            raise ConfigError(f"trainer.verl.attention: flash_attention_2, and flash-attn does not import {where} "
                              f"({facts['flash_attn']['error'] or 'not installed'}); see docs/verl.md on flash-attn, or attention: auto")
