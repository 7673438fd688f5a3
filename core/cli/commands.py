"""The ``envengineer`` command line: typer + rich, thin over the Python API.

Imports stay light here; commands import what they need when they run.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, NoReturn, Optional

import typer
from rich.markup import escape

from envengineer.cli.state import CommandState
from envengineer.errors import EnvEngineerError

app = typer.Typer(
    name="envengineer",
    help="RL training loops in which an engineer (often the policy itself) redesigns the training environment.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
bench_app = typer.Typer(help="Frozen benchmark sets: list, verify checksums, rebuild.", no_args_is_help=True)
app.add_typer(bench_app, name="bench")

#: what the commands share, the plugins' commands included (each register_commands implementation receives it)
state = CommandState()


@app.callback()
def _invocation() -> None:
    state.reset()  # each invocation builds its own registry, on first use


def _task_options(registry: Any, task: str, options: list[str] | None, extra: list[str] | None) -> dict[str, Any]:
    """Task options from ``--option KEY=VALUE`` and from the command's unknown ``--KEY VALUE`` /
    ``--KEY=VALUE`` pairs (``--solver-work-limit`` is ``solver_work_limit``; a bare ``--KEY`` is true);
    values are YAML. A KEY the task's options do not have is refused, naming the ones it has."""
    import yaml

    pairs: list[tuple[str, str, str]] = []  # (key, raw value, as given)
    for item in options or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise EnvEngineerError(f"--option {item!r}: expected KEY=VALUE")
        pairs.append((key.strip(), value, f"--option {item}"))
    tokens = list(extra or [])
    while tokens:
        token = tokens.pop(0)
        if not token.startswith("--") or len(token) < 3:
            raise EnvEngineerError(f"unexpected argument {token!r} (task options are --KEY VALUE or --option KEY=VALUE)")
        name, sep, value = token[2:].partition("=")
        if not sep:
            value = tokens.pop(0) if tokens and not tokens[0].startswith("--") else "true"
        pairs.append((name.replace("-", "_"), value, token))
    if not pairs:
        return {}
    fields = getattr(registry.get("generator", task).Options, "model_fields", {})
    known = [k for k in fields if k != "name"]
    opts: dict[str, Any] = {}
    for key, value, given in pairs:
        if key not in fields:
            listed = ", ".join("--" + k.replace("_", "-") for k in known) or "none"
            raise EnvEngineerError(f"{given}: no such option of this command or of task {task} (its options: {listed})")
        try:
            opts[key] = yaml.safe_load(value) if value.strip() else None
        except yaml.YAMLError:
            raise EnvEngineerError(f"{given}: the value is not YAML") from None
    return opts


def _task(task: str, options: list[str] | None = None, extra: list[str] | None = None):
    """The generator/validator pair, with ``--option k=v`` and the task's own ``--KEY VALUE`` options."""
    registry = state.registry
    return registry.task(task, _task_options(registry, task, options, extra), where="task")


def _progress(description: str, total: int | None):
    from envengineer.display import progress_bar

    return progress_bar(description, total, console=state.err_console)


TaskArg = typer.Argument(..., help="task family: a registered generator's name (`envengineer plugins` lists them)")
OptionOpt = typer.Option(None, "--option", "-o", help="task option KEY=VALUE (repeatable); a task's options also go as --KEY VALUE after the task (mapf-frozenlake: --agents 2); "
                         "`envengineer plugins --options TASK --kind task` lists them")
#: Commands on a task take the task's own options as --KEY VALUE (checked against the task's Options).
TASK_COMMAND = {"allow_extra_args": True, "ignore_unknown_options": True}


@app.command(context_settings=TASK_COMMAND)
def generate(
    ctx: typer.Context,
    task: str = TaskArg,
    n: int = typer.Option(..., "--n", min=0, help="number of instances"),
    seed: int = typer.Option(0, "--seed", help="random seed: same config and seed give byte-identical output"),
    output: Path = typer.Option(..., "--output", help="JSONL file to write (atomically)"),
    config: Optional[Path] = typer.Option(None, "--config", help="generator config YAML (default: the task's default config)"),
    workers: int = typer.Option(1, "--workers", min=1, help="processes (output is identical)"),
    option: Optional[list[str]] = OptionOpt,
) -> None:
    """Generate instance records (task options: --KEY VALUE after the task; mapf-frozenlake: --agents 2)."""
    from envengineer.loop.taskops import generate_file
    from envengineer.store.configs import load_generator_config

    generator, _ = _task(task, option, ctx.args)
    cfg = load_generator_config(generator, config)
    progress, advance = _progress(f"generating {n} {task} instances", n)
    with progress:
        discarded = generate_file(generator, cfg, n=n, seed=seed, output=output, workers=workers, progress=advance)
    note = ", ".join(f"{k}: {v}" for k, v in discarded.items()) or "none"
    state.console.print(f"wrote {n} instances to [bold]{escape(str(output))}[/] (discarded draws: {escape(str(note))})")


