"""``envengineer pretrain``: build the tiny base model, then measure it.

The tiny policy's plugin adds this command to the command line through the
``register_commands`` hook (``envengineer.plugins.policies.register_commands``); the core
knows nothing of it. Heavy imports (torch, transformers) happen when the command runs.
"""

from __future__ import annotations

import math
import time
from collections import defaultdict
from typing import Any, Optional

import typer

from envengineer.api import CommandState

HELD_OUT_SEED = 424242  # fresh instances when the task ships no matching benchmark file
HELD_OUT_N = 300


def held_out_records(registry: Any, generator: Any, bench: str | None = None) -> tuple[str, list[dict[str, Any]]]:
    """Held-out records to measure the base model on, and their name.

    ``bench``: that benchmark. Otherwise the task's declared validation benchmark, else the first
    registered benchmark of the generator's task, whose options all equal the generator's
    (mapf-frozenlake with 2 agents: ``mapf-2agents-val``; arith: ``arith-val``)
    if its file exists, else :data:`HELD_OUT_N` fresh instances of the task's default config.
    """
    from envengineer.api import ConfigError, read_jsonl

    if bench is not None:
        spec = registry.benchmark(bench)
        if spec.task != generator.name:
            raise ConfigError(f"--bench {bench}: a benchmark of task {spec.task!r}, not of {generator.name!r}")
        return bench, read_jsonl(spec.path)
    options = generator.options
    declared = generator.validation_benchmark
    for spec in sorted((e.obj for e in registry.entries("benchmark")), key=lambda b: b.name != declared):  # the task's validation set first
        if spec.task == generator.name and all(getattr(options, k, None) == v for k, v in spec.options.items()) and spec.path.exists():
            return spec.name, read_jsonl(spec.path)
    records = generator.generate(generator.default_config(), n=HELD_OUT_N, seed=HELD_OUT_SEED).records
    return f"{HELD_OUT_N} fresh held-out instances", records


def greedy_valid(policy: Any, generator: Any, validator: Any, records: list[dict[str, Any]], style: str = "compact") -> dict[str, Any]:
    """Greedy valid and optimal rates of ``policy`` on ``records``, overall and per evidence group."""
    texts = policy.sample([generator.render(r, style) for r in records], n=1)
    by_group: dict[str, list[bool]] = defaultdict(list)
    valid = optimal = 0
    for record, (text,) in zip(records, texts):
        verdict = validator.score(record, generator.decode_response(record, text, style))
        valid += verdict.valid
        optimal += verdict.optimal
        by_group[generator.group(record)].append(verdict.valid)
    n = len(records)
    rate = valid / n if n else 0.0
    order = {name: i for i, name in enumerate(generator.groups())}
    groups = sorted(by_group, key=lambda g: (order.get(g, len(order)), g))
    return {"n": n, "valid": rate, "se": math.sqrt(rate * (1 - rate) / n) if n else 0.0, "optimal": optimal / n if n else 0.0,
            "by_group": {g: sum(by_group[g]) / len(by_group[g]) for g in groups}}


