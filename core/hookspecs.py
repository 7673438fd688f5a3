"""Every extension point of envengineer.

Registry hooks receive a ``register`` callback and call it once per component
(the pattern of simonw/llm and tox). Hooks are always called with keyword
arguments; a spec grows only by adding arguments, which implementations opt into.

A plugin is any module or object with functions marked ``@hookimpl``::

    from envengineer import hookimpl

    @hookimpl
    def register_engineers(register):
        register(MyEngineer)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, TypeVar, cast

import pluggy

PROJECT = "envengineer"

F = TypeVar("F", bound=Callable[..., Any])

_hookspec = pluggy.HookspecMarker(PROJECT)
_hookimpl = pluggy.HookimplMarker(PROJECT)


def hookspec(function: F) -> F:
    """Typed wrapper so specs keep their real signatures for type checkers (as tox does)."""
    return cast(F, _hookspec(function))


def hookimpl(function: F | None = None, **kwargs: Any) -> Any:
    """Mark a plugin function as a hook implementation (``@hookimpl`` or ``@hookimpl(tryfirst=True)``)."""
    if function is None:
        return _hookimpl(**kwargs)
    return _hookimpl(function, **kwargs)


# ----------------------------------------------------------------- registration


@hookspec
def register_generators(register: Callable[[type], None]) -> None:
    """Register task generators: subclasses of :class:`envengineer.components.Generator`."""


@hookspec
def register_validators(register: Callable[[type], None]) -> None:
    """Register validators (scorers), paired with the generator of the same name."""


@hookspec
def register_benchmarks(register: Callable[[Any], None]) -> None:
    """Register frozen benchmark sets: :class:`envengineer.components.Benchmark` instances."""


@hookspec
def register_context_modules(register: Callable[[type], None]) -> None:
    """Register context modules (blocks of the engineer's prompt such as F, G, H, S, T)."""


@hookspec
def register_engineers(register: Callable[[type], None]) -> None:
    """Register environment engineers: LLM backends and non-LLM baselines."""


@hookspec
def register_trainers(register: Callable[[type], None]) -> None:
    """Register trainers that run one round of RL on a training set."""


@hookspec
def register_policies(register: Callable[[type], None]) -> None:
    """Register policy samplers used by evaluation (transformers, vLLM, API models)."""


@hookspec
def register_trackers(register: Callable[[type], None]) -> None:
    """Register experiment trackers: subclasses of :class:`envengineer.components.roles.Tracker`, chosen per run by the
    run config's ``trackers`` list. A tracker implements the lifecycle hooks (``on_run_start``, ...) as ``@hookimpl`` methods;
    one that raises is disabled for the rest of the run with one warning, never failing the run."""


# ----------------------------------------------------------------- command line


@hookspec
def register_commands(cli: Any, state: Any) -> dict[str, str] | None:
    """Add commands to the ``envengineer`` command line (the pattern of simonw/llm).

    :param cli: the root ``typer.Typer`` app. Add a command with ``cli.command("name")(function)``
        (or ``@cli.command()``), or a group of them with ``cli.add_typer(group, name="name")``.
        Called once, when the command line is built: import heavy modules inside the commands.
        A name the command line already has is refused with a warning, and a plugin whose hook
        raises is reported and skipped; the other commands stay.
    :param state: the commands' shared :class:`envengineer.cli.state.CommandState`: ``state.registry``
        (the installed plugins' registry, built when a command first asks), ``state.console`` and
        ``state.err_console``. A command defined inside the implementation reads it from there;
        ``state.command(function)`` makes a top-level function whose first parameter is the state a command.
    :returns: optionally, where the commands stand in ``envengineer --help``: ``{command: the command it
        follows}`` (``{"doctor": "run", "plan": "doctor"}``). The others, and those whose command is not
        there, come after the placed ones, in the order registered.
    """


@hookspec
def print_dry_run(config: Path, overrides: tuple[str, ...], gpu_memory_gb: float, state: Any) -> None:
    """Print your part of ``envengineer run --dry-run``'s plan: after round 0's data is prepared, before the
    trainer's plan and command (which end the output). The built-in gpu plugin prints the run's memory plan here.

    :param config: the run config's path; ``overrides``: the command's dotted overrides.
    :param gpu_memory_gb: the command's ``--gpu-memory-gb``, the GPU memory a plan checks against.
    :param state: the command line's :class:`envengineer.cli.state.CommandState` (``state.registry``,
        ``state.console``: print there).
    """


# ----------------------------------------------------------------------- doctor


@hookspec
def doctor_checks(components: list[Any] | None) -> list[Any]:
    """Checks of what your components need from this machine for a GPU run (``envengineer doctor``, and ``run``
    before training).

    :param components: the run's trainer, policy and engineer objects (their options validated), or None for
        ``envengineer doctor`` without a config: check everything your plugin could need.
    :returns: :class:`envengineer.loop.preflight.Check` results (``ok``, ``warn`` or ``missing``, a one-line detail and a
        fix); ``[]`` when no component is yours or none of yours needs a GPU. Returning checks for a run's
        component says that the run needs a GPU: ``run`` then checks the machine too (driver, GPUs) and stops
        before anything trains on any ``missing`` one. The first check of each name is kept. Import heavy modules
        inside the implementation; a check must not start anything (a cluster, an engine).
    """


# ----------------------------------------------------------------------- report


@hookspec
def report_sections(run: Any, generator: Any) -> list[tuple[str, str]]:
    """Sections of a plugin's own (a task's, the engineer benchmark's) for ``envengineer report`` (shown after the benchmarks).

    :param run: the :class:`envengineer.plugins.report.view.RunView` being reported (its files, ``run.task``
        the task's name, ``run.path`` the run directory).
    :param generator: the run's task :class:`envengineer.components.Generator`, or None when the
        run's task is not installed here.
    :returns: ``[(title, html), ...]``, possibly empty: return ``[]`` for a run of another task
        (check ``run.task``). The title is escaped; the HTML body is put in the page as it is, so
        escape what you take from the run's files (``html.escape``). A plot of your own goes under
        ``run.path / "report"`` and is shown with ``<img src="report/NAME.png">``. An implementation
        that raises is reported on the page and skipped; the rest of the report stays.
    """


# -------------------------------------------------------------------- lifecycle
#
# The lifecycle hooks tell a plugin what the loop did, for logging elsewhere (an experiment tracker, a
# dashboard, a chat message). Each payload (``info``, ``metrics``, ``design``, ``benchmark``) is plain
# JSON data (dicts, lists, str, int, float, bool, None) built from the files the step wrote, so a
# plugin never needs the loop's objects; the run directory stays the record. Each is built through its
# model in envengineer.loop.payloads (envengineer.api.PAYLOADS: RunStartPayload, BenchmarkPayload, DesignPayload,
# RoundPayload, RunEndPayload), which declares every key, and handed on as the model's JSON dump (a dict);
# ``RoundPayload.model_validate(metrics)`` gives it back typed. docs/writing-a-plugin.md lists every key.
# A hook is called once per event in the process that did it: a resumed run does not repeat the events
# of the steps it finds done (``on_run_start`` and ``on_run_end`` come again), except to a tracker newly
# named on the run: it alone gets the recorded events it has not logged (``<run>/trackers/logged.json``),
# rebuilt from the run directory, right after ``on_run_start``.


@hookspec
def on_run_start(run_dir: Any, config: Any, info: dict) -> None:
    """A run is starting (fresh or resumed) in ``run_dir`` with the resolved ``config``.

    :param run_dir: the :class:`envengineer.store.rundir.RunDir`.
    :param config: the resolved run config (the :class:`envengineer.loop.runconfig.RunConfig` object).
    :param info: the same as plain data: ``name``, ``run_dir``, ``resumed`` (the directory held a
        started run), ``config`` (the run config as ``run.yaml`` records it), ``suite`` (``{table, row,
        order}`` or None), ``seed``, ``rounds``, ``task``, ``engineer``, ``policy``, ``trainer``,
        ``validation``, ``benchmarks``, ``trackers`` (the names selected), ``knobs`` (the task's declared
        knobs: ``{name, low, high, step, integer, harder, share}``) and ``knob_table``
        (:class:`envengineer.loop.payloads.RunStartPayload`).
    """


@hookspec
def on_step_end(run_dir: Any, round: int | None, step: str, record: dict) -> None:
    """A loop step finished and its history line was written.

    :param run_dir: the :class:`envengineer.store.rundir.RunDir`.
    :param round: the round, or None for the steps before round 0 (``pretrain``, ``base_eval``, ``bench``).
    :param step: ``pretrain``, ``base_eval``, ``generate``, ``train``, ``eval``, ``bench`` or ``design``.
    :param record: the line appended to ``history.jsonl`` (free-form: each step writes its own fields).
    """


@hookspec
def on_benchmark_end(run_dir: Any, round: int | None, benchmark: dict) -> None:
    """A frozen set was evaluated: each of ``eval.benchmarks`` (on the base policy and when
    ``eval.bench_rounds`` says), and the validation set on the base policy (a round's validation
    comes with :func:`on_round_end`).

    :param round: the round whose checkpoint was evaluated, or None for the base policy.
    :param benchmark: ``name``, ``label``, ``role`` (``validation`` or ``benchmark``), ``round``,
        ``overall`` (``n``, ``valid_rate``, ``optimal_rate``, ``mean_score``, ...), ``by`` (``{grouping:
        {group: rates}}``, the set's subsets included), ``subsets`` (the grouping holding the set's
        subsets, or None), ``aggregate`` (``{key, title, how, values: {metric: value}}`` or None) and
        ``summary`` (the path of its ``summary.json``) (:class:`envengineer.loop.payloads.BenchmarkPayload`).
    """


@hookspec
def on_design_end(run_dir: Any, round: int, design: dict) -> None:
    """The engineer's design step after round ``round`` finished (the config round ``round + 1`` trains on).

    :param design: ``round``, ``engineer``, ``model`` (or None), ``fallback``, ``reason``, ``halted``,
        ``proposal`` (what the engineer proposed, or None), ``accepted`` (fields applied as proposed),
        ``changes`` (what the projection changed: ``{field, proposed, applied, reason}``),
        ``projection_changes`` (their count), ``config`` (the next config), ``knob_values``
        (``{group: {knob: value}}`` of it), ``notes`` (the engineer's S note, or None), ``tokens``
        (``{prompt, completion, reasoning, total}`` summed over its calls, or None when its calls report
        none), ``calls`` (API calls made), ``engineer_seconds`` (their summed latency) and ``seconds``
        (the whole step) (:class:`envengineer.loop.payloads.DesignPayload`).
    """


@hookspec
def on_round_end(run_dir: Any, round: int, metrics: dict) -> None:
    """A round finished (trained, evaluated, benchmarked when due, designed when not the last).

    :param run_dir: the :class:`envengineer.store.rundir.RunDir` (its files hold everything else).
    :param metrics: ``valid_rate``, ``optimal_rate``, ``fallback`` (whether its design step fell back;
        None for the last round), and ``round``, ``n``, ``sampled_pass1`` (or None), ``validation``
        (``{name, label, overall, by, subsets, aggregate}`` as in :func:`on_benchmark_end`), ``signal``
        (``train/signal.json``: the training signal overall and by grouping, or None), ``train``
        (``kept_prompts``, ``optimizer_steps``, ``step_offset``: the optimizer steps of the rounds
        before, ``global_step``: ``step_offset + optimizer_steps``, ``live_trackers``: the trackers the
        trainer wrote its own step metrics to, and ``metrics``: the round's train line of
        ``history.jsonl``), ``curves`` (the trainer's ``curves.jsonl`` lines, steps counted within the
        round), ``config`` (the generator config the round trained on), ``config_yaml`` (its file's
        text) and ``knob_values`` (``{group: {knob: value}}`` of it) (:class:`envengineer.loop.payloads.RoundPayload`).
    """


@hookspec
def on_run_end(run_dir: Any, metrics: dict) -> None:
    """The run ended: every round finished, or it stopped on an error.

    :param metrics: ``rounds`` (the per-round table the command prints: one dict per row, the base
        policy first), ``status`` (``finished``, ``failed`` or ``interrupted``) and ``error`` (the error's
        message, or None) (:class:`envengineer.loop.payloads.RunEndPayload`).
    """