@app.command(context_settings=TASK_COMMAND)
def solve(
    ctx: typer.Context,
    task: str = TaskArg,
    instances: Path = typer.Option(..., "--instances", help="instance JSONL"),
    output: Path = typer.Option(..., "--output", help="response JSONL to write: {id, response}"),
    option: Optional[list[str]] = OptionOpt,
) -> None:
    """Write the reference solver's optimal answers in the policy's answer format."""
    from envengineer.fileio import read_jsonl
    from envengineer.loop.taskops import solve_records

    generator, _ = _task(task, option, ctx.args)
    records = read_jsonl(instances)
    progress, advance = _progress("solving", len(records))
    with progress:
        count = solve_records(generator, records, source=instances, output=output, progress=advance)
    state.console.print(f"wrote {count} answers to [bold]{escape(str(output))}[/]")


@app.command(context_settings=TASK_COMMAND)
def score(
    ctx: typer.Context,
    task: str = TaskArg,
    instances: Path = typer.Option(..., "--instances", help="instance JSONL"),
    responses: Path = typer.Option(..., "--responses", help="response JSONL: {id, response} per line"),
    output: Path = typer.Option(..., "--output", help="verdict JSONL to write, one per response line"),
    option: Optional[list[str]] = OptionOpt,
) -> None:
    """Score responses; print valid/optimal rates per group of every grouping the task declares, and failure counts."""
    from envengineer.display import print_summary
    from envengineer.loop.evaluation import display_dimensions
    from envengineer.loop.taskops import score_file

    generator, validator = _task(task, option, ctx.args)
    summary = score_file(generator, validator, instances=instances, responses=responses, output=output)
    print_summary(summary, validator.failure_types, dimensions=display_dimensions(generator), console=state.console, title=f"{task}")
    state.console.print(f"wrote {summary.overall.n} verdicts to [bold]{escape(str(output))}[/]")


#: ``--kind`` spellings beyond the registry's own kinds.
KIND_ALIASES = {"task": "generator", "context-module": "context_module"}


def _kind(kind: str | None) -> str | None:
    """A ``--kind`` value as the registry names it; an unknown one exits 2, listing the kinds."""
    if kind is None:
        return None
    from envengineer.registry import HOOKS

    name = KIND_ALIASES.get(kind, kind)
    if name not in HOOKS:
        known = ", ".join(k.replace("_", "-") for k in HOOKS)
        _usage_error(f"--kind {kind}: no such kind (kinds: {known}; task is generator)")
    return name


