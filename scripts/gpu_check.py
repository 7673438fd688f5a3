#!/usr/bin/env python
"""GPU check on one GPU with torch and transformers only: measured peaks against `envengineer plan`.

    python scripts/gpu_check.py [--output gpu-check.md] [--only actor,trl,reload,policy]
    python scripts/gpu_check.py --cpu-smoke          # the same code paths on the CPU at a tiny shape

No vLLM, verl or Ray, no network, nothing downloaded: every model is Qwen3-4B shaped
(transformers' ``Qwen3Config`` + ``from_config``) with random weights. Four checks, each a row
of a markdown table that docs/performance.md can paste:

1. **actor step**: the actor's training step at the paper preset's shapes on one GPU: float32
   master weights under bf16 autocast, fused AdamW (lr 2e-6), gradient checkpointing, the worst
   micro-batch (two whole sequences of 1536 + 5120 tokens, under the preset's 16,384-token bound),
   log-probs per row as TRL and verl compute them. Two steps; the second step's peak
   (``torch.cuda.max_memory_allocated``) against the plan's forward/backward phase for the same
   rows. At 8 layers (reduced) and 36 (full; ~88 GB: it needs more than an 80 GB GPU, and says so).
2. **TRL loading and generation**: the one-GPU TRL recipe's loading (a bf16 checkpoint loaded as
   the policy in float32 and as the reference in bfloat16) and transformers generation of
   ``generation_chunk`` rows outside autocast; the peak against the plan's generation phase
   (without the optimizer state, which does not exist before the first step). Reduced: 1536-token
   prompts, 32 new tokens; full: the KV cache of 6,656-token sequences.
3. **verl checkpoint reload**: a checkpoint saved as verl saves its Hugging Face model (float32
   tensors under a config that says bfloat16) reloaded by transformers by default and in float32.
4. **transformers policy**: the ``transformers`` policy sampling on the GPU (dtype auto: bf16),
   against the plan's evaluation phase.

Exit status: 0 when every check ran (an out-of-memory is a result, reported in its row), 1 on an error.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

CHECKS = ("actor", "trl", "reload", "policy")


@dataclass(frozen=True)
class Scale:
    device: str
    shape: object  # envengineer.components.model_shape.ModelShape
    actor_layers: tuple[tuple[str, int], ...]  # (size name, layers)
    actor_rows: int
    prompt: int
    response: int
    generation_rows: int
    generation: tuple[tuple[str, int, int], ...]  # (size name, prompt tokens, new tokens)
    reload_layers: int
    policy_layers: int


def scales(cpu_smoke: bool) -> Scale:
    from envengineer.components.model_shape import KNOWN_SHAPES, ModelShape

    if cpu_smoke:
        tiny = ModelShape("tiny Qwen3", 64, 2, 4, 2, 16, 128, 512, True, True, source="--cpu-smoke")
        return Scale("cpu", tiny, (("reduced", 1), ("full", 2)), 2, 24, 40, 2, (("reduced", 16, 4), ("full", 60, 4)), 2, 2)
    return Scale("cuda", KNOWN_SHAPES["Qwen/Qwen3-4B"], (("reduced", 8), ("full", 36)), 2, 1536, 5120, 8,
                 (("reduced", 1536, 32), ("full", 6648, 8)), 8, 4)


# ---------------------------------------------------------------------- building blocks


def build(shape, layers: int, dtype, device: str, vocab: int | None = None):
    """A Qwen3 of ``shape`` with ``layers`` layers and random weights, in ``dtype`` on ``device``."""
    import torch
    from transformers import AutoModelForCausalLM, Qwen3Config

    config = Qwen3Config(hidden_size=shape.hidden_size, num_hidden_layers=layers, num_attention_heads=shape.num_heads,
                         num_key_value_heads=shape.num_kv_heads, head_dim=shape.head_dim, intermediate_size=shape.intermediate_size,
                         vocab_size=vocab or shape.vocab_size, tie_word_embeddings=shape.tied_embeddings, max_position_embeddings=8192)
    config._attn_implementation = "sdpa"
    torch.manual_seed(0)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(config, dtype=dtype)


class Peak:
    """Peak GPU memory inside the block (``torch.cuda.max_memory_allocated``); None on the CPU."""

    def __init__(self, device: str) -> None:
        self.device, self.bytes, self.seconds = device, None, 0.0

    def __enter__(self) -> "Peak":
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        self.started = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        import torch

        if self.device == "cuda":
            torch.cuda.synchronize()
            self.bytes = torch.cuda.max_memory_allocated()
        self.seconds = time.perf_counter() - self.started


def release() -> None:
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def trl_options(**values):
    from envengineer.plugins.trainers.trl_grpo import TrlGrpoOptions

    return TrlGrpoOptions(**values)


def phase(estimate, name: str, leave_out: tuple[str, ...] = ()) -> float:
    return sum(r.bytes for r in estimate.rows if r.phase == name and r.item not in leave_out)


def row_logps(logits, ids):
    """Per-token log-probs one row at a time, as TRL's selective_log_softmax and verl's fallback compute them."""
    import torch

    rows = [torch.log_softmax(row, dim=-1).gather(-1, index.unsqueeze(-1)).squeeze(-1) for row, index in zip(logits, ids)]
    return torch.stack(rows)


# ---------------------------------------------------------------------- the checks


def check_actor(s: Scale, size: str, layers: int) -> dict:
    import torch

    from envengineer.plugins.trainers.trl_memory import trl_memory

    shape = dataclasses.replace(s.shape, num_layers=layers)
    seq = s.prompt + s.response
    options = trl_options(per_device_train_batch_size=s.actor_rows, num_generations=2, gradient_checkpointing=True, beta=0.0,
                          optim="adamw_torch_fused", compute_dtype="bfloat16", prompt_tokens=s.prompt, max_completion_length=s.response)
    plan = phase(trl_memory(options, shape, 80e9), "forward/backward")
    model = build(shape, layers, torch.float32, s.device)
    model.gradient_checkpointing_enable()
    model.config.use_cache = False
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-6, **({"fused": True} if s.device == "cuda" else {"foreach": False}))
    ids = torch.randint(0, shape.vocab_size, (s.actor_rows, seq), device=s.device)

    def step() -> None:
        with torch.autocast(s.device, dtype=torch.bfloat16):
            logits = model(input_ids=ids[:, :-1], use_cache=False).logits
            loss = -row_logps(logits, ids[:, 1:]).float().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step()  # AdamW allocates its state at the first step: the second one is the steady state
    with Peak(s.device) as peak:
        step()
    return {"check": "actor step", "size": f"{size}: {layers} layers", "settings":
            f"fp32 weights, bf16 autocast, {'fused' if s.device == 'cuda' else 'per-tensor'} AdamW, checkpointing, {s.actor_rows} × {seq} tokens", "peak": peak, "plan": plan}


def check_trl(s: Scale, size: str, prompt: int, new: int, folder: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    from envengineer.plugins.trainers.trl_memory import trl_memory

    shape = s.shape
    checkpoint = folder / "bf16-checkpoint"
    if not checkpoint.exists():  # a hub-like bf16 checkpoint, written once
        model = build(shape, shape.num_layers, torch.bfloat16, "cpu")
        model.save_pretrained(checkpoint)
        del model
        release()
    options = trl_options(beta=0.001, model_dtype="float32", ref_dtype="bfloat16", generation="transformers",
                          generation_chunk=s.generation_rows, per_device_train_batch_size=s.generation_rows, num_generations=2,
                          generation_batch_size=s.generation_rows, prompt_tokens=prompt, max_completion_length=new)
    plan = phase(trl_memory(options, shape, 80e9), "generation", leave_out=("optimizer state",))
    with Peak(s.device) as peak:
        policy = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).to(s.device)
        reference = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.bfloat16).to(s.device)
        ids = torch.randint(0, shape.vocab_size, (s.generation_rows, prompt), device=s.device)
        with torch.no_grad():
            out = policy.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new,
                                  do_sample=True, temperature=1.0, top_k=0, pad_token_id=0)
    assert policy.dtype == torch.float32 and reference.dtype == torch.bfloat16 and out.shape[1] == prompt + new
    del policy, reference
    return {"check": "TRL loading and generation", "size": f"{size}: {s.generation_rows} rows × {prompt} + {new}",
            "settings": "policy fp32, reference bf16, generate outside autocast", "peak": peak, "plan": plan}


def check_reload(s: Scale, folder: Path) -> dict:
    import torch
    from transformers import AutoModelForCausalLM

    shape = dataclasses.replace(s.shape, num_layers=s.reload_layers)
    model = build(shape, s.reload_layers, torch.float32, "cpu")
    path = folder / "verl-style-checkpoint"
    model.save_pretrained(path)
    config = json.loads((path / "config.json").read_text())  # verl's hf_model: float32 tensors under the base model's config
    config["dtype"] = "bfloat16"
    (path / "config.json").write_text(json.dumps(config, indent=2))
    saved = {k: v.clone() for k, v in model.state_dict().items()}
    with Peak(s.device) as peak:
        default = AutoModelForCausalLM.from_pretrained(path).to(s.device)
        exact = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).to(s.device)
    rounded = max((default.state_dict()[k].float().cpu() - v).abs().max().item() for k, v in saved.items())
    same = all(torch.equal(exact.state_dict()[k].cpu(), v) for k, v in saved.items())
    result = f"default load: {str(default.dtype).replace('torch.', '')} (max change {rounded:.2g}); float32 load: " + ("exact" if same else "DIFFERS")
    return {"check": "verl checkpoint reload", "size": f"{s.reload_layers} layers", "settings": "fp32 tensors, config bfloat16",
            "peak": peak, "plan": None, "result": result, "ok": same}


def check_policy(s: Scale, folder: Path) -> dict:
    import torch

    from envengineer.plugins.policies import tiny_model
    from envengineer.plugins.policies.transformers_policy import TransformersOptions, TransformersPolicy

    tokenizer = tiny_model.build_tokenizer()
    shape = dataclasses.replace(s.shape, num_layers=s.policy_layers, vocab_size=len(tokenizer))
    path = folder / "policy-model"
    build(shape, s.policy_layers, torch.bfloat16, "cpu", vocab=len(tokenizer)).save_pretrained(path)
    tokenizer.save_pretrained(path)
    new, batch = 32, 8
    policy = TransformersPolicy(TransformersOptions(path=str(path), device=s.device, max_new_tokens=new, batch_size=batch, temperature=1.0, seed=0))
    prompts = [f"solve {i}: " + "abc " * 40 for i in range(batch)]
    plan = phase(policy.memory_plan(shape, 80e9, prompt_tokens=len(prompts[0])), "evaluation (transformers policy)")
    with Peak(s.device) as peak:
        texts = policy.sample(prompts)
    policy.close()
    model_dtype = "bf16" if s.device == "cuda" else "fp32"
    return {"check": "transformers policy", "size": f"{s.policy_layers} layers, {batch} prompts", "settings":
            f"device {s.device}, dtype auto ({model_dtype}), {new} new tokens", "peak": peak, "plan": plan,
            "result": f"{sum(len(t[0]) for t in texts)} characters sampled"}


# ---------------------------------------------------------------------- the table


def gb(size: float | None) -> str:
    return "n/a" if size is None else f"{size / 1e9:.3g}"


def table(rows: list[dict], device: str) -> str:
    lines = ["| check | size | settings | peak GB (measured) | plan GB | measured / plan | seconds | result |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        peak = r["peak"].bytes if r.get("peak") else None
        ratio = f"{peak / r['plan']:.2f}" if peak and r.get("plan") else "n/a"
        seconds = f"{r['peak'].seconds:.1f}" if r.get("peak") else "n/a"
        lines.append(f"| {r['check']} | {r['size']} | {r['settings']} | {gb(peak)} | {gb(r.get('plan'))} | {ratio} | {seconds} | {r.get('result', 'ran')} |")
    return "\n".join(lines)


def environment(device: str) -> str:
    import platform

    import torch
    import transformers

    gpu = torch.cuda.get_device_name(0) if device == "cuda" else "none (CPU smoke)"
    total = f", {torch.cuda.get_device_properties(0).total_memory / 1e9:.1f} GB" if device == "cuda" else ""
    return (f"GPU: {gpu}{total}; torch {torch.__version__} (CUDA {torch.version.cuda}); transformers {transformers.__version__}; "
            f"Python {platform.python_version()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu-smoke", action="store_true", help="the same code paths on the CPU at a tiny shape")
    parser.add_argument("--only", default=",".join(CHECKS), help=f"comma-separated checks among {', '.join(CHECKS)}")
    parser.add_argument("--output", type=Path, help="also write the markdown table to this file")
    parser.add_argument("--workdir", type=Path, help="where the checkpoints go (default: a temporary folder)")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    only = [c.strip() for c in args.only.split(",") if c.strip()]
    unknown = sorted(set(only) - set(CHECKS))
    if unknown:
        parser.error(f"--only: unknown checks {unknown} (known: {', '.join(CHECKS)})")
    if not args.cpu_smoke and not torch.cuda.is_available():
        print("gpu_check: torch sees no CUDA device (--cpu-smoke runs the same code on the CPU)", file=sys.stderr)
        return 1
    s = scales(args.cpu_smoke)
    rows: list[dict] = []
    failed = False
    with tempfile.TemporaryDirectory() as temp:
        folder = args.workdir or Path(temp)
        folder.mkdir(parents=True, exist_ok=True)
        jobs = []
        if "actor" in only:
            jobs += [(lambda size=size, layers=layers: check_actor(s, size, layers), f"actor step ({size})") for size, layers in s.actor_layers]
        if "trl" in only:
            jobs += [(lambda size=size, p=p, n=n: check_trl(s, size, p, n, folder), f"TRL generation ({size})") for size, p, n in s.generation]
        if "reload" in only:
            jobs.append((lambda: check_reload(s, folder), "verl checkpoint reload"))
        if "policy" in only:
            jobs.append((lambda: check_policy(s, folder), "transformers policy"))
        for job, name in jobs:
            print(f"== {name}", file=sys.stderr, flush=True)
            try:
                rows.append(job())
            except torch.OutOfMemoryError as exc:
                rows.append({"check": name, "size": "", "settings": "", "result": f"out of memory: {str(exc).splitlines()[0][:120]}"})
            except Exception as exc:  # reported in the table and the exit status; the other checks still run
                traceback.print_exc()
                rows.append({"check": name, "size": "", "settings": "", "result": f"error: {type(exc).__name__}: {exc}"[:200]})
                failed = True
            if rows[-1].get("ok") is False:
                failed = True
            release()
    text = f"{environment(s.device)}\n\n{table(rows, s.device)}\n"
    print(text)
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
