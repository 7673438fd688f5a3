"""A quickstart round on the CPU, before and after the CPU work: ``generate`` against the fast sampler,
TRL's padded log-probability passes against the padding-free ones (each prompt computed once for its group).

    python bench/cpu_round.py --round              # two whole rounds of the recipe, three ways (~7 min)
    python bench/cpu_round.py --round --repeat 3   # the same three times over, and the ratios pooled (~21 min)
    python bench/cpu_round.py                      # the generation stages alone, the shipped tiny base, one thread
    python bench/cpu_round.py --threads 2 --prefilter 600 --rollout-prompts 120

``--round`` runs ``envengineer run examples/quickstart.yaml rounds=2`` three times, each in its own process:
"as filed" with ``policy.fast_sampler=false trainer.fast_rollouts=false trainer.padding_free=false
trainer.threads=2 policy.threads=1`` (the recipe as it was when the CPU work began: ``generate``
everywhere, TRL's padded passes, the trainer on two torch threads, glibc's ``malloc`` untuned:
``ENVENGINEER_CPU_HEAP=0``), "before" with the same code paths at ``--threads`` trainer and policy
threads (the code's share alone), and "now" with the recipe's defaults at ``--threads`` (freed tensor
memory kept for reuse: plugins/_shared/cpu_heap.py; ``trainer.shared_prefix``: a GRPO group's prompt computed
once). It prints CPU seconds per stage of each round from the
runs' own records (``history.jsonl``'s ``cpu_s``, the train line's ``*_cpu_seconds``), the work per
stage and its distance from the per-core matmul limit (training's counts every real token of every
row, as TRL's arithmetic needs them: with a prompt computed once for its group the passes compute
fewer positions than that), and whether the verdicts, the rollouts and the weights are the same. Round 0 carries the process's one-off imports (trl, datasets); round 1 is a round
of a longer run. A shared machine's speed drifts by ±20% between minutes, as much as the code's gains
at this size: ``--repeat k`` runs the three k times over, one after the other, and adds each round's
ratio per repeat, the pooled ratio (sums of CPU seconds) and the lowest.

Without ``--round``:
Three stages, each with fixed work (counts, never seconds), each run with ``fast_sampler:
false`` and then ``true`` back to back in this process through ``TransformersPolicy.sample`` (both with
the process's ``malloc`` as ``TransformersPolicy`` sets it, plugins/_shared/cpu_heap.py):

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
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]


def quickstart_policy():
    """The quickstart's tiny policy on its shipped base, and the task's generator."""
    from envengineer.registry import load_registry
    from envengineer.loop.runconfig import load_run_config

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


def training_flops(metrics: dict, parameters: int, counted: str = "real") -> float:
    """GRPO's log-probability passes' FLOPs from the trl trainer's metrics: a token costs 2P forward and 4P more
    backward (P parameters; attention left out, so a distance from the limit is an upper bound). ``counted``:
    ``real`` every real token of every row (TRL's arithmetic), ``computed`` the positions the passes computed
    (fewer where a prompt is computed once for its group)."""
    total = metrics.get(f"logprob_{'real_tokens' if counted == 'real' else 'computed_positions'}", 0)
    with_grad = metrics.get(f"logprob_{'real_tokens' if counted == 'real' else 'computed_positions'}_with_grad", 0)
    return (total - with_grad) * 2 * parameters + with_grad * 6 * parameters


def sampling_flops(new_tokens: int, prompt_tokens: int, parameters: int) -> float:
    """Sampling's FLOPs at 2P a token: every new token and each prompt's tokens once (its samples share them)."""
    return 2 * parameters * (new_tokens + prompt_tokens)


def times_limit(cpu_seconds: float, flops: float, limit: float) -> float:
    """CPU seconds over those of ``flops`` at ``limit`` GFLOP/s (1.0: at the per-core matmul limit)."""
    return cpu_seconds * limit * 1e9 / flops


class TokenCounter:
    """Counts what goes through ``fast_sampler.generate`` while installed (``with TokenCounter(pad) as counted``):
    ``tokens``, the new tokens that are not ``pad`` (finished rows are padded), and ``prompt``, each prompt's
    tokens once; ``calls``. Every sampler of the project (the policy's, the trl trainer's prefilter and rollouts)
    calls that function."""

    def __init__(self, pad_token_id: int) -> None:
        self.pad, self.tokens, self.prompt, self.calls = pad_token_id, 0, 0, 0

    def reset(self) -> None:
        self.tokens = self.prompt = self.calls = 0

    def __enter__(self) -> TokenCounter:
        from envengineer.plugins.policies import fast_sampler

        self._real = real = fast_sampler.generate

        def counting(model, input_ids, attention_mask, **kwargs):
            out = real(model, input_ids, attention_mask, **kwargs)
            self.tokens += int((out[:, input_ids.shape[1]:] != self.pad).sum())
            self.prompt += int(attention_mask.sum())
            self.calls += 1
            return out

        fast_sampler.generate = counting
        return self

    def __exit__(self, *exc) -> None:
        from envengineer.plugins.policies import fast_sampler

        fast_sampler.generate = self._real


BEFORE = ["policy.fast_sampler=false", "trainer.fast_rollouts=false", "trainer.padding_free=false"]
#: the recipe when the CPU work began (examples/quickstart.yaml had ``trainer.threads: 2``)
FILED = [*BEFORE, "trainer.threads=2", "policy.threads=1"]


def _sha(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def _stages(run: Path, round: int) -> tuple[dict[str, float], dict]:
    """CPU seconds per stage of ``round`` from the run's history, and its train line."""
    lines = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines() if line.strip()]
    steps = {line["step"]: line for line in lines if line.get("round") == round}
    train = steps["train"]
    grpo = train["train_cpu_seconds"] - train["rollout_cpu_seconds"]
    stages = {
        "generate the round's set": steps["generate"]["cpu_s"],
        "prefilter": train["prefilter_cpu_seconds"],
        "GRPO rollouts": train["rollout_cpu_seconds"],
        "GRPO training": grpo,
        "train step's rest (load, imports, save)": train["cpu_s"] - train["prefilter_cpu_seconds"] - train["train_cpu_seconds"],
        "evaluation": steps["eval"]["cpu_s"],
        "design": steps.get("design", {}).get("cpu_s", 0.0),
    }
    stages["round"] = sum(line.get("cpu_s", 0.0) for line in steps.values())
    return stages, train


