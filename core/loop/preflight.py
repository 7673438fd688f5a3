"""What this machine and environment offer a GPU run, and what will not work: ``envengineer doctor``.

Each check says ``ok``, ``warn`` (works, but slower or riskier) or ``missing`` (a GPU run cannot
work), in one line, with a fix. The core checks the machine (torch and its CUDA build, the
driver, the GPUs and their free memory, NCCL settings); plugins add checks of their own through
the ``doctor_checks`` hook (a trainer its engine, kernels and cluster), so the core knows no
trainer. ``run`` calls the same checks before a run whose components need a GPU (a plugin
returned checks for one of them) and stops before anything is trained on a ``missing`` one.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from envengineer.components import gpus as gpu_info
from envengineer.errors import EnvEngineerError

Status = Literal["ok", "warn", "missing"]

#: How each status is shown.
STYLES: dict[str, str] = {"ok": "green", "warn": "yellow", "missing": "bold red"}


@dataclass(frozen=True)
class Check:
    """One line of ``envengineer doctor``: what was checked, what was found and why it matters, how to fix it."""

    name: str
    status: Status
    detail: str
    fix: str = ""


class NotReady(EnvEngineerError):
    """A run needs a GPU and this machine or environment lacks something it needs (the checks name what)."""

    def __init__(self, checks: Sequence[Check]) -> None:
        self.checks = list(checks)
        lines = [f"- {c.name}: {c.detail}" + (f" (fix: {c.fix})" if c.fix else "") for c in self.checks]
        super().__init__("this run needs a GPU, and the machine is not ready (envengineer doctor shows every check):\n" + "\n".join(lines))


def version(distribution: str) -> str | None:
    """The installed version of ``distribution`` in this interpreter, or None."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return None


def package_check(name: str, found: str | None, *, tested: str | None = None, install: str, where: str = "this Python") -> Check:
    """A package: ``missing`` when not installed (``install`` says how), ``warn`` when another release than ``tested``."""
    if found is None:
        return Check(name, "missing", f"not installed in {where}", install)
    if tested and found.split("+")[0] != tested:
        return Check(name, "warn", f"{found}; envengineer is tested with {tested}", f"pip install {name}=={tested}")
    return Check(name, "ok", found)


# ---------------------------------------------------------------------- the machine


def python_check() -> Check:
    return Check("python", "ok", f"{platform.python_version()} at {sys.executable}")


def torch_check(torch_version: str | None, cuda_build: str | None) -> Check:
    """torch and the CUDA version it was built for (``torch.version.cuda``; None: a CPU-only build)."""
    if torch_version is None:
        return Check("torch", "missing", "torch is not installed in this Python", 'pip install "envengineer[train]"')
    if cuda_build is None:
        return Check("torch", "warn", f"{torch_version}, a CPU-only build: no GPU training from this Python",
                     "install a CUDA build of torch (the verl extra brings torch 2.11 for CUDA 13)")
    return Check("torch", "ok", f"{torch_version}, built for CUDA {cuda_build}")


def driver_check(gpus: Sequence[gpu_info.Gpu] | None, cuda_build: str | None) -> Check:
    """The NVIDIA driver, and whether it runs torch's CUDA build (NVIDIA's minimum driver per CUDA major)."""
    if gpus is None:
        return Check("driver", "missing", "no GPU: no NVIDIA driver answers (nvidia-smi not found or failing)",
                     "run GPU rounds on a machine with NVIDIA GPUs and their driver; CPU runs (trl, the tiny policy) need none")
    if not gpus:
        return Check("driver", "missing", "no GPU: the NVIDIA driver lists no GPU", "check the GPUs with nvidia-smi")
    driver = gpus[0].driver
    if cuda_build is None:
        return Check("driver", "ok", f"{driver}")
    problem = gpu_info.driver_problem(driver, cuda_build)
    if problem:
        major = gpu_info.driver_branch(cuda_build)
        return Check("driver", "missing", problem,
                     f"install driver {gpu_info.MIN_DRIVER.get(major or 0, '?')} or newer; or, on datacenter GPUs, NVIDIA's CUDA "
                     f"forward-compatibility package (cuda-compat-{major}-x); or torch (and vLLM) built for an older CUDA")
    floor = gpu_info.MIN_DRIVER.get(gpu_info.driver_branch(cuda_build) or 0)
    return Check("driver", "ok", f"{driver}" + (f" (CUDA {cuda_build} needs {floor} or newer)" if floor else ""))


