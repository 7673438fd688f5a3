"""A hung or interrupted GPU job ends with everything it started, and a vLLM child waits for its GPU memory.

The hanging job is a real subprocess that starts a grandchild ignoring SIGTERM and then sleeps:
what a verl job with Ray workers, or a vLLM child with its engine core, looks like to the loop.
The GPU memory reader is the one thing faked (no GPU here): a function returning the readings
``nvidia-smi`` would, handed to the wait.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest

from envengineer.components.gpus import Gpu, GpuProcess

HANGING_JOB = """
import os, subprocess, sys, time
grandchild = subprocess.Popen([sys.executable, "-c",
    "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
with open(sys.argv[1] + ".tmp", "w") as handle:
    handle.write(f"{os.getpid()} {grandchild.pid}")
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
print("loading the model ...", flush=True)
if len(sys.argv) > 2:
    sys.exit(int(sys.argv[2]))
time.sleep(600)
"""


def gone(pid: int) -> bool:
    """No such process, or a zombie (it holds nothing) waiting for its parent."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state == "Z"


def pids(path: Path, timeout: float = 30.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, "the fake job never started"
        time.sleep(0.05)
    return [int(p) for p in path.read_text().split()]


@pytest.fixture()
def job(tmp_path):
    script = tmp_path / "hanging_job.py"
    script.write_text(HANGING_JOB)
    pidfile = tmp_path / "pids"
    started: list[int] = []
    yield script, pidfile, started
    for pid in started:  # never leave a sleeper behind, whatever the test did
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def verl_paths(tmp_path: Path) -> dict[str, Path]:
    return {"log": tmp_path / "verl.log", "metrics": tmp_path / "verl-metrics.jsonl", "curves": tmp_path / "curves.jsonl"}


@pytest.mark.slow
def test_a_stalled_verl_job_is_ended_with_its_whole_group(job, tmp_path):
    from envengineer.plugins.trainers.verl_launch import TrainingFailed, run_job

    script, pidfile, started = job
    started_at = time.monotonic()
    with pytest.raises(TrainingFailed) as failed:
        run_job([sys.executable, str(script), str(pidfile)], dict(os.environ), verl_paths(tmp_path), 3, "fake-verl",
                stall_timeout_s=2.0, grace_s=1.0)
    started.extend(pids(pidfile))
    message = str(failed.value)
    assert "stalled: no new output" in message and "stall_timeout_minutes" in message
    assert "loading the model ..." in message  # the log's tail
    assert time.monotonic() - started_at < 60
    assert all(gone(pid) for pid in started), [(pid, Path(f"/proc/{pid}/stat").read_text()[:40]) for pid in started if not gone(pid)]


@pytest.mark.slow
def test_sigterm_to_the_loop_ends_the_job_and_its_grandchild(job, tmp_path):
    from envengineer.plugins.trainers.verl_launch import run_job

    script, pidfile, started = job

    def terminate_us() -> None:
        started.extend(pids(pidfile))
        os.kill(os.getpid(), signal.SIGTERM)

    before = signal.getsignal(signal.SIGTERM)
    timer = threading.Thread(target=terminate_us)
    timer.start()
    with pytest.raises(KeyboardInterrupt):
        run_job([sys.executable, str(script), str(pidfile)], dict(os.environ), verl_paths(tmp_path), 3, "fake-verl",
                stall_timeout_s=None, grace_s=1.0)
    timer.join()
    assert len(started) == 2 and all(gone(pid) for pid in started), started
    assert signal.getsignal(signal.SIGTERM) is before  # SIGTERM means an interrupt only while the job runs


@pytest.mark.slow
def test_a_failed_job_leaves_nothing_running(job, tmp_path):
    from envengineer.plugins.trainers.verl_launch import TrainingFailed, run_job

    script, pidfile, started = job
    with pytest.raises(TrainingFailed, match="exited with code 3"):
        run_job([sys.executable, str(script), str(pidfile), "3"], dict(os.environ), verl_paths(tmp_path), 3, "fake-verl",
                stall_timeout_s=60.0, grace_s=1.0)
    started.extend(pids(pidfile))
    assert all(gone(pid) for pid in started), started


def test_the_stall_timeout_is_an_option_on_by_default(registry):
    trainer = registry.create("trainer", "verl", {})
    assert trainer.options.stall_timeout_minutes == 30 and trainer.options.stall_timeout_s == 1800
    assert registry.create("trainer", "verl", {"stall_timeout_minutes": 0}).options.stall_timeout_s is None
    assert registry.create("trainer", "verl", {"preset": "paper-4xh100"}).round_options(100).stall_timeout_minutes == 30


# ------------------------------------------------------------------ the vLLM child


@pytest.mark.slow
def test_a_silent_vllm_child_is_ended(tmp_path, monkeypatch):
    """A child that prints nothing for longer than its stall timeout: ended with its group, the error says so."""
    from envengineer.plugins._shared import vllm_child

    fake = tmp_path / "hang"
    (fake / "vllm").mkdir(parents=True)
    pidfile = tmp_path / "pids"
    (fake / "vllm" / "__init__.py").write_text(
        "import os, subprocess, sys, time\n"
        "print('INFO engine starting', flush=True)\n"
        "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pidfile)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "time.sleep(600)\n"
    )
    monkeypatch.setenv("PYTHONPATH", str(fake))
    limits = vllm_child.ChildLimits(stall_timeout_minutes=2 / 60, memory_wait_minutes=0)
    with pytest.raises(vllm_child.VllmChildError, match="(?s)stalled: no new output.*INFO engine starting"):
        vllm_child.generate({"model": "m"}, [vllm_child.request("hi")], temperature=0, top_p=1, max_tokens=4,
                            what="policy.vllm", limits=limits)
    found = pids(pidfile, timeout=1)
    try:
        assert all(gone(pid) for pid in found), found
    finally:
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


H100 = 81559  # MiB, as nvidia-smi reports an H100 80GB


def gpu(index: int, free: int, total: int = H100) -> Gpu:
    return Gpu(index, f"GPU-{index}aaa", "NVIDIA H100 80GB HBM3", total, total - free, free, "570.124.06")


class Clock:
    """Time that passes only when the wait sleeps."""

    def __init__(self) -> None:
        self.now = 0.0

    def sleep(self, seconds: float) -> None:
        self.now += seconds

    def __call__(self) -> float:
        return self.now


def test_the_memory_wait_returns_once_the_memory_is_free():
    from envengineer.plugins._shared.vllm_child import wait_for_memory

    clock, told = Clock(), []
    readings = iter([[gpu(0, 20000)], [gpu(0, 40000)], [gpu(0, 80000)]])
    wait_for_memory({"gpu_memory_utilization": 0.9}, wait_s=600, what="policy.vllm", reader=lambda: next(readings),
                    holders=list, sleep=clock.sleep, clock=clock, poll_s=5, notify=told.append)
    assert clock.now == 10  # two readings short, the third enough (0.9 × 81559 = 73403 MiB)
    assert told == ["policy.vllm: waiting up to 10 minutes for GPU memory before starting vLLM: GPU 0 (NVIDIA H100 80GB HBM3): "
                    "19.5 GiB free of 79.6 GiB, needs 71.7 GiB (gpu_memory_utilization 0.9 × 79.6 GiB)"]


def test_the_memory_wait_fails_with_the_numbers_and_who_holds_it():
    from envengineer.plugins._shared.vllm_child import VllmChildError, wait_for_memory

    clock = Clock()
    holders = [GpuProcess("GPU-1aaa", 4242, "python", 51200), GpuProcess("GPU-0aaa", 7, "other", 100)]
    with pytest.raises(VllmChildError) as failed:
        wait_for_memory({"gpu_memory_utilization": 0.55, "tensor_parallel_size": 2}, wait_s=60, what="engineer.checkpoint",
                        reader=lambda: [gpu(0, 80000), gpu(1, 30000), gpu(2, 100)], holders=lambda: holders,
                        sleep=clock.sleep, clock=clock, poll_s=5, notify=lambda message: None)
    message = str(failed.value)
    assert message.startswith("engineer.checkpoint: vLLM would not start: after waiting 1 minutes")
    assert "GPU 1 (NVIDIA H100 80GB HBM3): 29.3 GiB free of 79.6 GiB, needs 43.8 GiB (gpu_memory_utilization 0.55" in message
    assert "GPU 0" not in message.split("Held by")[0] and "GPU 2" not in message  # enough free / not one of its 2 GPUs
    assert "pid 4242 python (50.0 GiB)" in message and "pid 7" not in message
    assert clock.now >= 60


def test_no_driver_means_no_wait():
    from envengineer.plugins._shared.vllm_child import wait_for_memory

    wait_for_memory({}, wait_s=600, what="policy.vllm", reader=lambda: None, holders=list, sleep=pytest.fail)


def test_the_vllm_options_carry_the_limits(registry):
    policy = registry.create("policy", "vllm", {"path": "m", "memory_wait_minutes": 2, "stall_timeout_minutes": 5})
    assert (policy.options.memory_wait_minutes, policy.options.stall_timeout_minutes) == (2, 5)
    engineer = registry.create("engineer", "checkpoint", {})
    assert (engineer.options.memory_wait_minutes, engineer.options.stall_timeout_minutes) == (10, 30)


def test_mig_instances_are_not_waited_for(monkeypatch):
    """A MIG instance's free memory is not the whole GPU's: no reading, so no wait (vLLM itself still checks)."""
    from envengineer.components.gpus import visible_gpus
    from envengineer.plugins._shared.vllm_child import wait_for_memory

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-4f8e1c2a-1111-2222-3333-444455556666")
    whole = lambda: [gpu(0, 100)]  # noqa: E731 - the parent GPU, nearly full
    assert visible_gpus(whole) is None
    wait_for_memory({}, wait_s=600, what="policy.vllm", reader=lambda: visible_gpus(whole), holders=list, sleep=pytest.fail)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert visible_gpus(whole) == whole()
