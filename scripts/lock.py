#!/usr/bin/env python
"""The tested set of versions, ``requirements/lock.txt``: refresh it, check it, and look for drift.

    python scripts/lock.py                 refresh the lock from pyproject.toml (uv pip compile; keeps every pin
                                           pyproject still allows, so only what changed moves)
    python scripts/lock.py --upgrade       refresh with the newest releases pyproject allows
    python scripts/lock.py check           exit 1 when pyproject.toml asks for what the lock does not pin
                                           (offline; tests/test_lock.py runs the same check)
    python scripts/lock.py drift           before a release: pyproject's ranges resolved fresh by pip (no lock) into
                                           a scratch venv, the smoke subset run there, and, when it fails, the new
                                           release that breaks it found by putting packages back at the lock's versions

The lock is ``uv pip compile`` of pyproject.toml's ``dev`` extra (which includes ``train`` and every other extra
the tests use) for CPython 3.11 on x86-64 Linux, with requirements/lock.in as constraints (torch at the CPU
wheel's version). uv comes from the package index: ``pip install uv``. docs/installing.md says
when to refresh and how a refresh is reviewed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Callable, Optional

import typer
from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "lock.txt"
LOCK_IN = ROOT / "requirements" / "lock.in"
EXTRA = "dev"
PYTHON = "3.11"
PLATFORM = "x86_64-manylinux_2_28"
#: the smoke subset of the drift check: the quickstart's path (tiny policy, TRL's trainer), transformers'
#: models, the real LLM, the engineers' SDK clients, verl's config classes, the task families' libraries
SMOKE = [
    "tests/test_tiny_policy.py",
    "tests/test_trl_trainer.py",
    "tests/test_smollm2_policy.py",
    "tests/test_structured.py",
    "tests/test_real_server.py",
    "tests/test_verl_trainer.py",
    "tests/test_verifiers_task.py",
    "tests/test_reasoning_gym.py",
    "tests/test_trackers.py",
]

console = Console()
app = typer.Typer(add_completion=False, help=__doc__.split("\n\n")[0], invoke_without_command=True)


def _uv() -> list[str]:
    found = shutil.which("uv")
    if found:
        return [found]
    try:
        import uv  # noqa: F401  (the uv wheel ships the binary)

        return [sys.executable, "-m", "uv"]
    except ImportError:
        console.print("[red]uv is not installed[/]: pip install uv")
        raise typer.Exit(2)


def compile_lock(out: Path, upgrade: bool = False, preferences: Path | None = None) -> None:
    """``uv pip compile`` of pyproject's ``dev`` extra into ``out`` (pins of ``preferences`` kept where allowed)."""
    if preferences is not None and preferences.resolve() != out.resolve() and preferences.exists():
        shutil.copy2(preferences, out)  # uv keeps the pins of an existing output file
    command = [*_uv(), "pip", "compile", "pyproject.toml", "--extra", EXTRA, "--python-version", PYTHON,
               "--python-platform", PLATFORM, "-c", str(LOCK_IN.relative_to(ROOT)), "-o", str(out), "--quiet",
               "--custom-compile-command", "python scripts/lock.py"]
    if upgrade:
        command.append("--upgrade")
    subprocess.run(command, cwd=ROOT, check=True)
    text = out.read_text()
    # the constraints file by its path in the checkout, whatever folder uv was given
    out.write_text(text.replace(str(LOCK_IN), LOCK_IN.relative_to(ROOT).as_posix()))


def _pins(path: Path) -> dict[str, str]:
    from envengineer.plugins.gpu.lock import read_lock

    return read_lock(path)


@app.callback()
def refresh(ctx: typer.Context, upgrade: bool = typer.Option(False, "--upgrade", help="the newest releases pyproject allows")) -> None:
    """Refresh requirements/lock.txt from pyproject.toml (the default command)."""
    if ctx.invoked_subcommand is not None:
        return
    before = _pins(LOCK) if LOCK.exists() else {}
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "lock.txt"
        compile_lock(fresh, upgrade=upgrade, preferences=LOCK)
        after = _pins(fresh)
        tmp_lock = LOCK.with_suffix(".txt.tmp")
        shutil.copy2(fresh, tmp_lock)
        os.replace(tmp_lock, LOCK)  # atomically
    _print_changes(before, after, "lock", "refreshed")
    console.print(f"wrote {LOCK.relative_to(ROOT)}: {len(after)} pins; run the tests on it before committing")


