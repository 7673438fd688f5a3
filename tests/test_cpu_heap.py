"""plugins/_shared/cpu_heap.py: freed tensor memory stays in the process (glibc), off with ENVENGINEER_CPU_HEAP=0."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from envengineer.plugins._shared import cpu_heap

GLIBC = platform.system() == "Linux" and platform.libc_ver()[0] == "glibc"

# A decoding step's pattern: allocate a few large activations, use them, free them; count the page
# faults of the steps after the first (the process's own counter, so nothing else interferes).
_STEPS = """
import json, resource, sys
import torch
if sys.argv[1] == "tuned":
    from envengineer.plugins._shared.cpu_heap import keep_freed_memory
    on = keep_freed_memory()
else:
    on = None
def step():
    a = torch.empty(480, 1, 2048).fill_(1.0)   # ~3.9 MB, above glibc's starting mmap threshold
    b = torch.empty(480, 1, 2048).fill_(2.0)
    return float((a * b).sum())
step()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(40):
    step()
print(json.dumps({"on": on, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
"""


def _faults(mode: str, **env: str) -> dict:
    out = subprocess.run([sys.executable, "-c", _STEPS, mode], capture_output=True, text=True, check=True,
                         env={**os.environ, **env})
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture
def fresh():
    cpu_heap.keep_freed_memory.cache_clear()
    yield cpu_heap
    cpu_heap.keep_freed_memory.cache_clear()


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_freed_activations_are_reused_not_faulted_in_again():
    untuned = _faults("default")
    tuned = _faults("tuned")
    assert tuned["on"] is True
    # default glibc: the ~3.9 MB blocks come from fresh mmaps, ~1,000 pages a block (measured: ~53,000
    # faults over the 40 steps); tuned: the steps reuse the heap (measured: 0 to ~2,000, where a block
    # lands fresh once), never a block a step
    if untuned["faults"] < 2_000:  # e.g. transparent huge pages on every mapping: few faults to save
        pytest.skip(f"glibc's defaults faulted only {untuned['faults']} pages here")
    assert tuned["faults"] < untuned["faults"] / 10, (tuned, untuned)


@pytest.mark.skipif(not GLIBC, reason="glibc's malloc only")
def test_the_environment_variable_leaves_malloc_alone():
    off = _faults("tuned", ENVENGINEER_CPU_HEAP="0")
    untuned = _faults("default")
    assert off["on"] is False
    # not the tuned process's drop below a tenth of glibc's defaults (measured: a third to twice them,
    # as glibc's own threshold moves with what the process allocated before)
    assert off["faults"] >= untuned["faults"] / 10, (off, untuned)


@pytest.mark.parametrize("value", ["0", "false", "No", " off "])
def test_off_values(fresh, monkeypatch, value):
    monkeypatch.setenv(cpu_heap.ENV, value)
    assert fresh.keep_freed_memory() is False


def test_the_first_answer_holds_for_the_process(fresh, monkeypatch):
    monkeypatch.setenv(cpu_heap.ENV, "0")
    assert fresh.keep_freed_memory() is False
    monkeypatch.delenv(cpu_heap.ENV)
    assert fresh.keep_freed_memory() is False  # decided once: later calls do not retune


def test_nothing_happens_without_glibc(fresh, monkeypatch):
    monkeypatch.delenv(cpu_heap.ENV, raising=False)
    monkeypatch.setattr(cpu_heap.platform, "libc_ver", lambda: ("", ""))
    assert fresh.keep_freed_memory() is False
