"""``envengineer doctor`` on this CPU machine, and the GPU-side logic fed what nvidia-smi prints on GPU machines."""

from __future__ import annotations

import sys

import pytest
import yaml
from rich.console import Console
from typer.testing import CliRunner

from envengineer.components import gpus as gpu_info
from envengineer.loop.preflight import Check, NotReady, driver_check, gpus_check, nccl_check, plugin_checks, preflight, torch_check

#: ``nvidia-smi --query-gpu=index,uuid,name,memory.total,memory.used,memory.free,driver_version --format=csv,noheader,nounits``
#: on a 4×H100 node with vLLM holding most of GPU 2.
SMI_GPUS = """\
0, GPU-5b7c0d1e-aaaa-bbbb-cccc-000000000000, NVIDIA H100 80GB HBM3, 81559, 1, 81079, 570.124.06
1, GPU-6c8d1e2f-aaaa-bbbb-cccc-000000000001, NVIDIA H100 80GB HBM3, 81559, 1, 81079, 570.124.06
2, GPU-7d9e2f30-aaaa-bbbb-cccc-000000000002, NVIDIA H100 80GB HBM3, 81559, 72100, 8980, 570.124.06
3, GPU-8e0f3041-aaaa-bbbb-cccc-000000000003, NVIDIA H100 80GB HBM3, 81559, [N/A], 81079, 570.124.06
"""
SMI_APPS = "GPU-7d9e2f30-aaaa-bbbb-cccc-000000000002, 31337, /usr/bin/python3, 72090\n"


def cli(*args: str):
    from envengineer.cli import commands as command_line

    # whole table rows, whatever the terminal; the commands' console (the gpu plugin's doctor and plan print
    # there too) is left as it was (its width follows the terminal: setting it back would fix it at what it read here)
    patch = pytest.MonkeyPatch()
    patch.setattr(command_line.state, "console", Console(width=250))
    try:
        return CliRunner().invoke(command_line.app, list(args))
    finally:
        patch.undo()


# ------------------------------------------------------------------ the command on this machine


@pytest.mark.slow
def test_doctor_on_a_cpu_machine_exits_0_with_a_no_gpu_line():
    result = cli("doctor")
    assert result.exit_code == 0, result.output
    out = " ".join(result.output.split())
    assert "no GPU on this machine" in out
    for name in ("python", "torch", "driver", "gpus", "nccl", "verl", "vllm", "TransferQueue", "flash-attn", "ray"):
        assert f"│ {name} " in result.output, name
    assert "no running cluster: verl starts a local one" in out  # no cluster was started to ask


def write_config(tmp_path, trainer: dict, policy: dict | None = None):
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({
        "name": "doctor", "task": {"name": "mapf-frozenlake", "agents": 2}, "rounds": 1, "budget": 8,
        "engineer": {"name": "fixed"}, "policy": policy or {"name": "tiny"}, "trainer": trainer,
        "eval": {"validation": "mapf-2agents-val", "limit": 4}, "output": str(tmp_path / "run"),
    }))
    return path


@pytest.mark.slow
def test_doctor_for_a_cpu_run_says_nothing_stops_it(tmp_path):
    result = cli("doctor", str(write_config(tmp_path, {"name": "trl"})))
    assert result.exit_code == 0, result.output
    assert "need no GPU" in " ".join(result.output.split())


@pytest.mark.slow
def test_doctor_and_run_stop_a_verl_run_this_machine_cannot_do(tmp_path):
    """A verl round on a machine without a GPU: doctor exits 1, and run stops before writing anything."""
    from envengineer.loop.steps import run

    config = write_config(tmp_path, {"name": "verl", "train_batch_size": 8, "ppo_mini_batch_size": 8})
    result = cli("doctor", str(config))
    assert result.exit_code == 1, result.output
    assert "would stop before training: missing driver, gpus" in " ".join(result.output.split())
    with pytest.raises(NotReady, match="(?s)needs a GPU.*- driver: no GPU"):
        run(config)
    assert not (tmp_path / "run").exists()


