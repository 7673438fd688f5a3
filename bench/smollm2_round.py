"""A small SmolLM2-135M-Instruct GRPO round on the CPU, stage by stage, against the per-core matmul limit.

    python bench/smollm2_round.py                      # one torch thread, ~6-8 min on a 2-core machine
    python bench/smollm2_round.py --gradient-checkpointing true
    python bench/smollm2_round.py --prefilter 32 --grpo-prompts 16 --eval 64

The model is ``smollm2-135m-instruct`` (plugins/_shared/models.py: a float32 ``LlamaForCausalLM`` of 134.5 M
parameters), the task grid-walk with its chat prompts (``full``), every stage through the project's own
code paths on one torch thread, each with fixed work (counts, never seconds):

- the fast sampler's self-check (once per float path and process; it runs at the first sampling call and
  is timed apart from the stage it falls in: the stages below exclude it);
- prefilter: the trl trainer's prefilter (``TrlGrpoTrainer._prefilter``, the transformers policy through
  the fast sampler) on ``--prefilter`` fresh grid-walk prompts × 4 samples, temperature 0.7;
- GRPO: ``TrlGrpoTrainer.train`` on ``--grpo-prompts`` prompts × 4 completions, 16 completions a step,
  ``beta`` 0.02 (a reference pass), padding-free passes with each prompt computed once for its group
  (where the trainer allows it: not under gradient checkpointing, which ``auto`` leaves off on the CPU),
  the rollouts through the fast sampler; its prefilter off. SmolLM2-135M solves no grid
  walk (the prefilter above keeps none, which would leave a round nothing to train), so every reward is
  0 and every advantage 0: the arithmetic, which this bench measures, is that of any round of this shape
  (TRL computes every pass whatever the advantages);
- evaluation: the round's checkpoint through the transformers policy (greedy) on the first ``--eval``
  prompts of ``grid-walk-val``.

Printed per stage: CPU seconds of this process, the work (new tokens and prompt tokens sampled, each
prompt once; the training passes' real tokens and the positions they computed) and "× the limit": the CPU
seconds over those the work's matmul FLOPs take at the per-core float32 matmul limit measured at start on
the model's own Linear shapes (``bench/cpu_round.py``'s ``matmul_limit``, ``sampling_flops``,
``training_flops``, ``times_limit``: a token costs 2P FLOPs forward, 4P more backward, attention left
out). Training is given twice: by every real token of every row (TRL's arithmetic, as ``cpu_round.py``
counts it) and by the positions the passes computed. Targets (issue 31): training within 2×, sampling
within 4×.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_round import TokenCounter, matmul_limit, sampling_flops, times_limit, training_flops  # noqa: E402

MODEL = "smollm2-135m-instruct"
STYLE = "full"


class SelfChecks:
    """Times ``fast_sampler.self_check`` while installed: CPU seconds and calls, so a stage can leave them out."""

    def __init__(self) -> None:
        self.seconds, self.calls = 0.0, 0

    def __enter__(self) -> SelfChecks:
        from envengineer.plugins.policies import fast_sampler

        self._real = real = fast_sampler.self_check

        def timed(*args, **kwargs):
            started = time.process_time()
            try:
                return real(*args, **kwargs)
            finally:
                self.seconds += time.process_time() - started
                self.calls += 1

        fast_sampler.self_check = timed
        return self

    def __exit__(self, *exc) -> None:
        from envengineer.plugins.policies import fast_sampler

        fast_sampler.self_check = self._real


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--prefilter", type=int, default=16, help="prefilter prompts (× 4 samples)")
    parser.add_argument("--grpo-prompts", type=int, default=8, help="GRPO prompts (× 4 completions; 4 prompts a step)")
    parser.add_argument("--eval", type=int, default=32, help="grid-walk-val prompts evaluated (greedy)")
    parser.add_argument("--max-new-tokens", type=int, default=48, help="completion cap of every stage")
    parser.add_argument("--gradient-checkpointing", choices=("auto", "true", "false"), default="auto",
                        help="the trl trainer's option (auto: off on the CPU)")
    parser.add_argument("--output", help="where the round's files go (default: a temporary folder)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    import torch

    from envengineer.loop.evaluation import score_response
    from envengineer.plugins._shared.models import resolve_model
    from envengineer.plugins.policies import fast_sampler
    from envengineer.registry import load_registry
    from envengineer.components.training import TrainRequest

    torch.set_num_threads(1)
    registry = load_registry(entry_points=False)
    folder = resolve_model(MODEL)
    generator, validator = registry.task("grid-walk", {"prompt_style": STYLE})
    records = generator.generate(generator.default_config(), n=args.prefilter + args.grpo_prompts, seed=args.seed + 11).records
    prefilter_records, grpo_records = records[: args.prefilter], records[args.prefilter:]
    spec = registry.benchmark("grid-walk-val")
    val = [json.loads(line) for line in spec.path.read_text().splitlines() if line.strip()][: args.eval]
    out = Path(args.output or tempfile.mkdtemp(prefix="smollm2-round-"))

    base = registry.create("policy", "transformers", {"path": MODEL, "threads": 1}, where="policy.transformers")
    model, tokenizer = base.load()
    parameters = sum(p.numel() for p in model.parameters())
    limit = matmul_limit(model)
    base.close()
    del model

    checkpointing = {"auto": "auto", "true": True, "false": False}[args.gradient_checkpointing]
    options = {"num_generations": 4, "per_device_train_batch_size": 16, "max_completion_length": args.max_new_tokens,
               "temperature": 0.7, "learning_rate": 1e-6, "beta": 0.02, "threads": 1, "prefilter_samples": 4,
               "gradient_checkpointing": checkpointing}
    rows: list[tuple[str, float, float, str, float | None]] = []  # stage, CPU s, self-check s, work, × the limit
    counted = TokenCounter(tokenizer.pad_token_id)
    checks = SelfChecks()
    console = Console(width=max(Console().width, 170))
    with counted, checks:
        # prefilter: the trainer's own, on fresh prompts
        trainer = registry.create("trainer", "trl", options, where="trainer.trl")
        request = TrainRequest(policy_path=folder, records=prefilter_records, generator=generator, validator=validator,
                               out_dir=out / "prefilter", seed=args.seed, round=0, prompt_style=STYLE)
        with console.status(f"prefilter: {len(prefilter_records)} prompts × 4"):
            started, check_before = time.process_time(), checks.seconds
            _, info = trainer._prefilter(request)
            seconds, check_s = time.process_time() - started, checks.seconds - check_before
        flops = sampling_flops(counted.tokens, counted.prompt, parameters)
        rows.append(("prefilter", seconds - check_s, check_s,
                     f"{len(prefilter_records)} prompts × 4: {counted.tokens:,} new + {counted.prompt:,} prompt tokens; "
                     f"kept {info['prefilter_kept']} (all wrong: {info['prefilter_all_wrong']})",
                     times_limit(seconds - check_s, flops, limit)))

        # GRPO: rollouts and training
        counted.reset()
        trainer = registry.create("trainer", "trl", {**options, "prefilter_samples": 0}, where="trainer.trl")
        request = TrainRequest(policy_path=folder, records=grpo_records, generator=generator, validator=validator,
                               out_dir=out / "grpo", seed=args.seed, round=0, prompt_style=STYLE)
        with console.status(f"GRPO: {len(grpo_records)} prompts × 4"):
            started, check_before = time.process_time(), checks.seconds
            result = trainer.train(request)
            seconds, check_s = time.process_time() - started, checks.seconds - check_before
        m = result.metrics
        rollout_s = m["rollout_cpu_seconds"] - check_s  # the self-check runs inside the first rollout
        rows.append(("GRPO rollouts", rollout_s, check_s,
                     f"{m['rollouts_fast']} fast / {m['rollouts_generate']} generate calls: {counted.tokens:,} new + "
                     f"{counted.prompt:,} prompt tokens",
                     times_limit(rollout_s, sampling_flops(counted.tokens, counted.prompt, parameters), limit)))
        training_s = m["train_cpu_seconds"] - m["rollout_cpu_seconds"]
        real, computed = m.get("logprob_real_tokens", 0), m.get("logprob_computed_positions", 0)
        rows.append(("GRPO training", training_s, 0.0,
                     f"{m['steps']} steps; {real:,} real tokens ({m.get('logprob_real_tokens_with_grad', 0):,} with "
                     f"gradient), {computed:,} positions computed ({m.get('shared_prefix_chunks', 0)} chunks shared); "
                     f"checkpointing {'on' if m['gradient_checkpointing'] else 'off'}",
                     times_limit(training_s, training_flops(m, parameters), limit)))
        rows.append(("train step's rest (trl import, loading, saving)", seconds - m["train_cpu_seconds"], 0.0, "", None))

        # evaluation: the round's checkpoint, greedy
        counted.reset()
        policy = registry.create("policy", "transformers", {"path": str(result.checkpoint), "threads": 1, "temperature": 0.0,
                                                            "max_new_tokens": args.max_new_tokens, "batch_size": 64},
                                 where="policy.transformers")
        with console.status(f"evaluation: {len(val)} prompts"):
            policy.load()
            started, check_before = time.process_time(), checks.seconds
            texts = policy.sample([generator.render(r, STYLE) for r in val], n=1)
            seconds, check_s = time.process_time() - started, checks.seconds - check_before
        valid = sum(score_response(validator, generator, r, t[0], STYLE).valid for r, t in zip(val, texts))
        rows.append(("evaluation", seconds - check_s, check_s,
                     f"{len(val)} prompts, greedy: {counted.tokens:,} new + {counted.prompt:,} prompt tokens; {valid} valid",
                     times_limit(seconds - check_s, sampling_flops(counted.tokens, counted.prompt, parameters), limit)))

    # the limit measured again at the end: on a shared machine it drifts; the higher of the two is used (the larger
    # distance), both are printed
    model, _ = policy.load()  # the checkpoint evaluated: same shapes
    limits = (limit, matmul_limit(model))
    limit = max(limits)
    rows = [(stage, seconds, check_s, work, None if distance is None else distance * limit / limits[0])
            for stage, seconds, check_s, work, distance in rows]
    training_limit = times_limit(training_s, training_flops(m, parameters), limit)
    by_positions = times_limit(training_s, training_flops(m, parameters, "computed"), limit) if computed else None
    table = Table(title=f"a SmolLM2-135M-Instruct GRPO round on grid-walk, one thread ({parameters:,} parameters, per-core "
                        f"matmul limit {limits[0]:.1f} GFLOP/s at the start, {limits[1]:.1f} at the end, × the limit against "
                        f"{limit:.1f}; torch {torch.__version__}, {torch.backends.cpu.get_cpu_capability()})")
    for column in ("stage", "CPU s", "self-check s (apart)", "work", "× the limit"):
        table.add_column(column, justify="right")
    for stage, seconds, check_s, work, distance in rows:
        table.add_row(stage, f"{seconds:.1f}", f"{check_s:.1f}" if check_s else "", work,
                      "" if distance is None else f"{distance:.2f}")
    table.add_row("round", f"{sum(r[1] for r in rows):.1f}", f"{sum(r[2] for r in rows):.1f}", "", "", style="bold")
    console.print(table)
    if by_positions is not None:
        console.print(f"GRPO training by the positions its passes computed: {by_positions:.2f}× the limit "
                      f"(by real tokens, as above: {training_limit:.2f}×)")
    console.print(f"self-checks: {checks.calls} ({checks.seconds:.1f} CPU s), fast sampler decisions "
                  f"{sorted(set(fast_sampler._paths.values()))}; targets: training ≤ 2×, sampling ≤ 4× the limit; files: {out}")


if __name__ == "__main__":
    main()