def _usage_error(message: str) -> NoReturn:
    """Print ``message`` as an error and exit 2 (a usage mistake)."""
    state.err_console.print(f"[bold red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    raise typer.Exit(2)


def _print_options(registry: Any, name: str, kind: str | None) -> None:
    """Every component called ``name`` (of ``kind``, if given): its options as a table; a name
    no component of that kind has exits 2, listing the names there are."""
    from rich.text import Text

    from envengineer.display import options_tables

    entries = [e for e in registry.entries(kind) if e.name == name]
    if not entries:
        scope = registry.entries(kind)
        elsewhere = [e.kind.replace("_", "-") for e in registry.entries() if e.name == name]
        listed = "; ".join(
            f"{k.replace('_', '-')}: {', '.join(names)}"
            for k in dict.fromkeys(e.kind for e in scope)
            if (names := [e.name for e in scope if e.kind == k])
        )
        where = f"no {kind.replace('_', '-')} is called {name!r}" if kind else f"no component is called {name!r}"
        hint = f" (registered as {', '.join(elsewhere)}: pass --kind {elsewhere[0]})" if elsewhere else ""
        _usage_error(f"--options {name}: {where}{hint}; registered: {listed or 'none'}")
    if len(entries) > 1:
        state.console.print(f"[dim]{escape(name)} is registered as {len(entries)} kinds of component "
                      f"({escape(', '.join(e.kind.replace('_', ' ') for e in entries))}); --kind picks one[/]", highlight=False)
    for entry in entries:
        label = entry.kind.replace("_", " ")
        if entry.kind == "benchmark":
            spec = entry.obj
            drawn = ", ".join(f"{k}: {v}" for k, v in spec.options.items()) or "the task's defaults"
            state.console.print(f"[bold]benchmark {escape(name)}[/]: a frozen set of task {escape(spec.task)} "
                          f"(drawn under task options {escape(drawn)}); it takes no options", highlight=False, soft_wrap=True)
            continue
        what = {
            "generator": "task options: the run config's task: section",
            "context_module": f"the run config's context.options.{name} section",
            "tracker": f"an entry of the run config's trackers: list, {{name: {name}, ...}}",
        }.get(entry.kind, f"the run config's {entry.kind}: section" if entry.kind in ("engineer", "policy", "trainer") else "options")
        title = f"{label} {name} ({entry.owner}): {what}"
        model = entry.obj.Options
        if not model.model_fields:
            state.console.print(f"[bold]{escape(label)} {escape(name)}[/] ({escape(entry.owner)}): no options", highlight=False, soft_wrap=True)
            continue
        for index, table in enumerate(options_tables(model, title)):
            if index == 0 and entry.description:
                table.caption, table.caption_justify = Text(entry.description), "left"
            state.console.print(table)


@app.command()
def plugins(
    options: Optional[str] = typer.Option(
        None, "--options", metavar="NAME", help="print the options of the component(s) called NAME as a table: field, type, default, description",
    ),
    kind: Optional[str] = typer.Option(
        None, "--kind", help="only components of this kind: generator (or task), validator, benchmark, context-module, engineer, trainer, policy, tracker; "
        "with --options, picks one of several components of the same name",
    ),
) -> None:
    """List every registered component and the plugin it comes from; --options NAME prints one's options."""
    from rich.table import Table

    registry = state.registry
    kind = _kind(kind)
    if options is not None:
        _print_options(registry, options, kind)
        return
    table = Table(title="registered components", title_justify="left")
    for column in ("kind", "name", "plugin", "from", "description"):
        table.add_column(column)
    for entry in registry.entries(kind):
        table.add_row(entry.kind.replace("_", " "), entry.name, entry.owner, entry.origin, entry.description)
    state.console.print(table)
    report = registry.pm.load_report
    if report.failed:  # each error is logged once, when the first manager of the process loads the plugins
        state.err_console.print(f"[red]failed to load (the error is above):[/] {escape(', '.join(str(who) for who, _ in report.failed))}")
    for who in report.blocked:
        state.console.print(f"[dim]blocked: {escape(str(who))}[/]")


@bench_app.command("list")
def bench_list() -> None:
    """List the frozen benchmark sets."""
    from envengineer.store.benchmarks import benchmark_table

    state.console.print(benchmark_table(state.registry))


@bench_app.command("verify")
def bench_verify(names: Optional[list[str]] = typer.Argument(None, help="benchmarks (default: all)")) -> None:
    """Check every benchmark file against its sha256."""
    from envengineer.store.benchmarks import verify

    problems = verify(state.registry, names or None, console=state.console)
    if problems:
        raise typer.Exit(1)


@bench_app.command("build")
def bench_build(
    names: Optional[list[str]] = typer.Argument(None, help="benchmarks (default: all)"),
    check: bool = typer.Option(False, "--check", help="rebuild in memory and compare, write nothing"),
    update: bool = typer.Option(False, "--update", help="re-freeze: accept a changed checksum (after a deliberate generator change)"),
) -> None:
    """Rebuild benchmark files from their specs (identically); refuses to change a frozen checksum."""
    from envengineer.store.benchmarks import build

    problems = build(state.registry, names or None, check=check, update=update, console=state.console)
    if problems:
        raise typer.Exit(1)


RunOpt = typer.Option(..., "--run", help="run directory")
RoundOpt = typer.Option(..., "--round", min=0, help="recorded round N, the run's round-NN folder (rounds are numbered from 0)")


@app.command()
def context(
    run: Path = RunOpt,
    round: int = RoundOpt,
    preset: Optional[str] = typer.Option(None, "--preset", help="V1 ... V6"),
    modules: Optional[str] = typer.Option(None, "--modules", help="comma-separated modules, e.g. F,G,H,T (T:full for full training details)"),
) -> None:
    """Print the composed engineer context for a recorded round."""
    from envengineer.loop.replay import context_spec_from_cli
    from envengineer.design.context import compose_context
    from envengineer.design.evidence import load_evidence

    registry = state.registry
    evidence = load_evidence(run, round, registry)
    sys.stdout.write(compose_context(registry, context_spec_from_cli(run, preset, modules), evidence))


@app.command()
def propose(
    run: Path = RunOpt,
    round: int = RoundOpt,
    engineer: Optional[str] = typer.Option(None, "--engineer", help="engineer name (default: the run's)"),
    engineer_config: Optional[Path] = typer.Option(None, "--engineer-config", help="YAML with the engineer's options"),
    output: Optional[Path] = typer.Option(None, "--output", help="folder for prompt.md, response.md, projection.yaml, ... (default: none)"),
    reask: int = typer.Option(1, "--reask", min=0, help="re-asks on unusable output"),
) -> None:
    """Run an engineer offline on a recorded round's evidence; print proposal, projection and diff."""
    import yaml
    from rich.table import Table

    from envengineer.design.prompts import diff_rows
    from envengineer.loop.replay import propose_offline

    request, outcome = propose_offline(state.registry, run, round, engineer, engineer_config, out_dir=output, reask=reask)
    state.console.rule("proposal")
    state.console.print(yaml.safe_dump(outcome.proposal, sort_keys=False) if outcome.proposal is not None else "(none)", markup=False, highlight=False)
    if outcome.fallback:
        state.console.print(f"[bold yellow]fallback:[/] {escape(str(outcome.reason))}", highlight=False)
    if outcome.projection is not None:
        table = Table(title="projection", title_justify="left")
        for column in ("field", "proposed", "applied", "reason"):
            table.add_column(column)
        for change in outcome.projection.changes:
            table.add_row(change.field, repr(change.proposed), repr(change.applied), change.reason)
        state.console.print(table if table.row_count else "projection: no changes to the proposal")
        state.console.print(f"accepted: {escape(', '.join(outcome.projection.accepted) or 'none')}", highlight=False)
    diff = Table(title=f"config: round {round} -> round {round + 1}", title_justify="left")
    for column in ("field", "current", "next"):
        diff.add_column(column)
    for row in diff_rows(request.current_config, outcome.config):
        diff.add_row(*row)
    state.console.print(diff if diff.row_count else "config unchanged")
    if outcome.summary:
        state.console.rule("summary")
        state.console.print(outcome.summary, markup=False, highlight=False)


@app.command("run")
def run_command(
    config: Path = typer.Argument(..., help="run config YAML (see examples/)"),
    overrides: Optional[list[str]] = typer.Argument(
        None, help="dotted overrides KEY.SUB=VALUE (YAML values), checked like the file: seed=2 engineer.name=fixed trainer.beta=0.01",
        show_default=False,
    ),
    resume: bool = typer.Option(True, "--resume/--no-resume", help="continue a run in the same directory (default); --no-resume refuses an existing one"),
    output: Optional[str] = typer.Option(None, "--output", help="run directory (overrides the config's output)"),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="prepare the starting policy and round 0's data, print what the trainer would run (verl: the exact command) "
        "and its memory plan (as `envengineer plan`); train nothing",
    ),
    gpu_memory_gb: float = typer.Option(80.0, "--gpu-memory-gb", min=1.0, help="--dry-run: the GPU memory the plan checks against"),
) -> None:
    """Run the closed loop: generate → train → eval → design, for the configured rounds (resumable).

    run.yaml in the run directory records the config with the overrides applied.
    """
    from envengineer.loop.steps import run
    from envengineer.loop.runconfig import load_run_config

    registry = state.registry
    cfg = load_run_config(config, overrides or (), registry)
    target = Path(output or cfg.output or Path("runs") / cfg.name)
    if not resume and (target / "history.jsonl").exists():
        raise EnvEngineerError(f"{target}: already holds a run; pass --resume to continue it or choose another --output")
    if dry_run:
        plan = run(config, registry=registry, console=state.console, output=output, overrides=overrides or (), dry_run=True)
        if registry.pm.hook.print_dry_run.get_hookimpls():  # the memory plan: the gpu plugin's part (it may be blocked)
            registry.pm.hook.print_dry_run(config=config, overrides=tuple(overrides or ()), gpu_memory_gb=gpu_memory_gb, state=state)
        else:
            state.console.print(f"[bold]memory plan[/]: none: {NO_MEMORY_PLAN}", highlight=False)
        _print_plan(plan)  # last: the command ends the output, to copy
        return
    run(config, registry=registry, console=state.console, output=output, overrides=overrides or ())
    state.console.print(f"run directory: [bold]{escape(str(target))}[/]  (report: envengineer report {escape(str(target))})")