def paper_config(tmp_path, monkeypatch):
    """The README's examples/paper/v6.yaml, run from ``tmp_path`` as a user runs it from a clone (models/Qwen3-4B relative)."""
    import shutil
    from pathlib import Path

    shutil.copy(Path(__file__).resolve().parent.parent / "examples" / "paper" / "v6.yaml", tmp_path / "v6.yaml")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "v6.yaml"


def test_a_missing_model_folder_stops_the_dry_run_before_anything_is_written(tmp_path, monkeypatch):
    """The README's dry run without the weights: one ConfigError naming the folder and the download command,
    and no runs/paper-v6 half written (it was a 144-line Hydra traceback after writing round 0's data)."""
    from envengineer.errors import ConfigError
    from envengineer.loop.steps import run

    config = paper_config(tmp_path, monkeypatch)
    with pytest.raises(ConfigError, match=r"policy\.vllm\.path: the model folder models/Qwen3-4B .* does not exist; .*"
                                          r"hf download Qwen/Qwen3-4B --local-dir models/Qwen3-4B"):
        run(config, dry_run=True)
    assert not (tmp_path / "runs").exists()
    (tmp_path / "models" / "Qwen3-4B").mkdir(parents=True)
    (tmp_path / "models" / "Qwen3-4B" / "config.json").write_text("{}")  # a download cut short
    for dry in (True, False):
        with pytest.raises(ConfigError, match=r"is not a complete model folder: it lacks weights \(\*\.safetensors or \*\.bin\), "
                                              r"a tokenizer .*hf download Qwen/Qwen3-4B"):
            run(config, dry_run=dry)
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_doctor_reports_the_missing_model_folder_as_a_failed_check(tmp_path, monkeypatch):
    config = paper_config(tmp_path, monkeypatch)
    result = cli("doctor", str(config))
    assert result.exit_code == 1, result.output
    out = " ".join(result.output.split())
    assert "│ model folder │ missing │ policy.vllm.path: the model folder models/Qwen3-4B" in out
    assert "would stop before it starts: model folder missing" in out
    assert not (tmp_path / "runs").exists()
    from envengineer.loop.preflight import input_checks
    from envengineer.registry import load_registry
    from envengineer.loop.runconfig import load_run_config, resolve

    registry = load_registry()
    resolved = resolve(load_run_config(config, (), registry), registry)
    (check,) = input_checks([resolved.trainer, resolved.policy, resolved.engineer])
    assert check.status == "missing" and check.fix.endswith("hf download Qwen/Qwen3-4B --local-dir models/Qwen3-4B")


def test_a_model_folder_is_complete_with_config_weights_every_shard_and_a_tokenizer(tmp_path):
    import json

    from envengineer.components.model_folder import download_command, missing_files

    folder = tmp_path / "m"
    assert missing_files(folder) == ["the folder itself"]
    folder.mkdir()
    for name in ("config.json", "tokenizer.json", "model-00001-of-00002.safetensors"):
        (folder / name).write_text("{}")
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}))
    assert missing_files(folder) == ["model-00002-of-00002.safetensors"]
    (folder / "model-00002-of-00002.safetensors").write_text("")
    assert missing_files(folder) == []
    assert download_command(tmp_path / "Qwen3-8B") == f"hf download Qwen/Qwen3-8B --local-dir {tmp_path / 'Qwen3-8B'}"
    assert download_command("models/my-model").startswith("hf download <hub-id> --local-dir")


# ------------------------------------------------------------------ what nvidia-smi says, parsed


def test_nvidia_smi_output_parses_into_gpus_and_holders():
    gpus = gpu_info.parse_gpus(SMI_GPUS)
    assert [g.index for g in gpus] == [0, 1, 2, 3] and gpus[2].free_mib == 8980 and gpus[3].used_mib == 0
    assert gpus[0].driver == "570.124.06" and gpus[0].name == "NVIDIA H100 80GB HBM3"
    [holder] = gpu_info.parse_processes(SMI_APPS)
    assert (holder.pid, holder.used_mib, holder.gpu_uuid) == (31337, 72090, gpus[2].uuid)
    assert gpu_info.parse_gpus("") == [] and gpu_info.parse_processes("No running processes found\n") == []


