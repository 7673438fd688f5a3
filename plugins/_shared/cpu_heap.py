"""Freed tensor memory kept in the process for reuse, for torch work on the CPU (glibc's ``mallopt``).

PyTorch's CPU allocator takes every tensor from ``malloc``. glibc serves a block above its mmap
threshold (128 KiB at start, raised as large blocks are freed, at most 32 MiB) with a fresh
``mmap`` and gives it back with ``munmap`` when it is freed, and it returns free memory at the top
of its heap to the system beyond a trim threshold. A decoding or training step allocates and frees
the same large activations over and over, so each step faults in fresh pages that the kernel
zeroes first. Measured on the tiny policy (one thread, 2-core AMD EPYC): greedy evaluation of 480
prompts took 270,000–350,000 page faults and 0.5–0.8 s of system time out of ~3 s; with
:func:`keep_freed_memory` 83,000–100,000 and 0.14–0.2 s. Over the whole quickstart that is system time
3.6 → 1.3 s of ~92 CPU s (2.6%) for a peak 0.1 GB higher (docs/performance.md, "Freed memory kept for
reuse"). Allocation changes no arithmetic: the same tensors get the same values wherever they live.

The cost is memory: the heap keeps what a process freed (up to :data:`TRIM_THRESHOLD` at its top)
instead of handing it back. Set ``ENVENGINEER_CPU_HEAP=0`` to leave ``malloc`` as it is. Without
glibc (macOS, Windows, musl) this does nothing.
"""

from __future__ import annotations

import ctypes
import functools
import logging
import os
import platform

logger = logging.getLogger(__name__)

#: the environment variable that turns this off ("0", "false", "no", "off")
ENV = "ENVENGINEER_CPU_HEAP"
#: blocks below this come from the heap (reused after free), not from a fresh ``mmap`` each time
MMAP_THRESHOLD = 1 << 30
#: free memory at the heap's top is given back to the system only beyond this
TRIM_THRESHOLD = 1 << 30
#: extra heap requested whenever the heap grows (fewer ``brk`` calls; untouched pages cost nothing)
TOP_PAD = 256 << 20

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_OFF = {"0", "false", "no", "off"}


@functools.cache
def keep_freed_memory() -> bool:
    """Tune glibc's ``malloc`` for this process (once; later calls return the first answer): freed
    blocks of up to :data:`MMAP_THRESHOLD` stay in the heap for reuse. Returns whether it is in
    effect: False without glibc, with ``ENVENGINEER_CPU_HEAP=0``, or when glibc refused a setting."""
    if os.environ.get(ENV, "").strip().lower() in _OFF:
        logger.debug("%s=%s: malloc left as it is", ENV, os.environ[ENV])
        return False
    if platform.libc_ver()[0] != "glibc":
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    settings = ((_M_MMAP_THRESHOLD, MMAP_THRESHOLD), (_M_TRIM_THRESHOLD, TRIM_THRESHOLD), (_M_TOP_PAD, TOP_PAD))
    accepted = [bool(mallopt(option, value)) for option, value in settings]
    if not accepted[0]:  # an older glibc caps the mmap threshold at half its heap size (32 MiB on 64-bit)
        accepted[0] = bool(mallopt(_M_MMAP_THRESHOLD, 32 << 20))
    logger.debug("malloc: mmap threshold, trim threshold, top pad accepted: %s", accepted)
    return all(accepted)
