"""``envengineer plan``: a run's GPU memory per GPU against hand arithmetic for Qwen3-4B, and the fit decisions
of the shipped recipes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from envengineer.errors import ConfigError
from envengineer.plugins.gpu.plan import plan_run
from envengineer.components.model_shape import GB, KNOWN_SHAPES, model_shape

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
QWEN3_4B = KNOWN_SHAPES["Qwen/Qwen3-4B"]


def test_qwen3_4b_by_hand():
    m = QWEN3_4B
    # embedding 151,936 × 2560 (tied: no separate lm_head); per layer q 2560×4096, k and v 2560×1024 each,
    # o 4096×2560, MLP 3 × 2560×9728, two RMSNorms of 2560 and q/k norms of 128; the final norm
    layer = 2560 * 4096 + 2 * 2560 * 1024 + 4096 * 2560 + 3 * 2560 * 9728 + 2 * 2560 + 2 * 128
    assert m.parameters == 151936 * 2560 + 36 * layer + 2560 == 4_022_468_096  # 4.02 B
    assert round(m.weights("fp32") / GB, 1) == 16.1
    assert round(m.parameters * 8 / GB, 1) == 32.2  # AdamW's two fp32 moments
    assert m.kv_per_token("fp32") == 2 * 36 * 8 * 128 * 4 == 288 * 1024  # 288 KiB per token
    assert m.kv_per_token("bf16") == 144 * 1024
    # four rows near 1536 + 5120 tokens: ~8 GB of bf16 logits per micro-batch
    assert round(m.logits(4 * 6656, "bf16") / GB, 1) == 8.1


@pytest.mark.parametrize("name", ["Qwen/Qwen3-0.6B", "Qwen/Qwen3-4B", "Qwen/Qwen3-8B"])
def test_built_in_shapes_count_what_transformers_builds(name):
    """The table's parameter counts against transformers' own Qwen3 built on the meta device (no weights)."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    m = KNOWN_SHAPES[name]
    config = Qwen3Config(hidden_size=m.hidden_size, num_hidden_layers=m.num_layers, num_attention_heads=m.num_heads,
                         num_key_value_heads=m.num_kv_heads, head_dim=m.head_dim, intermediate_size=m.intermediate_size,
                         vocab_size=m.vocab_size, tie_word_embeddings=m.tied_embeddings)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    assert sum(p.numel() for p in model.parameters()) == m.parameters


def _qwen3_config(path: Path, **changes) -> Path:
    from transformers import Qwen3Config

    m = QWEN3_4B
    values = dict(hidden_size=m.hidden_size, num_hidden_layers=m.num_layers, num_attention_heads=m.num_heads,
                  num_key_value_heads=m.num_kv_heads, head_dim=m.head_dim, intermediate_size=m.intermediate_size,
                  vocab_size=m.vocab_size, tie_word_embeddings=True)
    config = Qwen3Config(**{**values, **changes})
    path.mkdir(parents=True, exist_ok=True)
    config.save_pretrained(path)
    return path


def test_the_shape_comes_from_a_local_dir_a_cached_snapshot_or_the_table(tmp_path, monkeypatch):
    local = model_shape(str(_qwen3_config(tmp_path / "my-model", num_hidden_layers=2)))
    assert local.num_layers == 2 and local.source.startswith("config.json in")
    # a hub id found in the hub cache (refs/main names the snapshot)
    cache = tmp_path / "hub"
    repo = cache / "models--Qwen--Qwen3-4B"
    _qwen3_config(repo / "snapshots" / "abc123", num_hidden_layers=3)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("abc123")
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    cached = model_shape("Qwen/Qwen3-4B")
    assert cached.num_layers == 3 and cached.source.startswith("cached hub snapshot")
    # neither: the built-in table, by name
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "empty"))
    built_in = model_shape("models/Qwen3-4B")
    assert built_in.parameters == QWEN3_4B.parameters and built_in.source.startswith("built-in shape of Qwen/Qwen3-4B")
    with pytest.raises(ConfigError, match="policy.path: no config.json at models/Llama-9B"):
        model_shape("models/Llama-9B")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "config.json").write_text('{"hidden_size": 8}')
    with pytest.raises(ConfigError, match="no num_hidden_layers"):
        model_shape(str(tmp_path / "broken"))


def _plan(registry, config, *overrides, gb=80.0):
    return plan_run(config, overrides, registry, gb)


def _phase_rows(plan, phase):
    return {row.item: row.bytes for row in plan.rows if row.phase == phase}


def test_the_paper_preset_fits_four_80gb_gpus(registry):
    plan = _plan(registry, EXAMPLES / "paper" / "v6.yaml")
    assert plan.fits and not plan.fixes
    update = _phase_rows(plan, "actor update")
    # fp32 weights, gradients and AdamW sharded over 4 GPUs
    assert round(update["actor weights"] / GB, 2) == round(QWEN3_4B.parameters * 4 / 4 / GB, 2) == 4.02
    assert round(update["AdamW state (m, v)"] / GB, 2) == 8.04
    # the worst micro-batch is bounded by tokens: 16,384 of them, logits and their gradient in bf16
    assert update["logits and their gradient (bf16)"] == 2 * 16384 * 151936 * 2
    rollout = _phase_rows(plan, "rollout (vLLM awake)")
    assert sum(v for k, v in rollout.items() if k.startswith("vLLM")) == pytest.approx(0.55 * 80 * GB)
    assert "reference weights" not in rollout  # offloaded
    # the worst micro-batch with and without the token bound, both shown
    assert any("without the token bound (4 × 6,656 tokens)" in note for note in plan.parts["trainer verl"].notes)
    # without the token bound, four whole sequences of 6,656 tokens: ~16 GB of logits and gradient
    bounded = _plan(registry, EXAMPLES / "paper" / "v6.yaml", "trainer.use_dynamic_bsz=false")
    assert _phase_rows(bounded, "actor update")["logits and their gradient (bf16)"] == 2 * 4 * 6656 * 151936 * 2