def _print_drift(pins: dict[str, str], fresh: dict[str, str]) -> list[str]:
    """The fresh venv against the lock: each package installed at another version than the lock's, and each one
    installed that the lock does not have (the lock's CUDA packages, which the CPU wheel never asks for, are not
    differences); returns the changed names (the candidates of the search)."""
    from envengineer.plugins.gpu.lock import INSTALLERS, same_version

    changed = sorted(n for n in fresh if n in pins and not same_version(fresh[n], pins[n]))
    added = sorted(n for n in fresh if n not in pins and n not in INSTALLERS)
    if not changed and not added:
        console.print(f"the fresh set is the lock's ({len(fresh)} packages)")
        return changed
    table = Table(title=f"the fresh set against the lock: {len(changed)} at other versions, {len(added)} not in the lock")
    for column in ("package", "lock", "fresh"):
        table.add_column(column)
    for name in changed:
        table.add_row(name, pins[name], fresh[name])
    for name in added:
        table.add_row(name, "-", fresh[name])
    console.print(table)
    return changed


def _print_changes(before: dict[str, str], after: dict[str, str], a: str, b: str) -> list[str]:
    changed = sorted(n for n in set(before) | set(after) if before.get(n) != after.get(n))
    if not changed:
        console.print(f"no pin differs between the {a} and the {b} set")
        return changed
    table = Table(title=f"{len(changed)} pins differ")
    for column in ("package", a, b):
        table.add_column(column)
    for name in changed:
        table.add_row(name, before.get(name, "-"), after.get(name, "-"))
    console.print(table)
    return changed


@app.command()
def check(lock: Path = typer.Option(LOCK, help="the lock to check")) -> None:
    """Exit 1 when pyproject.toml asks for a package of the dev extra that the lock does not pin, or pins at a
    version outside pyproject's range (offline)."""
    from envengineer.plugins.gpu.lock import unmet_requirements

    problems = unmet_requirements(ROOT / "pyproject.toml", EXTRA, _pins(lock), python=PYTHON)
    for line in problems:
        console.print(f"[red]{line}[/]")
    if problems:
        console.print("refresh the lock: python scripts/lock.py")
        raise typer.Exit(1)
    shown = lock.relative_to(ROOT) if lock.resolve().is_relative_to(ROOT) else lock
    console.print(f"{shown}: every requirement of .\\[{EXTRA}] is pinned within its range")


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _pip(venv: Path, *args: str) -> None:
    subprocess.run([str(_venv_python(venv)), "-m", "pip", "install", "--quiet", "--disable-pip-version-check", *args],
                   cwd=ROOT, check=True)


def _installed(venv: Path) -> dict[str, str]:
    code = ("import importlib.metadata as m, json, re; print(json.dumps({re.sub(r'[-_.]+','-',d.metadata['Name']).lower(): "
            "d.version for d in m.distributions() if d.metadata['Name']}))")
    out = subprocess.run([str(_venv_python(venv)), "-c", code], capture_output=True, text=True, check=True).stdout
    return json.loads(out)


def _smoke(venv: Path, tests: list[str], log: Path) -> bool:
    with log.open("a") as fh:
        fh.write(f"\n==== pytest {' '.join(tests)}\n")
        fh.flush()
        rc = subprocess.run([str(venv / "bin" / "pytest"), "-q", "-p", "no:cacheprovider", *tests], cwd=ROOT,
                            stdout=fh, stderr=subprocess.STDOUT).returncode
    return rc == 0


