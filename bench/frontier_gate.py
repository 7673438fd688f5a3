"""The frontier gate: does a task family give the engineer something to do? (docs/results-frontier.md)

    python bench/frontier_gate.py                           # the candidate examples/frontier/ uses
    python bench/frontier_gate.py --candidate walk --seed 1   # another candidate (see CANDIDATES), another seed

A candidate is a task family, its options, a tiny-policy warm-start recipe and a trl recipe. The gate:

1. **base profile**: the warm-started base's sampled success (``--samples`` per instance at the trainer's
   temperature) and greedy success per group of the task's primary grouping, on ``--per-group`` fresh
   instances each. Passes when the easiest group is at >= 80% sampled, the target groups are at most 5%,
   and at least one group lies in the learnable band 10-60%.
2. **transfer**: one GRPO round (the candidate's trl recipe) on ``--train`` fresh instances of the
   frontier group (the group with the largest p(1 - p) of its sampled success p), then the same profile
   instances of the next harder group are sampled again with the new checkpoint (same seeds). Passes when
   its sampled success rises by >= 5 points; the paired test is over instances (each instance's change
   in sampled success; sign-flip permutation, two-sided).

Everything is budgeted by counts (instances, samples, steps), so the figures are the same on any machine of
the same CPU kind; the seconds printed are this machine's. Results go to ``--out``/gate.json and a table.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]

#: The trl recipe of the quickstart (8 samples a prompt), and the one the literature suggests at the frontier (16).
TRAINER_8 = {"num_generations": 8, "per_device_train_batch_size": 64, "learning_rate": 5.0e-5,
             "lr_scheduler_type": "constant_with_warmup", "grpo_config": {"warmup_steps": 8}, "beta": 0.02,
             "loss_type": "dapo", "scale_rewards": "group", "temperature": 0.7, "max_completion_length": 16,
             "prefilter_samples": 4, "epochs": 1, "threads": 1}
TRAINER_16 = {**TRAINER_8, "num_generations": 16, "per_device_train_batch_size": 128}
POLICY = {"instances": 24000, "epochs": 2, "lr": 2.0e-3, "train_batch_size": 64, "max_new_tokens": 16, "threads": 1}


def _walk(long_share: float, trainer: dict[str, Any]) -> dict[str, Any]:
    task = {"name": "grid-walk", "prompt_style": "compact", "warm_start_max_moves": 4, "warm_start_long_share": long_share}
    return {"task": task, "policy": POLICY, "trainer": trainer, "target": ["k9", "k10"]}


#: The candidates tried (docs/results-frontier.md reports each one's gate): grid walks warm-started on 1-4 moves,
#: with a thin tail of longer walks (0-10% of the warm start), trained with 8 or 16 samples a prompt.
CANDIDATES: dict[str, dict[str, Any]] = {
    "walk": _walk(0.0, TRAINER_8),
    "walk-tail2": _walk(0.02, TRAINER_8),
    "walk-tail5": _walk(0.05, TRAINER_8),
    "walk-tail5-g16": _walk(0.05, TRAINER_16),
    "walk-tail10": _walk(0.1, TRAINER_8),
    "walk-tail10-g16": _walk(0.1, TRAINER_16),
}


def config_for(generator: Any, group: str) -> Any:
    """The default config with the whole budget on ``group`` (the others at the share floor)."""
    share = generator.share_knob()
    values = generator.knob_values(generator.default_config())
    proposal = {g: {share.name: (1.0 if g == group else share.low)} for g in values}
    return generator.project(generator.knob_proposal(proposal), generator.default_config()).config


def fresh(generator: Any, group: str, n: int, seed: int) -> list[dict[str, Any]]:
    records = generator.generate(config_for(generator, group), n=n * 3, seed=seed).records
    return [r for r in records if generator.group(r) == group][:n]


def per_instance(policy: Any, generator: Any, validator: Any, records: list[dict[str, Any]], *, n: int, style: str) -> list[float]:
    """Each record's share of valid answers among ``n`` samples (``n`` = 1 with a greedy policy)."""
    from envengineer.loop.evaluation import score_response

    rates: list[float] = []
    for start in range(0, len(records), 64):
        batch = records[start:start + 64]
        for record, answers in zip(batch, policy.sample_records(generator, batch, style=style, n=n)):
            rates.append(sum(score_response(validator, generator, record, a, style).valid for a in answers) / max(1, len(answers)))
    return rates


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else float("nan")