def test_cuda_visible_devices_picks_and_orders_the_gpus():
    gpus = gpu_info.parse_gpus(SMI_GPUS)
    assert [g.index for g in gpu_info.visible(gpus, "2,0")] == [2, 0]
    assert [g.index for g in gpu_info.visible(gpus, "GPU-8e0f,1")] == [3, 1]  # a UUID prefix, as CUDA reads it
    assert [g.index for g in gpu_info.visible(gpus, "1,7,2")] == [1]  # CUDA stops at the first it cannot read
    assert gpu_info.visible(gpus, "") == [] and len(gpu_info.visible(gpus, None)) == 4
    mig = "MIG-4f8e1c2a-1111-2222-3333-444455556666"  # a MIG instance: the whole GPU's memory says nothing of it
    assert gpu_info.visible(gpus, mig) is None and gpus_check(gpus, mig).status == "warn"


@pytest.mark.parametrize("driver, cuda, needs", [
    ("570.124.06", "13.0", 580),   # the verl extra's torch 2.11 for CUDA 13 on an older datacenter driver
    ("535.183.01", "13.0", 580),
    ("470.256.02", "12.8", 525),
    ("418.67", "11.8", 450),
])
def test_a_driver_too_old_for_the_cuda_build_is_missing_with_the_minimum(driver, cuda, needs):
    problem = gpu_info.driver_problem(driver, cuda)
    assert problem is not None and f"older than {needs}" in problem and f"CUDA {cuda}" in problem
    gpus = [gpu_info.Gpu(0, "GPU-0", "NVIDIA A100-SXM4-80GB", 81920, 0, 81920, driver)]
    check = driver_check(gpus, cuda)
    assert check.status == "missing" and f"install driver {needs} or newer" in check.fix and "cuda-compat" in check.fix


def test_a_recent_enough_driver_is_ok():
    assert gpu_info.driver_problem("580.65.06", "13.0") is None
    assert gpu_info.driver_problem("575.51.03", "12.9") is None and gpu_info.driver_problem("525.60.13", "12.1") is None
    assert "runs CUDA 12.x builds" in gpu_info.driver_problem("570.124.06", "13.0")
    gpus = gpu_info.parse_gpus(SMI_GPUS.replace("570.124.06", "580.82.07"))
    assert driver_check(gpus, "13.0") == Check("driver", "ok", "580.82.07 (CUDA 13.0 needs 580 or newer)")


def test_no_driver_is_a_no_gpu_line():
    assert driver_check(None, "13.0").detail.startswith("no GPU")
    assert gpus_check(None, None).status == "missing"
    assert torch_check("2.13.0+cpu", None).status == "warn" and torch_check(None, None).status == "missing"


def test_gpus_show_free_memory_and_warn_about_a_busy_one():
    gpus = gpu_info.parse_gpus(SMI_GPUS)
    check = gpus_check(gpus, "0,2")
    assert check.status == "warn" and "2 visible (CUDA_VISIBLE_DEVICES=0,2)" in check.detail
    assert "2: NVIDIA H100 80GB HBM3, 8.8 of 79.6 GiB free" in check.detail and check.fix.startswith("GPU 2 already holds memory")
    assert gpus_check(gpus, "0,1").status == "ok"


def test_nccl_settings_are_listed_and_a_missing_interface_warned():
    assert nccl_check({}, ["lo", "eth0"]).status == "ok"
    wrong = nccl_check({"NCCL_SOCKET_IFNAME": "ib9", "NCCL_DEBUG": "INFO", "PATH": "/bin"}, ["lo", "eth0"])
    assert wrong.status == "warn" and "NCCL_DEBUG=INFO, NCCL_SOCKET_IFNAME=ib9" in wrong.detail and "PATH" not in wrong.detail
    assert nccl_check({"NCCL_SOCKET_IFNAME": "eth"}, ["lo", "eth0"]).status == "ok"  # a prefix, as NCCL reads it
    assert nccl_check({"NCCL_SOCKET_IFNAME": "=eth"}, ["lo", "eth0"]).status == "warn"  # = asks for the exact name
    assert nccl_check({"NCCL_SOCKET_IFNAME": "^docker,lo"}, ["lo", "eth0"]).status == "ok"  # exclusions only