#: What ``run --dry-run`` says in the memory plan's place when no plugin prints a part of a dry run (``print_dry_run``).
NO_MEMORY_PLAN = "the gpu plugin (envengineer.plugins.gpu) is not loaded"


def _print_plan(plan: dict) -> None:
    """The trainer's dry-run plan: its data, environment and command (printed whole, to copy)."""
    for key, value in plan.items():
        if key in ("command", "env"):
            continue
        if isinstance(value, dict):
            state.console.print(f"[bold]{escape(key)}[/]")
            for sub, item in value.items():
                state.console.print(f"  {escape(str(sub))}: {escape(str(item))}", highlight=False)
        else:
            state.console.print(f"[bold]{escape(key)}[/]: {escape(str(value))}", highlight=False)
    if plan.get("env"):
        state.console.print("[bold]environment[/]")
        for name, value in plan["env"].items():
            state.console.print(f"  {escape(name)}={escape(str(value))}", highlight=False)
    if plan.get("command"):
        state.console.print("[bold]command[/]")
        print(plan["command"], flush=True)  # unwrapped, so it can be copied


@app.command("eval")
def eval_command(
    policy: str = typer.Option(..., "--policy", help="NAME or NAME:PATH, e.g. tiny, transformers:/models/qwen3-4b, openai-compatible"),
    bench: list[str] = typer.Option(..., "--bench", help="benchmark name (repeatable; `envengineer bench list` lists them)"),
    policy_config: Optional[Path] = typer.Option(None, "--policy-config", help="YAML with the policy's options"),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="evaluate N instances, evenly spread over the set"),
    output: Optional[Path] = typer.Option(None, "--output", help="folder for summary.json, rates.csv, verdicts, responses"),
    style: Optional[str] = typer.Option(None, "--style", help="prompt style (default: the policy's)"),
) -> None:
    """Evaluate a policy on benchmarks: valid/optimal rates per subset and per group of the task's groupings; failure counts; the benchmark's aggregate."""
    from envengineer.loop.evaluation import display_dimensions, evaluate, spread, write_eval
    from envengineer.display import aggregate_line, print_summary
    from envengineer.fileio import read_jsonl, read_yaml

    registry = state.registry
    name, _, path = policy.partition(":")
    options = dict(read_yaml(policy_config) or {}) if policy_config else {}
    if path:
        options["path"] = path
    sampler = registry.create("policy", name, options, where=f"policy.{name}")
    for bench_name in bench:
        spec = registry.benchmark(bench_name)
        generator, validator = registry.task(spec.task, dict(spec.options))
        problem = generator.style_problem(style or sampler.prompt_style)
        if problem:
            from envengineer.errors import ConfigError

            raise ConfigError(f"{'--style' if style else f'policy.{name}.prompt_style'}: {problem}")
        if sampler.has_weights:
            sampler = sampler.with_path(sampler.prepare(generator=generator))
        records = spread(read_jsonl(spec.path), limit)
        progress, advance = _progress(f"evaluating on {bench_name}", len(records))
        with progress:
            result = evaluate(sampler, generator, validator, records, style=style, progress=advance, benchmark=spec)
        dims = display_dimensions(generator, spec)
        print_summary(result.summary, validator.failure_types, dimensions=dims, console=state.console, title=bench_name)
        aggregate = result.aggregate_values()
        if aggregate is not None and spec.aggregate is not None:
            state.console.print(aggregate_line(spec.aggregate, aggregate))
        if output:
            write_eval(output / bench_name, result)
            state.console.print(f"wrote {escape(str(output / bench_name))}")
        if result.failed_calls:
            calls = result.calls
            state.err_console.print(
                f"[yellow]{calls['failed']} of {calls['responses']} calls gave no answer (scored as empty responses); "
                f"first error:[/] {escape(str(calls['first_error']))}",
                highlight=False, soft_wrap=True,
            )
        if result.all_failed:
            raise EnvEngineerError(
                f"{bench_name}: every call to policy {name} failed, so its rates mean nothing; first error: {result.calls['first_error']}"
            )