def sign_flip_p(diffs: list[float], draws: int = 20000, seed: int = 0) -> float:
    """Two-sided sign-flip permutation p of the mean paired difference."""
    import random

    observed = abs(sum(diffs))
    if observed == 0:
        return 1.0
    rng = random.Random(seed)
    hits = 0
    for _ in range(draws):
        if abs(sum(d if rng.random() < 0.5 else -d for d in diffs)) >= observed - 1e-12:
            hits += 1
    return (hits + 1) / (draws + 1)


def profile(policy: Any, generator: Any, validator: Any, sets: dict[str, list[dict[str, Any]]], *, samples: int,
            temperature: float, seed: int, style: str) -> dict[str, dict[str, Any]]:
    sampler = policy.sampling(temperature=temperature, seed=seed)
    out = {}
    for group, records in sets.items():
        sampled = per_instance(sampler, generator, validator, records, n=samples, style=style)
        greedy = per_instance(policy, generator, validator, records, n=1, style=style)
        out[group] = {"instances": len(records), "sampled": mean(sampled), "greedy": mean(greedy), "per_instance": sampled}
    return out


def run_gate(name: str, *, per_group: int, samples: int, train: int, seed: int, out: Path, console: Console,
             frontier: str | None = None, trainer_overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    from envengineer.registry import load_registry
    from envengineer.components.training import TrainRequest

    cand = CANDIDATES[name]
    if trainer_overrides:
        cand = {**cand, "trainer": {**cand["trainer"], **trainer_overrides}}
    registry = load_registry(entry_points=False)
    task = cand["task"]
    generator, validator = registry.task(task["name"], {k: v for k, v in task.items() if k != "name"})
    policy = registry.create("policy", "tiny", cand["policy"], where="policy.tiny")
    style = policy.prompt_style
    started = time.process_time()
    base = policy.with_path(policy.prepare(generator=generator))
    warm_cpu = time.process_time() - started
    temperature = cand["trainer"]["temperature"]
    groups = list(generator.groups())
    sets = {g: fresh(generator, g, per_group, seed=10_000 + seed) for g in groups}
    started = time.process_time()
    before = profile(base, generator, validator, sets, samples=samples, temperature=temperature, seed=seed, style=style)
    profile_cpu = time.process_time() - started

    easiest = groups[0]
    band = [g for g in groups if 0.1 <= before[g]["sampled"] <= 0.6]
    checks = {
        "easiest_solved": before[easiest]["sampled"] >= 0.8,
        "target_near_zero": all(before[g]["sampled"] <= 0.05 for g in cand["target"]),
        "learnable_band": bool(band),
    }
    # the frontier: the group with the most to learn from (largest p(1 - p); ties: the harder one)
    frontier = frontier or max(reversed(groups), key=lambda g: before[g]["sampled"] * (1 - before[g]["sampled"]))
    following = groups[groups.index(frontier) + 1] if groups.index(frontier) + 1 < len(groups) else None
    result: dict[str, Any] = {
        "candidate": name, "recipe": cand, "seed": seed, "per_group": per_group, "samples": samples, "train": train,
        "base": base.options.path, "profile": {g: {k: v for k, v in p.items() if k != "per_instance"} for g, p in before.items()},
        "profile_checks": checks, "frontier": frontier, "next": following,
        "cpu_s": {"warm_start_or_load": round(warm_cpu, 1), "profile": round(profile_cpu, 1)},
    }
    if following is not None:
        trainer = registry.create("trainer", "trl", cand["trainer"], where="trainer.trl")
        records = fresh(generator, frontier, train, seed=20_000 + seed)
        started = time.process_time()
        trained = trainer.train(TrainRequest(policy_path=Path(base.options.path), records=records, generator=generator,
                                             validator=validator, out_dir=out / f"{name}-round", seed=seed, prompt_style=style,
                                             task=task))
        train_cpu = time.process_time() - started
        after_policy = base.with_path(trained.checkpoint)
        after = profile(after_policy, generator, validator, {g: sets[g] for g in (frontier, following)}, samples=samples,
                        temperature=temperature, seed=seed, style=style)
        diffs = [a - b for a, b in zip(after[following]["per_instance"], before[following]["per_instance"])]
        gain = mean(diffs)
        result["transfer"] = {
            "trained_on": frontier, "kept": trained.metrics.get("kept_prompts", trained.metrics.get("kept")),
            "frontier_before": before[frontier]["sampled"], "frontier_after": after[frontier]["sampled"],
            "next_before": before[following]["sampled"], "next_after": after[following]["sampled"],
            "next_gain_points": round(100 * gain, 2), "paired_p": sign_flip_p(diffs), "passes": gain >= 0.05,
            "train_cpu_s": round(train_cpu, 1), "metrics": {k: v for k, v in trained.metrics.items() if isinstance(v, (int, float, str))},
        }
    result["passes"] = all(checks.values()) and bool(result.get("transfer", {}).get("passes"))
    return result


def show(result: dict[str, Any], console: Console) -> None:
    table = Table(title=f"frontier gate: {result['candidate']} (seed {result['seed']}, {result['per_group']} instances x {result['samples']} samples per group)")
    for col in ("group", "sampled", "greedy"):
        table.add_column(col, justify="right")
    for g, p in result["profile"].items():
        table.add_row(g, f"{100 * p['sampled']:.1f}%", f"{100 * p['greedy']:.1f}%")
    console.print(table)
    console.print("profile checks: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in result["profile_checks"].items()))
    t = result.get("transfer")
    if t:
        console.print(f"transfer: trained on {t['trained_on']}: {100 * t['frontier_before']:.1f}% -> {100 * t['frontier_after']:.1f}%; "
                      f"{result['next']}: {100 * t['next_before']:.1f}% -> {100 * t['next_after']:.1f}% "
                      f"({t['next_gain_points']:+.1f} points, paired p={t['paired_p']:.4f}); passes: {'yes' if t['passes'] else 'NO'}")
    console.print(f"gate: {'PASSES' if result['passes'] else 'FAILS'}; CPU s: {result['cpu_s']}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidate", default="walk-tail5-g16", choices=list(CANDIDATES))
    parser.add_argument("--per-group", type=int, default=200, help="fresh profile instances per group")
    parser.add_argument("--samples", type=int, default=8, help="samples per instance at the trainer's temperature")
    parser.add_argument("--train", type=int, default=2000, help="fresh frontier-group instances of the GRPO round")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--trainer", nargs="*", default=[], metavar="KEY=VALUE",
                        help="trl options over the candidate's (YAML values), e.g. num_generations=16 epochs=2")
    parser.add_argument("--frontier", default=None, help="train on this group (default: the largest p(1 - p))")
    parser.add_argument("--out", type=Path, default=ROOT / "runs" / "frontier-gate")
    args = parser.parse_args(argv)
    console = Console()
    args.out.mkdir(parents=True, exist_ok=True)
    import yaml

    overrides = {k: yaml.safe_load(v) for k, _, v in (item.partition("=") for item in args.trainer)}
    result = run_gate(args.candidate, per_group=args.per_group, samples=args.samples, train=args.train, seed=args.seed,
                      out=args.out, console=console, frontier=args.frontier,
                      trainer_overrides=overrides)
    tag = "".join(f"-{k}{v}" for k, v in overrides.items())
    (args.out / f"gate-{args.candidate}{tag}-seed{args.seed}.json").write_text(json.dumps(result, indent=2) + "\n")
    show(result, console)
    return 0


if __name__ == "__main__":
    sys.exit(main())
