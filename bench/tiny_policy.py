"""Warm start + GRPO rounds of the embedded tiny policy, measured on a fixed held-out set.

Prints: warm-start time and throughput, the base model's greedy valid rate, then for
each GRPO round: training time, steps/s, reward, share of zero-variance groups, and
the held-out valid rate with its standard error (overall and per size). The held-out
set is the 480-instance ``mapf-2agents-val`` benchmark (built and cached if its file
is not shipped yet); it never shrinks.

    python bench/tiny_policy.py                               # the tiny defaults, trl defaults
    python bench/tiny_policy.py --rounds 3 --lr 1e-4 --temperature 0.7 --prefilter 4 \
        --round-instances 2400 --batch 64 --max-completion 64   # the quickstart's GRPO
    python bench/tiny_policy.py --base DIR ...                 # start from a model directory

Each round trains on fresh instances (uniform config, a new seed per round), as the loop does.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections import defaultdict
from pathlib import Path


def held_out(cache: Path) -> list[dict]:
    from envengineer.registry import load_registry

    spec = load_registry(entry_points=False).benchmark("mapf-2agents-val")
    if spec.path.exists():
        return [json.loads(line) for line in spec.path.read_text().splitlines() if line.strip()]
    path = cache / "mapf-2agents-val.built.jsonl"
    if not path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(r) + "\n" for r in spec.build()))
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def evaluate(policy, generator, validator, records) -> dict:
    started = time.perf_counter()
    texts = policy.sample([generator.render(r, "compact") for r in records], n=1)
    by_size: dict[int, list[int]] = defaultdict(list)
    failures: dict[str, int] = defaultdict(int)
    valid = optimal = 0
    for record, (text,) in zip(records, texts):
        verdict = validator.score(record, generator.decode_response(record, text, "compact"))
        valid += verdict.valid
        optimal += verdict.optimal
        by_size[record["size"]].append(int(verdict.valid))
        if not verdict.valid:
            failures[verdict.failure or "?"] += 1
    n = len(records)
    rate = valid / n
    return {
        "n": n, "valid": rate, "se": math.sqrt(rate * (1 - rate) / n), "optimal": optimal / n,
        "by_size": {s: round(sum(v) / len(v), 3) for s, v in sorted(by_size.items())},
        "failures": dict(sorted(failures.items(), key=lambda kv: -kv[1])),
        "seconds": round(time.perf_counter() - started, 2),
    }


def show(label: str, ev: dict) -> None:
    sizes = " ".join(f"{s}:{v:.2f}" for s, v in ev["by_size"].items())
    print(f"{label:<10} valid {ev['valid']:.3f} ± {ev['se']:.3f}  optimal {ev['optimal']:.3f}  "
          f"[{sizes}]  eval {ev['seconds']}s  failures {ev['failures']}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--instances", type=int, default=None, help="warm-start instances (default: the tiny policy's)")
    ap.add_argument("--epochs", type=float, default=None, help="warm-start epochs (default: the tiny policy's)")
    ap.add_argument("--sft-lr", type=float, default=None, help="warm-start learning rate")
    ap.add_argument("--sft-batch", type=int, default=None, help="warm-start batch size")
    ap.add_argument("--base", type=Path, default=None, help="start from this model directory (skip the warm start)")
    ap.add_argument("--max-new-tokens", type=int, default=96, help="greedy evaluation length (answers on the val set are at most 60 tokens)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--round-instances", type=int, default=None, help="fresh training instances per round")
    ap.add_argument("--max-steps", type=int, default=None)
    ap.add_argument("--lr", type=float, default=None)
    ap.add_argument("--beta", type=float, default=None)
    ap.add_argument("--temperature", type=float, default=None)
    ap.add_argument("--generations", type=int, default=None)
    ap.add_argument("--batch", type=int, default=None, help="completions per optimiser step")
    ap.add_argument("--prefilter", type=int, default=None, help="samples per prompt for the mixed-outcome filter (0: off)")
    ap.add_argument("--max-completion", type=int, default=None)
    ap.add_argument("--loss-type", default=None)
    ap.add_argument("--optimality-bonus", type=float, default=None, help="added to R_acc for an optimal answer")
    ap.add_argument("--negative-weight", type=float, default=None, help="weight of negative advantages (1: plain GRPO)")
    ap.add_argument("--epochs-rl", type=float, default=None, help="GRPO passes over a round's prompts")
    ap.add_argument("--keep-tail", action="store_true", help="keep tokens after the answer's end in the GRPO loss")
    ap.add_argument("--grpo", action="append", default=[], metavar="KEY=VALUE", help="a further TRL GRPOConfig field (YAML value)")
    ap.add_argument("--optim", default=None, help="transformers optimizer name (adamw_torch, sgd, ...)")
    ap.add_argument("--scale-rewards", default=None, choices=["group", "batch", "none"])
    ap.add_argument("--threads", type=int, default=1, help="torch threads (1: measured fastest on 2 shared cores)")
    ap.add_argument("--heldout", type=Path, default=None, help="instances JSONL to measure on instead of mapf-2agents-val")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp")) / "envengineer-bench-tiny")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    import transformers

    transformers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    from envengineer.registry import load_registry
    from envengineer.components.training import TrainRequest

    registry = load_registry(entry_points=False)
    generator, validator = registry.task("mapf-frozenlake", {"agents": 2})
    policy_opts = {"threads": args.threads, "max_new_tokens": args.max_new_tokens}
    if args.instances is not None:
        policy_opts["instances"] = args.instances
    if args.epochs is not None:
        policy_opts["epochs"] = args.epochs
    if args.sft_lr is not None:
        policy_opts["lr"] = args.sft_lr
    if args.sft_batch is not None:
        policy_opts["train_batch_size"] = args.sft_batch
    policy = registry.create("policy", "tiny", policy_opts)
    trainer_opts = {k: v for k, v in {
        "learning_rate": args.lr, "beta": args.beta, "temperature": args.temperature, "num_generations": args.generations,
        "per_device_train_batch_size": args.batch, "prefilter_samples": args.prefilter, "max_completion_length": args.max_completion,
        "max_steps": args.max_steps, "loss_type": args.loss_type, "optimality_bonus": args.optimality_bonus, "negative_advantage_weight": args.negative_weight, "epochs": args.epochs_rl, "optim": args.optim, "scale_rewards": args.scale_rewards, "threads": args.threads,
    }.items() if v is not None}
    if args.keep_tail:
        trainer_opts["mask_after_answer"] = False
    if args.grpo:
        import yaml

        trainer_opts["grpo_config"] = {k: yaml.safe_load(v) for k, v in (item.split("=", 1) for item in args.grpo)}
    trainer = registry.create("trainer", "trl", trainer_opts)
    figures: dict = {"args": {k: str(v) for k, v in vars(args).items()}, "trainer": trainer.describe(), "rounds": []}

    if args.heldout:
        val = [json.loads(line) for line in args.heldout.read_text().splitlines() if line.strip()]
    else:
        val = held_out(policy.base_dir().parent)
    print(f"held-out: {args.heldout or 'mapf-2agents-val'}, {len(val)} instances", flush=True)
    started = time.perf_counter()
    if args.base:
        cached, base = True, args.base
        info = json.loads((args.base / "warm_start.json").read_text())
    else:
        cached = policy.warm_start_info(generator) is not None
        base = policy.prepare(generator=generator)
        info = policy.warm_start_info()
    print(f"warm start: {'cached' if cached else f'built in {time.perf_counter() - started:.1f}s'}  {info['instances']} instances × "
          f"{info['epochs']} epochs, {info['parameters']:,} params, train {info['train']['seconds']}s "
          f"({info['train']['tokens_per_s']} tok/s), data {info['data_seconds']}s, loss {info['train']['final_loss']}", flush=True)
    figures["warm_start"] = info
    ev = evaluate(policy.with_path(base), generator, validator, val)
    show("base", ev)
    figures["base"] = ev

    path = base
    per_round = args.round_instances or 512
    for rnd in range(args.rounds):
        records = generator.generate(generator.default_config(), n=per_round, seed=1000 + args.seed * 100 + rnd).records
        t0 = time.perf_counter()
        result = trainer.train(TrainRequest(
            policy_path=path, records=records, generator=generator, validator=validator,
            out_dir=args.out / f"round-{rnd:02d}", seed=args.seed + rnd, round=rnd, prompt_style="compact",
        ))
        wall = time.perf_counter() - t0
        m = result.metrics
        path = result.checkpoint
        ev = evaluate(policy.with_path(path), generator, validator, val)
        print(f"round {rnd}: {wall:.1f}s wall, {m['steps']} steps ({m['steps_per_s']}/s), prompts {m['prompts_used']}/{m['prompts_given']}"
              + (f" (prefilter {m['prefilter_seconds']}s: {m['prefilter_all_wrong']} always wrong, {m['prefilter_all_right']} always right)" if "prefilter_kept" in m else "")
              + f", reward {m['reward_mean']} (last {m['last_reward_mean']}), zero-std groups {m['zero_std_frac']}, length {m['completion_length']}", flush=True)
        show(f"round {rnd}", ev)
        figures["rounds"].append({"train": m, "wall_s": round(wall, 2), "eval": ev})
    delta = figures["rounds"][-1]["eval"]["valid"] - figures["base"]["valid"] if figures["rounds"] else 0.0
    se = math.sqrt(figures["base"]["se"] ** 2 + (figures["rounds"][-1]["eval"]["se"] ** 2 if figures["rounds"] else 0))
    print(f"last round - base: {delta:+.3f} (± {se:.3f} unpaired SE)", flush=True)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    sys.exit(main())
