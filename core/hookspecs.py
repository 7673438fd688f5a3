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


# ----------------------------------------------------------------- command line


@hookspec
def register_commands(cli: Any) -> None:
    """Add commands to the ``envengineer`` command line (the pattern of simonw/llm).

    :param cli: the root ``typer.Typer`` app. Add a command with ``cli.command("name")(function)``
        (or ``@cli.command()``), or a group of them with ``cli.add_typer(group, name="name")``.
        Called once, when the command line is built: import heavy modules inside the commands.
        A name the command line already has is refused with a warning, and a plugin whose hook
        raises is reported and skipped; the other commands stay.
    """


# ----------------------------------------------------------------------- report


@hookspec
def report_sections(run: Any, generator: Any) -> list[tuple[str, str]]:
    """Sections of a task's own for ``envengineer report`` (shown after the benchmarks).

    :param run: the :class:`envengineer.runview.RunView` being reported (its files, ``run.task``
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


@hookspec
def on_run_start(run_dir: Any, config: Any) -> None:
    """A run is starting (fresh or resumed) in ``run_dir`` with the resolved ``config``.

    :param run_dir: the :class:`envengineer.rundir.RunDir`.
    :param config: the resolved run config.
    """


@hookspec
def on_step_end(run_dir: Any, round: int | None, step: str, record: dict) -> None:
    """A loop step finished and its history line was written.

    :param run_dir: the :class:`envengineer.rundir.RunDir`.
    :param round: the round, or None for the steps before round 0 (``pretrain``, ``base_eval``, ``bench``).
    :param step: ``pretrain``, ``base_eval``, ``generate``, ``train``, ``eval``, ``bench`` or ``design``.
    :param record: the line appended to ``history.jsonl``.
    """


@hookspec
def on_round_end(run_dir: Any, round: int, metrics: dict) -> None:
    """A round finished: log it elsewhere (wandb, a dashboard, a chat message).

    :param run_dir: the :class:`envengineer.rundir.RunDir` (its files hold everything else).
    :param metrics: ``{"valid_rate", "optimal_rate", "fallback"}``: the round's validation rates and
        whether its design step fell back.
    """


@hookspec
def on_run_end(run_dir: Any, metrics: dict) -> None:
    """The last round finished.

    :param metrics: ``{"rounds": [...]}``, the per-round table the command prints (one dict per row,
        the base policy first).
    """