def test_one_gpu_verl_needs_offload_and_a_token_bound(registry):
    one = ("name=v6-1gpu", "trainer.n_gpus_per_node=1", "trainer.tensor_model_parallel_size=1", "trainer.gpu_memory_utilization=0.4")
    plan = _plan(registry, EXAMPLES / "paper" / "v6.yaml", *one)
    assert not plan.fits
    update = _phase_rows(plan, "actor update")
    assert round((update["actor weights"] + update["gradients"] + update["AdamW state (m, v)"]) / GB, 1) == 64.4  # no sharding
    rollout = plan.phases()["rollout (vLLM awake)"]
    assert rollout == pytest.approx(QWEN3_4B.parameters * 12 + 0.4 * 80 * GB)  # weights + AdamW resident beside vLLM's share
    fixes = [" ".join(f.overrides) for f in plan.fixes]
    assert any("trainer.actor_param_offload=true trainer.optimizer_offload=true" in f and "max_token_len_per_gpu=8192" in f for f in fixes), fixes
    fixed = _plan(registry, EXAMPLES / "paper" / "v6.yaml", *one, *plan.fixes[0].overrides)
    assert fixed.fits
    assert "64.4 GB per node in pinned host memory" in " ".join(fixed.parts["trainer verl"].notes)


def test_the_one_gpu_trl_recipe_fits_80gb(registry):
    plan = _plan(registry, EXAMPLES / "qwen3-one-gpu-trl.yaml")
    assert plan.fits, plan.phases()
    forward = _phase_rows(plan, "forward/backward")
    assert round(forward["policy weights"] / GB, 1) == 16.1 and round(forward["gradients"] / GB, 1) == 16.1
    assert round(forward["reference weights"] / GB, 1) == 8.0  # bf16
    assert round(forward["optimizer state"] / GB, 1) == 8.0  # 8-bit AdamW: 2 bytes per parameter
    assert any(k.startswith("vLLM (colocated)") for k in _phase_rows(plan, "generation"))
    # with 32-bit AdamW it needs a bigger GPU: 86.5 GB, a 141 GB H200
    full = _plan(registry, EXAMPLES / "qwen3-one-gpu-trl.yaml", "trainer.optim=adamw_torch_fused")
    assert not full.fits and round(full.peak[1] / GB, 1) == 86.5
    assert _plan(registry, EXAMPLES / "qwen3-one-gpu-trl.yaml", "trainer.optim=adamw_torch_fused", gb=141).fits


def _fp32_everything_at_once(tmp_path: Path) -> Path:
    """The one-GPU TRL recipe as it was: fp32 policy and reference, the 1,024-row generation batch in one generate call."""
    config = yaml.safe_load((EXAMPLES / "qwen3-one-gpu-trl.yaml").read_text())
    trainer = config["trainer"]
    for key in ("model_dtype", "compute_dtype", "ref_dtype", "optim", "generation", "vllm_gpu_memory_utilization", "vllm_sleep"):
        trainer.pop(key)
    trainer.update(per_device_train_batch_size=4, gradient_accumulation_steps=32, generation_batch_size=1024)
    path = tmp_path / "fp32.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def test_fp32_and_1024_rows_at_once_does_not_fit_and_the_cli_names_the_fixes(registry, tmp_path):
    path = _fp32_everything_at_once(tmp_path)
    plan = _plan(registry, path)
    generation = _phase_rows(plan, "generation")
    kv = generation["KV cache (float32: generate runs outside autocast)"]
    assert kv == 1024 * 6656 * 288 * 1024  # every row of the generation batch at once, fp32: ~2 TB
    assert round(_phase_rows(plan, "forward/backward")["reference weights"] / GB, 1) == 16.1  # fp32, as TRL loads it
    from envengineer.cli.commands import app

    result = CliRunner().invoke(app, ["plan", str(path), "--gpu-memory-gb", "80", "--json", str(tmp_path / "plan.json")])
    assert result.exit_code == 1, result.output
    assert "does not fit" in result.output and "these overrides make it fit" in result.output
    assert "trainer.generation_chunk=8" in result.output or "trainer.generation=vllm" in result.output
    written = json.loads((tmp_path / "plan.json").read_text())
    assert written["fits"] is False and written["fixes"] and written["model_source"].startswith("built-in shape")
    assert "the CUDA context" in " ".join(written["leaves_out"])
    # each fix named fits when applied
    for fix in plan.fixes:
        assert _plan(registry, path, *fix.overrides).fits


@pytest.mark.parametrize("config", ["paper/v6.yaml", "qwen3-one-gpu-trl.yaml"])
def test_the_shipped_recipes_fit_from_the_command_line(config):
    from envengineer.cli.commands import app

    result = CliRunner().invoke(app, ["plan", str(EXAMPLES / config), "--gpu-memory-gb", "80"])
    assert result.exit_code == 0, result.output
    assert "fits: the largest phase" in result.output and "left out of the estimate" in result.output


def test_a_vllm_share_without_room_for_one_sequence_does_not_fit(registry):
    plan = _plan(registry, EXAMPLES / "paper" / "v6.yaml", "trainer.gpu_memory_utilization=0.06")
    assert not plan.fits and any("vLLM refuses to start" in p for p in plan.problems)
