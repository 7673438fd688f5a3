"""scripts/gpu_check.py on the CPU (--cpu-smoke): every check's code path runs at a tiny shape and the table has its rows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu_check.py"


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
def test_cpu_smoke_runs_every_check_and_writes_the_table(tmp_path):
    out = tmp_path / "gpu-check.md"
    done = subprocess.run([sys.executable, str(SCRIPT), "--cpu-smoke", "--output", str(out), "--workdir", str(tmp_path / "work")],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    text = out.read_text()
    assert text.startswith("GPU: none (CPU smoke)")
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| check")]
    checks = [row.split(" | ")[0].lstrip("| ") for row in rows]
    assert checks == ["actor step", "actor step", "TRL loading and generation", "TRL loading and generation",
                      "verl checkpoint reload", "transformers policy"]
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert not cells[-1].startswith(("error", "out of memory")), row
        if cells[0] != "verl checkpoint reload":
            assert float(cells[4]) > 0  # the plan's estimate for the same rows
    # a verl-style checkpoint (float32 tensors, config bfloat16): transformers' default load rounds it to bfloat16,
    # an explicit float32 load (the trl trainer's model_dtype) is exact
    reload = next(r for r in rows if r.startswith("| verl checkpoint reload"))
    assert "default load: bfloat16" in reload and "float32 load: exact" in reload


def test_unknown_checks_are_refused():
    done = subprocess.run([sys.executable, str(SCRIPT), "--cpu-smoke", "--only", "actor,vllm"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "unknown checks ['vllm']" in done.stderr


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
def test_the_four_gpu_tp2_smoke_config_passes_verls_checks(tmp_path):
    """scripts/verl_smoke.sh --gpus 4 --tp 2 --prepare-only: the tiny model and a 4-GPU, tensor-parallel-2 config that
    verl's compose + validate_config accept (run --dry-run), without a GPU."""
    import os
    import shutil

    if shutil.which("bash") is None:
        pytest.skip("no bash")
    pytest.importorskip("verl")
    script = SCRIPT.parent / "verl_smoke.sh"
    env = {**os.environ, "SMOKE_DIR": str(tmp_path / "smoke"), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", str(script), "--prepare-only", "--gpus", "4", "--tp", "2"], capture_output=True, text=True,
                          timeout=600, env=env)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    assert "trainer.n_gpus_per_node=4" in done.stdout and "actor_rollout_ref.rollout.tensor_model_parallel_size=2" in done.stdout
    assert "tensor_parallel_size: 2" in (tmp_path / "smoke" / "verl-smoke.yaml").read_text()
    bad = subprocess.run(["bash", str(script), "--prepare-only", "--gpus", "3", "--tp", "2"], capture_output=True, text=True, env=env)
    assert bad.returncode == 1 and "cannot hold vLLM engines of --tp 2" in bad.stderr


@pytest.mark.long  # the long tier (docs/docs-tests.md#the-two-tiers)
def test_the_trl_smoke_cpu_form_trains_optimiser_steps(tmp_path):
    """scripts/gpu_smoke_trl.sh --cpu (docs/performance.md, "GPU smoke checks") end to end: the shipped warm
    start solves some training prompts sometimes, so the prefilter keeps prompts and GRPO takes its 2 steps
    (a reduced warm start solved none: the report failed on 0 steps)."""
    import os
    import re
    import shutil

    if shutil.which("bash") is None:
        pytest.skip("no bash")
    pytest.importorskip("trl")
    script = SCRIPT.parent / "gpu_smoke_trl.sh"
    env = {**os.environ, "SMOKE_DIR": str(tmp_path / "smoke"), "OMP_NUM_THREADS": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run(["bash", str(script), "--cpu"], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    trained = re.search(r"round 00: (\d+) optimiser steps.*kept (\d+) of 64 prompts", done.stdout)
    assert trained, done.stdout[-3000:]
    assert int(trained.group(1)) == 2 and int(trained.group(2)) >= 8  # at least one full batch of 8 prompts
    assert "SMOKE REPORT FAILED" not in done.stderr