def _run_three(out: Path, repeat: int, threads: int, console: Console) -> dict[str, Path]:
    """The three runs of one repeat (``out/<label>``, later repeats ``out/<label>-<k>``), each in its own
    process, one after the other; a run whose records exist is reused."""
    runs = {}
    thread_args = [f"trainer.threads={threads}", f"policy.threads={threads}"]
    suffix = "" if repeat == 1 else f"-{repeat}"
    for label, extra in (("as filed", FILED), ("before", [*thread_args, *BEFORE]), ("now", thread_args)):
        runs[label] = out / (label.replace(" ", "-") + suffix)
        command = [sys.executable, "-c", "from envengineer.cli.commands import main; main()", "run", str(ROOT / "examples" / "quickstart.yaml"),
                   "rounds=2", f"output={runs[label]}", *extra]
        if (runs[label] / "history.jsonl").exists():
            console.print(f"[dim]{label}: {runs[label]} exists; reusing its records[/]")
        else:
            # "as filed" and "before" leave malloc as it was then (plugins/_shared/cpu_heap.py is part of "now")
            env = {**os.environ, **({} if label == "now" else {"ENVENGINEER_CPU_HEAP": "0"})}
            with console.status(f"repeat {repeat}, {label}: envengineer run examples/quickstart.yaml rounds=2 {' '.join(extra)}"):
                subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=env)
    return runs


