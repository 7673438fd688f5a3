#!/usr/bin/env python
"""What a smoke run measured, read from its run directory through the project's own API.

    python scripts/smoke_report.py RUN_DIR [--round 0] [--require-gpu]

Prints the device (GPU name, or none), the library versions, the round's training
throughput (completions per second and optimiser steps per second, from its ``train`` line
in ``history.jsonl``), its reward curve (step, reward mean from
``round-NN/train/curves.jsonl``) and the validation valid rate before (base eval) and after
(the round's eval), with the paired change on the same instances. Last comes one Markdown
row for the table in docs/performance.md ("GPU smoke checks").

Exits 1, naming what is missing, when the run lacks any of these (no train line, zero
optimiser steps, no curve, no reward, no base or round eval) or the directory has
unreadable files; ``--require-gpu`` also fails when torch sees no CUDA device. Used by
scripts/gpu_smoke_trl.sh and scripts/verl_smoke.sh.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.metadata as metadata
import sys
from pathlib import Path
from typing import Any

from envengineer.store.rundir import RunDir
from envengineer.plugins.report.view import load_run_view, rate
from envengineer.store.records import paired_with_base


def gpu_name() -> str | None:
    """The first CUDA device's name as torch sees it, or None."""
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    return f"{torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda}, {torch.cuda.device_count()} device(s))"


def versions() -> str:
    found = []
    for package in ("torch", "transformers", "trl", "verl", "vllm"):
        try:
            found.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            pass
    return ", ".join(found)


def throughput(line: dict[str, Any]) -> dict[str, float | None]:
    """Optimiser steps, completions and their rates from a ``train`` history line.

    The trainer's own GRPO seconds (``train_seconds``: without the prefilter and the model
    loading) when it records them, else the step's seconds, else the history line's duration.
    """
    steps = line.get("steps")
    completions = line.get("completions")
    seconds = next((line[k] for k in ("train_seconds", "seconds", "duration_s") if isinstance(line.get(k), (int, float))), None)
    steps_per_s = line.get("steps_per_s")
    if steps_per_s is None and steps and seconds:
        steps_per_s = steps / seconds
    return {
        "steps": steps,
        "completions": completions,
        "seconds": seconds,
        "steps_per_s": steps_per_s,
        "completions_per_s": completions / seconds if completions and seconds else None,
    }


def fmt(value: Any, spec: str = ".3f") -> str:
    return "n/a" if value is None else format(value, spec)


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--round", type=int, default=0, help="the round to report (default 0)")
    parser.add_argument("--require-gpu", action="store_true", help="fail unless torch sees a CUDA device")
    args = parser.parse_args(argv)

    view = load_run_view(args.run_dir)
    rundir = RunDir(args.run_dir)
    errors: list[str] = [f"unreadable: {p}" for p in view.problems]
    label = f"{args.round:02d}"
    stage = next((s for s in view.rounds if s.index == args.round), None)
    validation = (view.config.get("eval") or {}).get("validation", "validation")

    print(f"== smoke report: {view.path}  (run {view.name}, trainer {(view.config.get('trainer') or {}).get('name')}, "
          f"policy {(view.config.get('policy') or {}).get('name')})")
    gpu = gpu_name()
    print(f"GPU: {gpu or 'none (torch sees no CUDA device)'}")
    if args.require_gpu and gpu is None:
        errors.append("no CUDA device visible to torch")
    print(f"versions: {versions()}")

    trainer = (view.config.get("trainer") or {}).get("name", "?")

    # ---------------------------------------------------------------- throughput
    train = rundir.done("train", args.round)
    if train is None:
        errors.append(f"history.jsonl has no train line for round {args.round}")
        tp: dict[str, Any] = {}
    else:
        tp = throughput(train)
        print(f"training, round {label}: {tp['steps']} optimiser steps, {tp['completions']} completions "
              f"in {fmt(tp['seconds'], '.1f')} s of GRPO (train step {fmt(train.get('duration_s'), '.1f')} s in all"
              + (f", prefilter {train['prefilter_seconds']} s: kept {train.get('prefilter_kept')} of {train.get('prefilter_prompts')} prompts"
                 if train.get("prefilter_seconds") is not None else "") + ")")
        tokens = train.get("throughput_tokens_per_gpu_s")
        print(f"throughput: {fmt(tp['completions_per_s'], '.1f')} completions/s, {fmt(tp['steps_per_s'])} optimiser steps/s"
              + (f", {tokens:.0f} tokens/s per GPU (verl's)" if isinstance(tokens, (int, float)) else ""))
        if trainer == "verl":
            print("  (verl counts training steps: one rollout of train_batch_size prompts each, "
                  "train_batch_size / ppo_mini_batch_size optimiser steps per training step)")
        if not tp["steps"]:
            errors.append(f"round {label} trained no optimiser step (steps: {tp['steps']})")

    # ---------------------------------------------------------------- reward curve
    curves = stage.curves if stage is not None else []
    print(f"reward curve (round-{label}/train/curves.jsonl): {len(curves)} logged step(s)")
    print(f"  {'step':>5}  {'reward_mean':>11}  {'reward_std':>10}  {'kl':>8}  {'length':>7}  {'seconds':>8}")
    for line in curves:
        print(f"  {line.get('step')!s:>5}  {fmt(line.get('reward_mean'), '11.4f')}  {fmt(line.get('reward_std'), '10.4f')}  "
              f"{fmt(line.get('kl'), '8.4f')}  {fmt(line.get('completion_length'), '7.1f')}  {fmt(line.get('seconds'), '8.1f')}")
    if not curves:
        errors.append(f"round-{label}/train/curves.jsonl is empty or missing")
    elif all(line.get("reward_mean") is None for line in curves):
        errors.append(f"round-{label}/train/curves.jsonl records no reward_mean")

    # ---------------------------------------------------------------- valid rates
    before = rate(view.base.eval, "valid_rate")
    after = rate(stage.eval, "valid_rate") if stage is not None else None
    n = rate(view.base.eval, "n")
    change = paired_with_base(stage.verdicts if stage is not None else None, view.base.verdicts)
    paired = f"  (same instances: +{change['gained']} −{change['lost']}, sign test p = {change['p']:.3f})" if change else ""
    print(f"valid rate on {validation} (n = {fmt(n, '.0f')}): before (base eval) {pct(before)} → after round {label} {pct(after)}{paired}")
    optimal = (rate(view.base.eval, "optimal_rate"), rate(stage.eval, "optimal_rate") if stage is not None else None)
    print(f"optimal rate: before {pct(optimal[0])} → after {pct(optimal[1])}")
    if before is None:
        errors.append("no base eval (base/eval/summary.json)")
    if after is None:
        errors.append(f"no eval of round {label} (round-{label}/eval/summary.json)")

    # ---------------------------------------------------------------- the docs row
    print("row for docs/performance.md (check | GPU | date | completions/s | steps/s | valid before → after):")
    print(f"| {trainer} | {gpu.split(' (')[0] if gpu else 'CPU form (not a figure)'} | {dt.date.today().isoformat()} | "
          f"{fmt(tp.get('completions_per_s'), '.1f')} | {fmt(tp.get('steps_per_s'))} | {pct(before)} → {pct(after)} |")

    if errors:
        for error in errors:
            print(f"SMOKE REPORT FAILED: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
