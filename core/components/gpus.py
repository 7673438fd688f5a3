"""What the NVIDIA driver says about this machine's GPUs, read from ``nvidia-smi`` (never through torch).

Reading memory through torch would create a CUDA context in this process, which itself holds GPU
memory; ``nvidia-smi`` (installed with every NVIDIA driver) answers from outside. Each reading is
a parser of ``nvidia-smi``'s CSV output plus a function that runs it, so the parsers are tested on
recorded output and the rest of the code can be handed a reader of its own.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

GPU_FIELDS = "index,uuid,name,memory.total,memory.used,memory.free,driver_version"
APP_FIELDS = "gpu_uuid,pid,process_name,used_memory"

#: The oldest driver branch that runs an application built with each CUDA major version (NVIDIA's
#: CUDA minor version compatibility table: 13.x needs >= 580, 12.x >= 525, 11.x >= 450).
MIN_DRIVER = {13: 580, 12: 525, 11: 450}


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    total_mib: int
    used_mib: int
    free_mib: int
    driver: str = ""

    @property
    def total_gib(self) -> float:
        return self.total_mib / 1024

    @property
    def free_gib(self) -> float:
        return self.free_mib / 1024


@dataclass(frozen=True)
class GpuProcess:
    gpu_uuid: str
    pid: int
    name: str
    used_mib: int


def _rows(text: str) -> list[list[str]]:
    return [[cell.strip() for cell in line.split(",")] for line in text.splitlines() if line.strip()]


def _mib(cell: str) -> int:
    try:
        return int(float(cell))
    except ValueError:  # "[N/A]" (e.g. a MIG device without its own reading)
        return 0


def parse_gpus(text: str) -> list[Gpu]:
    """``nvidia-smi --query-gpu=GPU_FIELDS --format=csv,noheader,nounits`` as :class:`Gpu` rows."""
    gpus = []
    for row in _rows(text):
        if len(row) < 7 or not row[0].isdigit():
            continue
        gpus.append(Gpu(int(row[0]), row[1], row[2], _mib(row[3]), _mib(row[4]), _mib(row[5]), row[6]))
    return gpus


def parse_processes(text: str) -> list[GpuProcess]:
    """``nvidia-smi --query-compute-apps=APP_FIELDS --format=csv,noheader,nounits`` as :class:`GpuProcess` rows."""
    rows = []
    for row in _rows(text):
        if len(row) >= 4 and row[1].isdigit():
            rows.append(GpuProcess(row[0], int(row[1]), row[2], _mib(row[3])))
    return rows


def _smi(*args: str) -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        done = subprocess.run([exe, *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def read_gpus() -> list[Gpu] | None:
    """Every GPU the driver sees (all of them, whatever ``CUDA_VISIBLE_DEVICES`` says); None without a driver."""
    text = _smi(f"--query-gpu={GPU_FIELDS}", "--format=csv,noheader,nounits")
    return None if text is None else parse_gpus(text)


def read_processes() -> list[GpuProcess]:
    """The processes holding GPU memory, as far as ``nvidia-smi`` may tell (none in some containers)."""
    text = _smi(f"--query-compute-apps={APP_FIELDS}", "--format=csv,noheader,nounits")
    return [] if text is None else parse_processes(text)


def visible(gpus: Sequence[Gpu], cuda_visible_devices: str | None) -> list[Gpu] | None:
    """The GPUs a CUDA program sees, in its order: ``CUDA_VISIBLE_DEVICES`` (indices or UUIDs, a prefix is
    enough, as CUDA reads it) picks and orders them; unset, all of them by index. None when it names MIG
    instances (``MIG-...``), whose memory the whole GPU's reading does not tell."""
    if cuda_visible_devices is None:
        return sorted(gpus, key=lambda g: g.index)
    if "MIG-" in cuda_visible_devices:
        return None
    chosen: list[Gpu] = []
    for item in (part.strip() for part in cuda_visible_devices.split(",")):
        if not item:
            break
        match = [g for g in gpus if (item.isdigit() and g.index == int(item)) or (not item.isdigit() and g.uuid.startswith(item))]
        if not match:
            break  # CUDA stops at the first entry it cannot read
        chosen.append(match[0])
    return chosen


def visible_gpus(reader: Callable[[], list[Gpu] | None] = read_gpus) -> list[Gpu] | None:
    """:func:`visible` for this process's environment; None without a driver, or for MIG instances."""
    gpus = reader()
    return None if gpus is None else visible(gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))


def driver_branch(version: str) -> int | None:
    """The driver's branch (``570`` for ``570.124.06``)."""
    match = re.match(r"\s*(\d+)", version or "")
    return int(match.group(1)) if match else None


def driver_problem(driver: str, cuda: str) -> str | None:
    """Why driver ``driver`` cannot run code built for CUDA ``cuda`` (e.g. torch's ``torch.version.cuda``), or None."""
    branch = driver_branch(driver)
    major = driver_branch(cuda)
    if branch is None or major is None or major not in MIN_DRIVER:
        return None
    if branch < MIN_DRIVER[major]:
        newest = max((m for m, floor in MIN_DRIVER.items() if branch >= floor), default=None)
        can = f"; it runs CUDA {newest}.x builds" if newest else ""
        return f"driver {driver} is older than {MIN_DRIVER[major]}, the oldest that runs CUDA {major}.x builds (built for CUDA {cuda}){can}"
    return None