@app.command()
def drift(
    venv: Optional[Path] = typer.Option(None, help="the scratch venv (default: a new temporary folder, removed after)"),
    output: Path = typer.Option(Path("out/drift.json"), help="the report: versions, what differs, the smoke verdicts"),
    tests: Optional[list[str]] = typer.Option(None, "--test", help="the smoke subset (repeatable; default: SMOKE)"),
    extra: str = typer.Option(EXTRA, "--extra", help="the extra to resolve fresh, as a library user installs it (e.g. "
                              "train: the quickstart's; the test runner is added unpinned when the extra lacks it)"),
) -> None:
    """Resolve pyproject's ranges fresh (pip, no lock) into a scratch venv, run the smoke subset there, and name the
    new release that breaks it."""
    tests = list(tests or SMOKE)
    pins = _pins(LOCK)
    scratch = None
    if venv is None:
        scratch = Path(tempfile.mkdtemp(prefix="envengineer-drift-"))
        venv = scratch / "venv"
    log = output.with_suffix(".log")
    output.parent.mkdir(parents=True, exist_ok=True)
    log.write_text("")
    try:
        with console.status("a scratch venv with pyproject's ranges resolved fresh (no lock)"):
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            _pip(venv, "torch==2.13.0")
            _pip(venv, "-e", f".[{extra}]")
            if extra != EXTRA:  # the runner of the smoke subset, which only dev brings
                _pip(venv, "pytest", "pytest-xdist", "hypothesis")
            subprocess.run([str(venv / "bin" / "envengineer"), "models", "smollm2-135m-instruct", "--fetch"], cwd=ROOT,
                           check=True, stdout=subprocess.DEVNULL)
        fresh = _installed(venv)
        fresh.pop("envengineer", None)
        changed = _print_drift(pins, fresh)
        with console.status(f"the smoke subset ({len(tests)} files) on the fresh set"):
            ok = _smoke(venv, tests, log)
        verdict: dict = {"fresh_passes": ok, "culprit": None, "checked": []}
        if not ok and changed:
            verdict.update(_bisect(venv, tests, changed, pins, fresh, log))
        report = {"lock": pins, "fresh": fresh, "changed": changed, "tests": tests, **verdict}
        tmp = output.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, output)
        if ok:
            console.print(f"[green]the smoke subset passes on the fresh set[/] ({len(changed)} pins newer than the lock); report {output}")
        elif verdict.get("culprit"):
            name = verdict["culprit"]
            console.print(f"[bold red]{name} {fresh[name]} breaks the smoke subset[/] (passes with the lock's {pins[name]}); "
                          f"exclude it in pyproject.toml (\"{name}!={fresh[name]}\") or fix the code; log {log}")
        else:
            console.print(f"[bold red]the smoke subset fails on the fresh set[/] and no single package put back at the lock's "
                          f"version fixes it: {verdict.get('why', '')}; log {log}")
        if not ok:
            raise typer.Exit(1)
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _set(venv: Path, names: list[str], versions: dict[str, str]) -> None:
    if names:
        _pip(venv, "--no-deps", *[f"{n}=={versions[n]}" for n in names])


def find_culprit(changed: list[str], passes: Callable[[list[str]], bool]) -> tuple[str | None, list[dict], str]:
    """The one package of ``changed`` that breaks the smoke subset, by binary search: ``passes(names)`` runs the
    subset with ``names`` put back at the lock's versions (the rest of ``changed`` at their fresh ones). Returns
    ``(culprit or None, each try as {"at_lock": names, "passes": verdict}, why none was found)``."""
    tries: list[dict] = []

    def attempt(names: list[str]) -> bool:
        verdict = passes(names)
        tries.append({"at_lock": list(names), "passes": verdict})
        return verdict

    if not attempt(list(changed)):
        return None, tries, "it fails with every changed pin at the lock's version too (the code, not a release)"
    candidates = list(changed)
    while len(candidates) > 1:
        half = candidates[: len(candidates) // 2]
        candidates = half if attempt(half) else candidates[len(half):]
    if attempt(candidates):
        return candidates[0], tries, ""
    return None, tries, "the failure needs more than one new release together"


def _bisect(venv: Path, tests: list[str], changed: list[str], pins: dict[str, str], fresh: dict[str, str], log: Path) -> dict:
    """:func:`find_culprit` in the scratch venv: each try installs the named packages at the lock's versions and the
    other changed ones at their fresh versions (``pip install --no-deps``), then runs the smoke subset."""

    def passes(names: list[str]) -> bool:
        _set(venv, [n for n in changed if n not in names], fresh)
        _set(venv, names, pins)
        with console.status(f"the smoke subset with {len(names)} of {len(changed)} changed pins at the lock's versions"):
            return _smoke(venv, tests, log)

    culprit, tries, why = find_culprit(changed, passes)
    _set(venv, changed, fresh)  # the venv as pip resolved it again
    return {"culprit": culprit, "checked": tries, "why": why}


if __name__ == "__main__":
    app()