def pretrain_command(registry: Any, console: Any, *, force: bool, instances: int | None, epochs: float | None,
                     threads: int | None, task: str | None = None, task_options: dict[str, Any] | None = None,
                     bench: str | None = None, limit: int | None = None, style: str | None = None) -> None:
    """Build (or find) the tiny policy's base model for ``task`` and print its greedy rates.

    ``task`` None: the one installed task family; with several installed, an error naming ``--task``."""
    from envengineer.api import ConfigError, only_task

    if task is None:
        task = only_task(registry, "--task")
    import transformers
    from rich.table import Table

    from envengineer.api import spread, stage_progress

    transformers.utils.logging.disable_progress_bar()

    options: dict[str, Any] = {k: v for k, v in {"instances": instances, "epochs": epochs, "threads": threads,
                                                 "prompt_style": style}.items() if v is not None}
    policy = registry.create("policy", "tiny", options, where="policy.tiny")
    generator, validator = registry.task(task, task_options or {})
    problem = generator.style_problem(policy.prompt_style)
    if problem:
        raise ConfigError(f"{'--style' if style else 'policy.tiny.prompt_style'}: {problem}; the tiny policy warm-starts in its "
                          "prompt_style (default compact): pass --style with one of the task's styles")
    shipped = policy.prebuilt_dir(generator)
    if force:  # build here; the shipped base (if any) is only compared with
        policy = registry.create("policy", "tiny", {**options, "prebuilt": False}, where="policy.tiny")
    started = time.perf_counter()
    with stage_progress(console, transient=False) as progress:
        path = policy.prepare(generator=generator, force=force, progress=progress)
    info = policy.warm_start_info(generator) or {}
    train = info.get("train", {})
    seconds = f"{time.perf_counter() - started:.0f}s"
    how = {"shipped": "shipped with the task", "cached": "cached", "built": f"built in {seconds}"}.get(
        policy.prepared or "", f"{policy.prepared}; built in {seconds}")
    console.print(f"base model ({how}): {path}", highlight=False)
    if force and shipped is not None:
        from envengineer.api import sha256_file

        ours, theirs = sha256_file(path / "model.safetensors"), sha256_file(shipped / "model.safetensors")
        console.print(
            f"  model.safetensors sha256 {ours[:16]}: "
            + ("the same bytes as the shipped warm start" if ours == theirs else
               f"differs from the shipped warm start's {theirs[:16]} (float kernels differ between CPU kinds; runs with policy.prebuilt: true use the shipped one)"),
            highlight=False,
        )
    console.print(
        f"  {info.get('parameters', 0):,} parameters; warm start on {info.get('instances')} instances × {info.get('epochs')} epochs, "
        f"{train.get('steps')} steps, {train.get('seconds')}s, final loss {train.get('final_loss')}",
        highlight=False,
    )
    name, records = held_out_records(registry, generator, bench)
    records = spread(records, limit)
    result = greedy_valid(policy.with_path(path), generator, validator, records, policy.options.prompt_style)
    table = Table(title=f"greedy decoding on {name} ({result['n']})", title_justify="left")
    table.add_column("group")
    table.add_column("valid", justify="right")
    for group, rate in result["by_group"].items():
        table.add_row(group, f"{rate:.3f}")
    table.add_row("all", f"{result['valid']:.3f} ± {result['se']:.3f}")
    console.print(table)
    console.print(f"optimal: {result['optimal']:.3f}", highlight=False)


def _task_options(items: list[str] | None) -> dict[str, Any]:
    import yaml

    from envengineer.api import ConfigError

    options: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--option {item!r}: expected KEY=VALUE")
        options[key.strip()] = yaml.safe_load(value)
    return options


def pretrain(
    state: CommandState,
    force: bool = typer.Option(False, "--force", help="rebuild even when the cached base model exists"),
    instances: Optional[int] = typer.Option(None, "--instances", help="warm-start instances (default: the tiny policy's)"),
    epochs: Optional[float] = typer.Option(None, "--epochs", help="warm-start epochs (default: the tiny policy's)"),
    threads: Optional[int] = typer.Option(None, "--threads", help="torch CPU threads"),
    task: Optional[str] = typer.Option(None, "--task", help="task family whose warm start is built (required unless exactly one is installed; see `envengineer plugins`)"),
    option: Optional[list[str]] = typer.Option(None, "--option", "-o", help="task option KEY=VALUE (repeatable)"),
    bench: Optional[str] = typer.Option(None, "--bench", help="benchmark to measure on (default: the task's benchmark matching its options, else fresh instances)"),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="measure on N instances, evenly spread over the set"),
    style: Optional[str] = typer.Option(None, "--style", help="the prompt style the base reads (the tiny policy's prompt_style; default compact): one the task declares"),
) -> None:
    """Build the embedded tiny policy's base model (cached), then print its greedy valid rate."""
    pretrain_command(state.registry, state.console, force=force, instances=instances, epochs=epochs, threads=threads,
                     task=task, task_options=_task_options(option), bench=bench, limit=limit, style=style)


def register(cli: Any, state: CommandState) -> None:
    """Add ``pretrain`` to the command line ``cli`` (a typer app) that hands ``state`` to its commands."""
    cli.command("pretrain")(state.command(pretrain))
