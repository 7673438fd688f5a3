"""Planning a suite: every config and arm over the seeds, each run's folder and the state it is in
(finished, partial, to do, a different run, failed), and the plan as a table (``--dry-run``)."""

from __future__ import annotations

import fnmatch
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.markup import escape

from envengineer.errors import EnvEngineerError
from envengineer.loop.runconfig import RunConfig
from envengineer.plugins.suite.manifest import read_entries
from envengineer.plugins.suite.model import (
    DIFFERENT,
    FAILED,
    FINISHED,
    PARTIAL,
    STATUS_FILE,
    TODO,
    Suite,
    SuiteRun,
    read_errors,
    run_key,
)


def _identity(data: Any) -> dict[str, Any]:
    """The run as the loop judges it on resume, less ``output``: a suite folder moved elsewhere still holds its runs."""
    from envengineer.loop.steps import run_identity

    return {k: v for k, v in run_identity(data).items() if k != "output"}


def _same_run(config: RunConfig) -> str:
    """Two configs that differ only in name, output and suite labels train the same run."""
    identity = _identity(config.model_dump(mode="json"))
    identity.pop("name", None)
    return json.dumps(identity, sort_keys=True, default=str)


def run_state(run_dir: Path, config: RunConfig, registry: Any = None) -> str:
    """finished / partial / to do, or "different run" when the folder holds another config. A config
    that names no ``eval.validation`` is compared with the set its task declares, as the loop records
    it in ``run.yaml`` (``registry``: default, the installed plugins)."""
    from envengineer.fileio import read_yaml
    from envengineer.store.rundir import RunDir, Step

    folder = RunDir(run_dir)
    if not folder.run_yaml.exists():
        return TODO
    if config.eval.validation is None:
        from envengineer.registry import load_registry
        from envengineer.loop.runconfig import validation_set

        name = validation_set(config, registry if registry is not None else load_registry())
        config = config.model_copy(update={"eval": config.eval.model_copy(update={"validation": name})})
    if _identity(read_yaml(folder.run_yaml)) != _identity(config.model_dump(mode="json")):
        return DIFFERENT
    return FINISHED if folder.done(Step.ROUND_END, config.rounds - 1) else PARTIAL


def parse_seeds(value: str | int | Sequence[int] | None) -> tuple[int, ...] | None:
    """``--seeds``: ``N`` (seeds 0 … N−1), ``A-B`` (A … B) or ``a,b,c``; None stays None (the manifest's seeds, else 0, 1, 2)."""
    if value is None:
        return None
    text = str(value).strip()
    seeds: tuple[int, ...] = ()
    if isinstance(value, (list, tuple)):
        seeds = tuple(int(s) for s in value)
    elif re.fullmatch(r"\d+", text):
        seeds = tuple(range(int(text)))
    elif m := re.fullmatch(r"(\d+)\s*-\s*(\d+)", text):
        seeds = tuple(range(int(m.group(1)), int(m.group(2)) + 1))
    elif re.fullmatch(r"\d+(\s*,\s*\d+)+", text):
        seeds = tuple(int(part) for part in text.split(","))
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise EnvEngineerError(f"--seeds {text}: give N (seeds 0..N-1, N >= 1), a range A-B (A <= B) or a list a,b,c of distinct seeds")
    return seeds


def plan(sources: Sequence[str | Path], *, seeds: str | int | Sequence[int] | None = None, output: str | Path, only: str | None = None,
         registry: Any = None) -> Suite:
    """Read every config and arm (errors name the file and field) and the state of each of its runs.
    ``seeds``: as ``--seeds`` takes them (:func:`parse_seeds`); None: each manifest's ``seeds:``, else 0, 1, 2.
    ``registry`` checks the arms' plugin sections (default: the installed plugins, loaded only for a manifest)."""
    chosen = parse_seeds(seeds)
    out = Path(output)
    entries = []
    first: dict[str, tuple[str, SuiteRun]] = {}  # same run -> the config that runs it, and its run
    for entry in read_entries(sources, registry):
        config = entry.config
        if only and not (fnmatch.fnmatch(entry.stem, only) or fnmatch.fnmatch(config.name, only)):
            continue
        run_seeds = chosen if chosen is not None else (entry.seeds if entry.seeds is not None else DEFAULT_SEEDS)
        missing = [s for s in run_seeds if s not in entry.seed_overrides] if entry.seed_configs else []
        if missing:
            raise EnvEngineerError(
                f"{entry.path}: seeds: the manifest gives seeds {', '.join(map(str, entry.seed_overrides))} overrides of their own, "
                f"and --seeds asks for seed {', '.join(map(str, missing))}, which has none; name seeds the manifest lists, or leave --seeds out")
        for seed in run_seeds:
            run_dir = out / entry.stem / f"seed-{seed}"
            seeded = entry.seed_configs.get(seed, config).model_copy(update={"seed": seed, "output": str(run_dir)})
            owner = first.get(_same_run(seeded))
            if owner is not None:  # e.g. the paper's V6 row and its checkpoint-engineer row
                shared = owner[1]
                entry.runs.append(SuiteRun(shared.config, seed, shared.run_dir, shared.status, same_as=owner[0]))
                continue
            run = SuiteRun(seeded, seed, run_dir, run_state(run_dir, seeded, registry))
            first[_same_run(seeded)] = (entry.stem, run)
            entry.runs.append(run)
        entries.append(entry)
    if not entries:
        raise EnvEngineerError(f"--only {only}: no config's file stem, arm or name matches" if only else "suite: no run configs")
    errors = read_errors(out / STATUS_FILE)
    for run in (r for e in entries for r in e.runs):
        error = errors.get(run_key(out, run))
        if error and not run.done:
            run.status, run.error = FAILED, str(error)
    return Suite(out, entries)


#: The seeds a suite runs when neither --seeds nor a manifest's ``seeds:`` names any.
DEFAULT_SEEDS = (0, 1, 2)


def plan_table(suite: Suite) -> Any:
    from rich.table import Table

    table = Table(title=f"suite plan: {len(suite.entries)} configs × {len(suite.entries[0].runs)} seeds in {suite.output}", title_justify="left")
    for column in ("config", "table", "row", "seed", "state", "run directory"):
        table.add_column(column)
    style = {FINISHED: "green", PARTIAL: "yellow", TODO: "", DIFFERENT: "red", FAILED: "red"}
    for entry in suite.entries:
        for run in entry.runs:
            state = run.status + (f": {run.error}" if run.error else "") + (f" (the run of {run.same_as})" if run.same_as else "")
            source = f"{entry.path} [{entry.arm}: {' '.join(entry.overrides) or 'the base'}]" if entry.arm else str(entry.path)
            table.add_row(escape(source), escape(entry.table), escape(entry.row), str(run.seed),
                          f"[{style[run.status]}]{escape(state)}[/]" if style[run.status] else escape(state), escape(str(run.run_dir)))
    return table