#: The order of the core's commands in ``envengineer --help``; a plugin's command goes where its
#: ``register_commands`` places it (:func:`help_order`).
HELP_ORDER = ("generate", "solve", "score", "plugins", "context", "propose", "run", "eval")


def help_order(core: tuple[str, ...], placed: dict[str, str]) -> list[str]:
    """``core``'s commands in order, with each command of ``placed`` (``{command: the command it follows}``) right
    after the one it follows, once that one is in; one that follows a command that is not there is left out."""
    order = list(core)
    waiting = {name: after for name, after in placed.items() if name not in order}
    while True:
        ready = [name for name, after in waiting.items() if after in order]
        if not ready:
            return order
        for name in ready:
            order.insert(order.index(waiting.pop(name)) + 1, name)


def _name(info: Any) -> str | None:
    return info.name or (info.callback.__name__.replace("_", "-") if info.callback else None)


def _plugin_commands() -> None:
    """Commands that plugins add through the ``register_commands`` hook (e.g. the tiny policy's
    ``pretrain``). A plugin's command may not take a name the command line already has; a plugin
    whose hook fails is reported and skipped."""
    from envengineer.plugin_manager import create_plugin_manager

    try:
        pm = create_plugin_manager()
    except EnvEngineerError:
        return  # the commands that load plugins report it
    names = {_name(info) for info in app.registered_commands}
    names |= {info.name for info in app.registered_groups}
    arguments = {"cli": app, "state": state}
    placed: dict[str, str] = {}
    for impl in reversed(pm.hook.register_commands.get_hookimpls()):  # in registration order
        before = len(app.registered_commands), len(app.registered_groups)
        try:
            places = impl.function(**{arg: arguments[arg] for arg in impl.argnames})
        except Exception as exc:  # a broken plugin must not take the command line down
            del app.registered_commands[before[0] :], app.registered_groups[before[1] :]
            state.err_console.print(f"[yellow]plugin {escape(impl.plugin_name)}: register_commands failed: {escape(repr(exc))}[/]")
            continue
        added = []
        for infos in (app.registered_commands, app.registered_groups):
            for info in list(infos[before[infos is app.registered_groups] :]):
                name = _name(info)
                if name in names:
                    infos.remove(info)
                    state.err_console.print(f"[yellow]plugin {escape(impl.plugin_name)}: command {escape(str(name))!r} already exists; not added[/]")
                else:
                    names.add(name)
                    added.append(name)
        placed.update({name: after for name, after in (places or {}).items() if name in added})
    # the core's commands in their order, each plugin's where it placed them; the others after them, as registered
    rank = {name: index for index, name in enumerate(help_order(HELP_ORDER, placed))}
    app.registered_commands.sort(key=lambda info: rank.get(_name(info), len(rank)))