# ------------------------------------------------------------------ the plugins' own checks


class ClaimsAGpu:
    """A plugin whose component needs a GPU and a library that is not installed."""

    class Component:
        pass

    from envengineer.hookspecs import hookimpl

    @staticmethod
    @hookimpl
    def doctor_checks(components):
        if components is None or any(isinstance(c, ClaimsAGpu.Component) for c in components):
            return [Check("fastlib", "missing", "not installed", "pip install fastlib")]
        return []


def test_a_plugin_contributes_checks_and_preflight_stops_on_its_missing_one(pm):
    pm.register(ClaimsAGpu, name="claims-a-gpu")
    assert [c.name for c in plugin_checks(pm, None) if c.name == "fastlib"] == ["fastlib"]
    assert preflight(pm, [object()]) == []  # a run nobody checks needs no GPU: nothing is asked of the machine
    with pytest.raises(NotReady) as stopped:
        preflight(pm, [ClaimsAGpu.Component()])
    names = [c.name for c in stopped.value.checks]
    assert "fastlib" in names and "pip install fastlib" in str(stopped.value)


def test_verl_flash_attn_is_judged_in_the_jobs_python(registry, tmp_path):
    """The probe runs the interpreter given as trainer.verl.python; a flash-attn that does not import is said so."""
    from envengineer.plugins.trainers.verl_doctor import flash_attn_check
    from envengineer.plugins.trainers.verl_probe import probe

    facts = probe(sys.executable, [str(tmp_path), str(tmp_path / "absent")])
    assert facts["executable"] == sys.executable and facts["paths"] == {str(tmp_path): True, str(tmp_path / "absent"): False}
    assert facts["packages"]["verl"] == "0.9.1"
    broken = {"packages": {"flash_attn": "2.8.3"}, "flash_attn": {"imports": False, "error": "ImportError: undefined symbol: _ZN3c10"}}
    check = flash_attn_check(broken, "flash_attention_2")
    assert check.status == "missing" and "installed (2.8.3) but does not import: ImportError: undefined symbol" in check.detail
    assert flash_attn_check(broken, "auto").status == "warn"
    fine = {"packages": {"flash_attn": "2.8.3"}, "flash_attn": {"imports": True, "error": None}}
    assert flash_attn_check(fine, "auto").detail == "2.8.3: flash_attention_2 with padding removal (used)"


def test_the_jobs_torch_is_read_without_importing_it_and_judged_against_the_driver():
    from envengineer.plugins.trainers.verl_doctor import job_torch_check
    from envengineer.plugins.trainers.verl_probe import probe

    import torch

    assert probe(sys.executable)["torch_cuda"] == torch.version.cuda  # None here: a CPU build
    old = lambda: gpu_info.parse_gpus(SMI_GPUS)  # noqa: E731 - driver 570
    check = job_torch_check("2.11.0+cu130", "13.0", read_gpus=old)
    assert check.status == "missing" and "older than 580" in check.detail and check.name == "verl torch"
    assert job_torch_check("2.11.0+cu128", "12.8", read_gpus=old).status == "ok"
    assert job_torch_check("2.13.0+cpu", None, read_gpus=old).status == "warn"


def test_the_cuda_build_is_read_from_a_cuda_torchs_version_file(tmp_path, monkeypatch):
    """A torch built for CUDA 13 as its wheel lays out torch/version.py, first on the probed Python's path."""
    from envengineer.plugins.trainers.verl_probe import probe

    fake = tmp_path / "site" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('the probe must not import torch')\n")
    (fake / "version.py").write_text("from typing import Optional\n\n__version__ = '2.11.0+cu130'\ndebug = False\n"
                                     "cuda: Optional[str] = '13.0'\nhip: Optional[str] = None\n")
    monkeypatch.setenv("PYTHONPATH", str(tmp_path / "site"))
    assert probe(sys.executable)["torch_cuda"] == "13.0"