def gpus_check(gpus: Sequence[gpu_info.Gpu] | None, cuda_visible_devices: str | None) -> Check:
    """The GPUs a CUDA program here sees, with their free memory."""
    if not gpus:
        return Check("gpus", "missing", "no GPU", "run GPU rounds on a machine with NVIDIA GPUs")
    seen = gpu_info.visible(gpus, cuda_visible_devices)
    where = f" (CUDA_VISIBLE_DEVICES={cuda_visible_devices})" if cuda_visible_devices is not None else ""
    if seen is None:
        return Check("gpus", "warn", f"MIG instances{where} on {len(gpus)} GPU(s) ({gpus[0].name}); their free memory is not read",
                     "nvidia-smi shows each instance's memory; vLLM's memory wait is skipped")
    if not seen:
        return Check("gpus", "missing", f"{len(gpus)} GPUs, none visible{where}", "fix CUDA_VISIBLE_DEVICES")
    each = "; ".join(f"{g.index}: {g.name}, {g.free_gib:.1f} of {g.total_gib:.1f} GiB free" for g in seen)
    busy = [g for g in seen if g.free_mib < 0.9 * g.total_mib]
    if busy:
        return Check("gpus", "warn", f"{len(seen)} visible{where}: {each}",
                     f"GPU {', '.join(str(g.index) for g in busy)} already holds memory: vLLM needs gpu_memory_utilization × total free to start")
    return Check("gpus", "ok", f"{len(seen)} visible{where}: {each}")


def nccl_check(environ: dict[str, str], interfaces: Iterable[str] | None) -> Check:
    """The NCCL_* settings of this environment; an interface NCCL is told to use that this machine lacks is a problem."""
    settings = {k: v for k, v in sorted(environ.items()) if k.startswith("NCCL_")}
    if not settings:
        return Check("nccl", "ok", "no NCCL_* variables: NCCL picks the network itself",
                     "on several nodes, set NCCL_SOCKET_IFNAME (trainer.verl.env) if NCCL picks the wrong interface")
    text = ", ".join(f"{k}={v}" for k, v in settings.items())
    names = settings.get("NCCL_SOCKET_IFNAME")
    if names and interfaces is not None:
        have = set(interfaces)
        wanted = [n.lstrip("^=") for n in names.split(",") if n and not n.startswith("^")]
        exact = names.startswith("=")
        found = [n for n in wanted if n in have or (not exact and any(i.startswith(n) for i in have))]
        if wanted and not found:
            return Check("nccl", "warn", f"{text}; no interface here matches NCCL_SOCKET_IFNAME (interfaces: {', '.join(sorted(have))})",
                         "name an interface this node has (ip -br link)")
    return Check("nccl", "ok", text)


def network_interfaces() -> list[str] | None:
    try:
        return sorted(os.listdir("/sys/class/net"))
    except OSError:
        return None


def torch_build() -> tuple[str | None, str | None]:
    """torch's version and CUDA build in this interpreter (imports torch, without starting CUDA)."""
    try:
        import torch
    except ImportError:
        return None, None
    return str(torch.__version__), torch.version.cuda


def machine_checks(read_gpus: Callable[[], list[gpu_info.Gpu] | None] = gpu_info.read_gpus) -> list[Check]:
    torch_version, cuda_build = torch_build()
    gpus = read_gpus()
    return [
        python_check(),
        torch_check(torch_version, cuda_build),
        driver_check(gpus, cuda_build),
        gpus_check(gpus, os.environ.get("CUDA_VISIBLE_DEVICES")),
        nccl_check(dict(os.environ), network_interfaces()),
    ]


# ---------------------------------------------------------------------- plugins and the whole


def plugin_checks(pm: Any, components: Sequence[Any] | None) -> list[Check]:
    """The plugins' checks (the ``doctor_checks`` hook), the first of each name kept."""
    seen: dict[str, Check] = {}
    for result in pm.hook.doctor_checks(components=None if components is None else list(components)):
        for check in result or ():
            seen.setdefault(check.name, check)
    return list(seen.values())


def input_checks(components: Sequence[Any]) -> list[Check]:
    """What a run's components lack that they do not make themselves (``input_problem``: a policy's model folder),
    one ``missing`` check each; a component that lacks nothing adds none. A run stops on these before anything is
    written, GPU or not."""
    checks = []
    for component in components:
        ask = getattr(component, "input_problem", None)
        problem = ask() if callable(ask) else None
        if problem:
            checks.append(Check("model folder", "missing", *problem))
    return checks


def run_checks(pm: Any, components: Sequence[Any] | None = None) -> list[Check]:
    """Every check: the machine's, then the plugins' (for ``components``, or everything they offer when None)."""
    return machine_checks() + plugin_checks(pm, components)


def preflight(pm: Any, components: Sequence[Any]) -> list[Check]:
    """Before a run: nothing when no plugin checks any of its components (it needs no GPU); otherwise every check,
    raising :class:`NotReady` naming the ``missing`` ones."""
    own = plugin_checks(pm, components)
    if not own:
        return []
    checks = machine_checks() + own
    missing = [c for c in checks if c.status == "missing"]
    if missing:
        raise NotReady(missing)
    return checks


def table(checks: Sequence[Check], title: str = "envengineer doctor") -> Any:
    """The checks as a rich table."""
    from rich.markup import escape
    from rich.table import Table

    out = Table(title=title, show_lines=False)
    for column in ("check", "status", "found", "fix"):
        out.add_column(column, overflow="fold")
    for check in checks:
        style = STYLES.get(check.status, "")
        out.add_row(escape(check.name), f"[{style}]{check.status}[/]", escape(check.detail), escape(check.fix))
    return out
