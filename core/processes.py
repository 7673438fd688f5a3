"""A child job (a verl round, a vLLM engine, a suite's run) in a process group of its own, watched for stalls.

A GPU job starts processes of its own (Ray workers, vLLM's engine core, tensor-parallel workers);
ending only the child would leave them holding GPU memory. The child therefore starts a new
session (its own process group, the group id its pid), and :func:`end_group` ends the whole
group: SIGTERM first, SIGKILL to whatever is left after a grace period. :func:`watch` waits for
the child while checking that it still shows signs of life (its output or metrics grow); a job
silent for longer than the stall timeout raises :class:`Stalled`, and the caller ends the group
and fails with the log's tail. The stall timeout only fails a hung job: it never decides what a
job that runs produces.
"""

from __future__ import annotations

from pathlib import Path

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

from envengineer.errors import EnvEngineerError

#: Seconds a process group gets between SIGTERM and SIGKILL.
KILL_GRACE_S = 30.0


class Stalled(EnvEngineerError):
    """The job showed no sign of life (no new output or metrics) for longer than its stall timeout."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"no new output for {seconds / 60:.1f} minutes")
        self.seconds = seconds


def _cpuinfo(*keys: str) -> str | None:
    """The value of the first /proc/cpuinfo line whose key is one of ``keys`` (None: no such line, or no procfs)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() in keys:
                return value.strip()
    except OSError:
        pass
    return None


def cpu_model() -> str:
    """This machine's CPU model name (a native build runs on the CPU it was built for; the kernels MKL picks may
    differ between CPUs of one instruction set), from /proc/cpuinfo, else what :mod:`platform` says."""
    import platform

    return _cpuinfo("model name") or platform.processor() or platform.machine()


def cpu_features() -> str:
    """A fingerprint of this CPU's instruction-set extensions (sha256 of its sorted ``flags``, 16 hex digits).

    The model name alone does not tell CPUs apart: virtual machines of two EPYC generations both say
    ``AMD EPYC``, one with AVX-512 and one without, and a ``-march=native`` build made on the first dies of
    SIGILL on the second. A native build is therefore keyed on the model name and this fingerprint. Read
    from /proc/cpuinfo (``flags`` on x86, ``Features`` on Arm); where there is none, the machine's name."""
    import hashlib
    import platform

    flags = _cpuinfo("flags", "Features")
    if flags is None:
        return platform.machine()
    return hashlib.sha256(" ".join(sorted(flags.split())).encode()).hexdigest()[:16]


def free_port(host: str = "") -> int:
    """A TCP port nothing listens on at ``host`` now ("": every interface), for a child to bind next."""
    import socket

    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def start(command: list[str], **popen: Any) -> subprocess.Popen:
    """``subprocess.Popen(command, **popen)`` in a new session: the child leads a process group of its own."""
    return subprocess.Popen(command, start_new_session=True, **popen)


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` still runs (zombies, which hold no memory, do not count)."""
    if not os.path.isdir("/proc"):  # no procfs (macOS): ask the kernel, zombies included
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 2 and int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


def end_group(proc: subprocess.Popen, grace_s: float = KILL_GRACE_S) -> None:
    """End the child's whole process group: SIGTERM, then SIGKILL after ``grace_s`` to what is left."""
    end_groups([proc], grace_s)


def end_groups(procs: list[subprocess.Popen], grace_s: float = KILL_GRACE_S) -> None:
    """End the process groups of several children started by :func:`start` together: SIGTERM to every group
    at once, one grace period for all of them, then SIGKILL to whatever is left (grandchildren included)."""
    groups = {}
    for proc in procs:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except (ProcessLookupError, PermissionError):
            proc.poll()
            continue
        groups[proc.pid] = proc

    def wait(deadline: float, pause: float) -> None:
        while groups and time.monotonic() < deadline:
            for pgid, proc in list(groups.items()):
                proc.poll()  # reap the child, so that only the living count
                if not group_alive(pgid):
                    proc.poll()  # it may have become a zombie since: reap it
                    del groups[pgid]
            if groups:
                time.sleep(pause)

    wait(time.monotonic() + grace_s, 0.1)
    for pgid in groups:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    wait(time.monotonic() + 10, 0.05)  # SIGKILL is delivered asynchronously: return once it has been


def watch(
    proc: subprocess.Popen, *, activity: Callable[[], Any], stall_timeout_s: float | None, poll_s: float = 1.0,
    on_poll: Callable[[], Any] | None = None, done: Callable[[], bool] | None = None,
) -> int | None:
    """Wait for ``proc``; its exit code. ``activity()`` is any value that changes while the job lives (the
    sizes of its log and metrics files); unchanged for more than ``stall_timeout_s`` (None or 0: never) raises
    :class:`Stalled`. ``on_poll`` runs every ``poll_s``; ``done()`` true returns None while the child still runs
    (it answered and is shutting down)."""
    seen, since = activity(), time.monotonic()
    while True:
        try:
            return proc.wait(timeout=poll_s)
        except subprocess.TimeoutExpired:
            pass
        if on_poll is not None:
            on_poll()
        if done is not None and done():
            return None
        now = activity()
        if now != seen:
            seen, since = now, time.monotonic()
        elif stall_timeout_s and time.monotonic() - since > stall_timeout_s:
            raise Stalled(time.monotonic() - since)


def file_sizes(*paths: os.PathLike[str] | str) -> tuple[int, ...]:
    """The sizes of ``paths`` (-1 for a missing one): an ``activity`` for :func:`watch` over files a job writes."""
    sizes = []
    for path in paths:
        try:
            sizes.append(os.stat(path).st_size)
        except OSError:
            sizes.append(-1)
    return tuple(sizes)


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM to this process raises KeyboardInterrupt (so the job's group is ended and the
    run records an interruption, as after Ctrl-C); outside the main thread, nothing changes."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