_plugin_commands()


def _usage_errors() -> tuple[type[BaseException], ...]:
    """click's usage-error class, and typer's vendored copy of it (typer >= 0.20 ships its own click)."""
    found: list[type[BaseException]] = []
    try:
        import click

        found.append(click.ClickException)
    except ImportError:
        pass
    try:
        from typer._click import exceptions as vendored  # type: ignore[import-not-found]

        found.append(vendored.ClickException)
    except ImportError:
        pass
    return tuple(found)


def main(argv: list[str] | None = None) -> None:
    """Entry point: user errors print as one red message and exit 2, without a traceback; a
    command's returned exit code is the process's."""
    try:
        code = app(args=argv, standalone_mode=False)
    except EnvEngineerError as exc:
        state.err_console.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)  # paths stay whole
        sys.exit(2)
    except (typer.Exit, SystemExit) as exc:
        code = getattr(exc, "exit_code", getattr(exc, "code", 0))
        sys.exit(code or 0)
    except typer.Abort:
        state.err_console.print("aborted")
        sys.exit(130)
    except Exception as exc:  # click usage errors
        if isinstance(exc, _usage_errors()):
            exc.show()  # type: ignore[attr-defined]
            sys.exit(exc.exit_code)  # type: ignore[attr-defined]
        raise
    if isinstance(code, int) and not isinstance(code, bool) and code:
        sys.exit(code)


if __name__ == "__main__":
    main()