def whole_rounds(args) -> None:
    """``--round``: the recipe's rounds 0 and 1, as filed, before and now, ``--repeat`` times (module docstring)."""
    from safetensors.torch import load_file

    console = Console(width=max(Console().width, 190))
    _, base, _ = quickstart_policy()
    model, _ = base.load()
    parameters = sum(p.numel() for p in model.parameters())
    limit = matmul_limit(model)
    out = Path(args.output or tempfile.mkdtemp(prefix="cpu-round-"))
    totals: dict[tuple[int, int], dict[str, float]] = {}  # (repeat, round) -> label -> the round's CPU s
    for repeat in range(1, args.repeat + 1):
        runs = _run_three(out, repeat, args.threads, console)
        for round in (0, 1):
            filed, _ = _stages(runs["as filed"], round)
            before, _ = _stages(runs["before"], round)
            now, train_now = _stages(runs["now"], round)
            totals[repeat, round] = {"as filed": filed["round"], "before": before["round"], "now": now["round"]}
            table = Table(title=f"{f'repeat {repeat}, ' if args.repeat > 1 else ''}quickstart round {round}, CPU seconds (as filed: "
                                f"trainer on 2 threads; before and now: {args.threads} thread(s); tiny policy, {parameters:,} "
                                f"parameters; per-core matmul limit {limit:.1f} GFLOP/s)")
            for column in ("stage", "as filed s", "before s", "now s", "× less than filed", "× less than before", "now: work",
                           "now: × the limit"):
                table.add_column(column, justify="right")
            real = train_now.get("logprob_real_tokens", 0)
            work = {"GRPO training": (f"{real:,} real tokens ({train_now.get('logprob_computed_positions', 0):,} positions; TRL's "
                                      f"padding: {train_now.get('logprob_padded_positions', 0):,})",
                                      training_flops(train_now, parameters))}
            for stage in before:
                ratios = [f"{then[stage] / now[stage]:.2f}" if now[stage] > 0.05 else "–" for then in (filed, before)]
                text, flops = work.get(stage, ("", None))
                distance = f"{times_limit(now[stage], flops, limit):.2f}" if flops else ""
                style = "bold" if stage == "round" else None
                table.add_row(stage, f"{filed[stage]:.1f}", f"{before[stage]:.1f}", f"{now[stage]:.1f}", *ratios, text, distance,
                              style=style)
            console.print(table)
            for label in ("as filed", "before"):
                same = {name: _sha(runs[label] / f"round-{round:02d}" / name) == _sha(runs["now"] / f"round-{round:02d}" / name)
                        for name in ("eval/verdicts.jsonl", "eval/responses.jsonl", "train/rollouts.jsonl",
                                     "train/checkpoint/model.safetensors")}
                a, b = (load_file(runs[k] / f"round-{round:02d}" / "train" / "checkpoint" / "model.safetensors") for k in (label, "now"))
                drift = max(float((a[key] - b[key]).abs().max()) for key in a)
                console.print(f"same files {label} and now: " + ", ".join(f"{k} {'yes' if v else 'NO'}" for k, v in same.items())
                              + f"; largest weight difference {drift:.2e}")
    if args.repeat > 1:
        summary = Table(title="each round's CPU seconds, as filed ÷ now, per repeat and pooled (the sums' ratio)")
        for column in ("round", *(f"repeat {k}" for k in range(1, args.repeat + 1)), "pooled", "lowest"):
            summary.add_column(column, justify="right")
        for round in (0, 1, None):
            keys = [(k, r) for (k, r) in totals if round is None or r == round]
            ratio = {key: totals[key]["as filed"] / totals[key]["now"] for key in keys}
            per_repeat = [" / ".join(f"{ratio[k, r]:.2f}" for (k2, r) in keys if k2 == k) for k in range(1, args.repeat + 1)]
            pooled = sum(totals[key]["as filed"] for key in keys) / sum(totals[key]["now"] for key in keys)
            summary.add_row("both" if round is None else str(round), *per_repeat, f"{pooled:.2f}", f"{min(ratio.values()):.2f}",
                            style="bold" if round is None else None)
        console.print(summary)
    console.print(f"runs: {out} (rerun with --output {out} to print again without running)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--round", action="store_true", help="two whole rounds of the recipe, as filed, before and now")
    parser.add_argument("--output", help="--round: where the runs go (default: a temporary folder)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="--round: the three runs this many times, one after the other, and the ratios pooled")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--prefilter", type=int, default=1200, help="prefilter prompts (× 4 samples)")
    parser.add_argument("--rollout-prompts", type=int, default=240, help="rollout prompts (× 8 samples)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if args.round:
        return whole_rounds(args)

    import torch

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
    counted = TokenCounter(tokenizer.pad_token_id).__enter__()

    policies = {mode: type(base)(base.options.model_copy(update={"fast_sampler": mode})) for mode in (False, True)}
    for policy in policies.values():
        policy._loaded = base._loaded  # one model, loaded once
    started = time.process_time()
    policies[True].sample(stages[0][1][:64], n=4)  # the self-check runs at first use
    check_s = time.process_time() - started

    table = Table(title=f"generation stages of a quickstart round (tiny policy, {parameters:,} parameters, "
                        f"{args.threads} thread(s); per-core matmul limit {limit:.1f} GFLOP/s)")
    for column in ("stage", "prompts × n", "new tokens", "generate s", "fast s", "× faster",
                   "generate tok/s", "fast tok/s", "generate/limit", "fast/limit", "fast: × the limit, prompts counted", "same texts"):
        table.add_column(column, justify="right")
    totals = {False: 0.0, True: 0.0}
    for name, prompts, n, settings in stages:
        seconds, tokens, texts, prompt_tokens = {}, {}, {}, {}
        for mode, policy in policies.items():
            policy.options = policy.options.model_copy(update={**settings, "seed": args.seed})
            counted.reset()
            started = time.process_time()
            texts[mode] = policy.sample(prompts, n=n)
            seconds[mode] = time.process_time() - started
            tokens[mode], prompt_tokens[mode] = counted.tokens, counted.prompt
            totals[mode] += seconds[mode]
        rate = {mode: tokens[mode] / seconds[mode] for mode in seconds}
        share = {mode: 100 * rate[mode] * 2 * parameters / 1e9 / limit for mode in rate}
        table.add_row(name, f"{len(prompts)} × {n}", f"{tokens[True]:,}", f"{seconds[False]:.1f}", f"{seconds[True]:.1f}",
                      f"{seconds[False] / seconds[True]:.2f}", f"{rate[False]:,.0f}", f"{rate[True]:,.0f}",
                      f"{share[False]:.0f}%", f"{share[True]:.0f}%",
                      f"{times_limit(seconds[True], sampling_flops(tokens[True], prompt_tokens[True], parameters), limit):.2f}",
                      "yes" if texts[False] == texts[True] else "NO")
    table.add_row("all three", "", "", f"{totals[False]:.1f}", f"{totals[True]:.1f}", f"{totals[False] / totals[True]:.2f}",
                  "", "", "", "", "", "")
    console = Console(width=max(Console().width, 150))
    console.print(table)
    console.print(f"s: CPU seconds of this process (all threads); /limit: tokens per CPU second × 2 × parameters, as a "
                  f"share of the per-core matmul limit (prompt tokens not counted); × the limit, prompts counted: CPU seconds over those of "
                  f"the same tokens, each prompt once and every new token, at the limit; the fast sampler's self-check (once per float path: architecture, dtype, thread count; at its first call): {check_s:.1f} CPU s")


if __name__ == "__main__":
    main()
