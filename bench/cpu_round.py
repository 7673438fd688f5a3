"""The quickstart round's generation stages on the CPU: transformers' ``generate`` against the fast sampler.

    python bench/cpu_round.py                      # the quickstart's shipped tiny base, one thread
    python bench/cpu_round.py --threads 2 --prefilter 600 --rollout-prompts 120

Three stages, each with fixed work (counts, never seconds), each run with ``fast_sampler:
false`` and then ``true`` back to back in this process through ``TransformersPolicy.sample``:

- prefilter: ``--prefilter`` fresh training prompts × 4 samples at temperature 0.7, 64 new
  tokens at most, 256 prompts a call (the trl trainer's prefilter);
- evaluation: ``mapf-2agents-val`` (480 prompts) greedy, 96 new tokens, 512 a call;
- rollouts: ``--rollout-prompts`` prompts × 8 samples at temperature 0.7, 64 new tokens,
  8 prompts (64 completions) a call, as GRPO generates its groups.

Printed per stage: CPU seconds of this process (all threads), generated tokens per CPU second,
and how far that is from the per-core float32 matmul limit measured at start on the model's
own layer shapes (a token costs ~2 × parameters FLOPs; prompt tokens are not counted), and
whether the texts are identical. The fast sampler's one-off self-check is timed apart.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]


def quickstart_policy():
    """The quickstart's tiny policy on its shipped base, and the task's generator."""
    from envengineer.registry import load_registry
    from envengineer.runconfig import load_run_config

    registry = load_registry(entry_points=False)
    config = load_run_config(ROOT / "examples" / "quickstart.yaml")
    options = {k: v for k, v in config.policy.items() if k != "name"}
    policy = registry.create("policy", "tiny", options, where="policy.tiny")
    generator, _ = registry.task(config.task["name"], {k: v for k, v in config.task.items() if k != "name"})
    return registry, policy.with_path(policy.prepare(generator=generator)), generator


def matmul_limit(model, rows: int = 512, repeats: int = 30) -> float:
    """GFLOP/s of float32 matmuls of the model's own Linear shapes on ``rows`` rows, one thread."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        weights = [m.weight.detach() for m in model.modules() if isinstance(m, torch.nn.Linear)]
        inputs = [torch.randn(rows, w.shape[1]) for w in weights]
        for x, w in zip(inputs, weights):  # warm-up
            torch.nn.functional.linear(x, w)
        best = float("inf")
        for _ in range(repeats):
            started = time.perf_counter()
            for x, w in zip(inputs, weights):
                torch.nn.functional.linear(x, w)
            best = min(best, time.perf_counter() - started)
        flops = sum(2 * rows * w.shape[0] * w.shape[1] for w in weights)
        return flops / best / 1e9
    finally:
        torch.set_num_threads(threads)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--prefilter", type=int, default=1200, help="prefilter prompts (× 4 samples)")
    parser.add_argument("--rollout-prompts", type=int, default=240, help="rollout prompts (× 8 samples)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch

    from envengineer.plugins.policies import fast_sampler

    torch.set_num_threads(args.threads)
    registry, base, generator = quickstart_policy()
    base = type(base)(base.options.model_copy(update={"threads": args.threads}))
    model, tokenizer = base.load()
    parameters = sum(p.numel() for p in model.parameters())
    limit = matmul_limit(model)

    train = generator.generate(generator.default_config(), n=max(args.prefilter, args.rollout_prompts), seed=args.seed + 11).records
    spec = registry.benchmark("mapf-2agents-val")
    val = [json.loads(line) for line in spec.path.read_text().splitlines() if line.strip()]
    render = lambda records: [generator.render(r, "compact") for r in records]  # noqa: E731
    stages = [
        ("prefilter", render(train[: args.prefilter]), 4, {"temperature": 0.7, "max_new_tokens": 64, "batch_size": 256}),
        ("evaluation", render(val), 1, {"temperature": 0.0, "max_new_tokens": 96, "batch_size": 512}),
        ("rollouts", render(train[: args.rollout_prompts]), 8, {"temperature": 0.7, "max_new_tokens": 64, "batch_size": 8}),
    ]

    # count the generated tokens of every call (finished rows are padded: pad is not eos here)
    counted = {"tokens": 0}
    real_generate = fast_sampler.generate

    def counting(model, input_ids, attention_mask, **kwargs):
        out = real_generate(model, input_ids, attention_mask, **kwargs)
        counted["tokens"] += int((out[:, input_ids.shape[1]:] != tokenizer.pad_token_id).sum())
        return out

    fast_sampler.generate = counting

    policies = {mode: type(base)(base.options.model_copy(update={"fast_sampler": mode})) for mode in (False, True)}
    for policy in policies.values():
        policy._loaded = base._loaded  # one model, loaded once
    started = time.process_time()
    policies[True].sample(stages[0][1][:64], n=4)  # the self-check runs at first use
    check_s = time.process_time() - started

    table = Table(title=f"generation stages of a quickstart round (tiny policy, {parameters:,} parameters, "
                        f"{args.threads} thread(s); per-core matmul limit {limit:.1f} GFLOP/s)")
    for column in ("stage", "prompts × n", "new tokens", "generate s", "fast s", "× faster",
                   "generate tok/s", "fast tok/s", "generate/limit", "fast/limit", "same texts"):
        table.add_column(column, justify="right")
    totals = {False: 0.0, True: 0.0}
    for name, prompts, n, settings in stages:
        seconds, tokens, texts = {}, {}, {}
        for mode, policy in policies.items():
            policy.options = policy.options.model_copy(update={**settings, "seed": args.seed})
            counted["tokens"] = 0
            started = time.process_time()
            texts[mode] = policy.sample(prompts, n=n)
            seconds[mode] = time.process_time() - started
            tokens[mode] = counted["tokens"]
            totals[mode] += seconds[mode]
        rate = {mode: tokens[mode] / seconds[mode] for mode in seconds}
        share = {mode: 100 * rate[mode] * 2 * parameters / 1e9 / limit for mode in rate}
        table.add_row(name, f"{len(prompts)} × {n}", f"{tokens[True]:,}", f"{seconds[False]:.1f}", f"{seconds[True]:.1f}",
                      f"{seconds[False] / seconds[True]:.2f}", f"{rate[False]:,.0f}", f"{rate[True]:,.0f}",
                      f"{share[False]:.0f}%", f"{share[True]:.0f}%", "yes" if texts[False] == texts[True] else "NO")
    table.add_row("all three", "", "", f"{totals[False]:.1f}", f"{totals[True]:.1f}", f"{totals[False] / totals[True]:.2f}",
                  "", "", "", "", "")
    console = Console(width=max(Console().width, 150))
    console.print(table)
    console.print(f"s: CPU seconds of this process (all threads); /limit: tokens per CPU second × 2 × parameters, as a "
                  f"share of the per-core matmul limit; the fast sampler's self-check (once per model, at its first call): {check_s:.1f} CPU s")


if __name__ == "__main__":
    main()
