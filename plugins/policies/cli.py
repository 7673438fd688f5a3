"""``envengineer pretrain``: build the tiny base model, then measure it (kept out of core/cli.py)."""

from __future__ import annotations

import math
import time
from collections import defaultdict
from typing import Any

HELD_OUT_SEED = 424242  # fresh instances when the validation file is not shipped


def held_out_records(registry: Any, generator: Any) -> tuple[str, list[dict[str, Any]]]:
    """The ``mapf-2agents-val`` records if the file exists, else 300 fresh held-out instances."""
    import json

    try:
        spec = registry.benchmark("mapf-2agents-val")
    except Exception:
        spec = None
    if spec is not None and spec.path.exists():
        records = [json.loads(line) for line in spec.path.read_text().splitlines() if line.strip()]
        return "mapf-2agents-val", records
    return "300 fresh held-out instances", generator.generate(generator.default_config(), n=300, seed=HELD_OUT_SEED).records


def greedy_valid(policy: Any, generator: Any, validator: Any, records: list[dict[str, Any]]) -> dict[str, Any]:
    texts = policy.sample([generator.render(r, "compact") for r in records], n=1)
    by_size: dict[int, list[bool]] = defaultdict(list)
    valid = optimal = 0
    for record, (text,) in zip(records, texts):
        verdict = validator.score(record, generator.decode_response(record, text, "compact"))
        valid += verdict.valid
        optimal += verdict.optimal
        by_size[record["size"]].append(verdict.valid)
    n = len(records)
    rate = valid / n
    return {"n": n, "valid": rate, "se": math.sqrt(rate * (1 - rate) / n), "optimal": optimal / n,
            "by_size": {size: sum(v) / len(v) for size, v in sorted(by_size.items())}}


def pretrain_command(registry: Any, console: Any, *, force: bool, instances: int | None,
                     epochs: float | None, threads: int | None) -> None:
    import transformers
    from rich.table import Table

    from envengineer.display import stage_progress

    transformers.utils.logging.disable_progress_bar()

    options: dict[str, Any] = {k: v for k, v in {"instances": instances, "epochs": epochs, "threads": threads}.items() if v is not None}
    policy = registry.create("policy", "tiny", options, where="policy.tiny")
    generator, validator = registry.task("mapf-frozenlake", {"agents": 2})
    cached = policy.warm_start_info() is not None and not force
    started = time.perf_counter()
    with stage_progress(console, transient=False) as progress:
        path = policy.prepare(generator=generator, force=force, progress=progress)
    info = policy.warm_start_info() or {}
    train = info.get("train", {})
    how = "cached" if cached else f"built in {time.perf_counter() - started:.0f}s"
    console.print(f"base model ({how}): {path}", highlight=False)
    console.print(
        f"  {info.get('parameters', 0):,} parameters; warm start on {info.get('instances')} instances × {info.get('epochs')} epochs, "
        f"{train.get('steps')} steps, {train.get('seconds')}s, final loss {train.get('final_loss')}",
        highlight=False,
    )
    name, records = held_out_records(registry, generator)
    result = greedy_valid(policy.with_path(path), generator, validator, records)
    table = Table(title=f"greedy decoding on {name} ({result['n']})", title_justify="left")
    table.add_column("size")
    table.add_column("valid", justify="right")
    for size, rate in result["by_size"].items():
        table.add_row(f"{size}x{size}", f"{rate:.3f}")
    table.add_row("all", f"{result['valid']:.3f} ± {result['se']:.3f}")
    console.print(table)
    console.print(f"optimal: {result['optimal']:.3f}", highlight=False)
