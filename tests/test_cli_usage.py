"""A usage mistake on the command line is one message and exit 2, never a traceback (typer vendors
its own click, whose exceptions are not click's)."""

import os
import subprocess
import sys


def _envengineer(*args):
    return subprocess.run([sys.executable, "-c", "from envengineer.cli.commands import main; main()", *args],
                          capture_output=True, text=True, timeout=120)


def test_a_missing_option_is_a_usage_error_not_a_traceback():
    done = _envengineer("propose")
    assert done.returncode == 2 and "Missing option" in done.stderr and "Traceback" not in done.stderr


def test_an_unknown_option_is_a_usage_error_not_a_traceback():
    done = _envengineer("run", "--no-such-option")
    assert done.returncode == 2 and "No such option" in done.stderr and "Traceback" not in done.stderr


def test_a_command_that_fails_its_check_exits_non_zero(monkeypatch):
    """``bench verify`` raises typer.Exit(1) on a FAIL; click hands that back as a return value when not
    standalone, and it used to be dropped (exit 0 after printing FAIL)."""
    import pytest

    import envengineer.store.benchmarks as benchmarks
    from envengineer.cli.commands import main

    monkeypatch.setattr(benchmarks, "verify", lambda *a, **k: ["x: damaged"])
    with pytest.raises(SystemExit) as exited:
        main(["bench", "verify"])
    assert exited.value.code == 1
    monkeypatch.setattr(benchmarks, "verify", lambda *a, **k: [])
    main(["bench", "verify"])  # all fine: returns, no exit


def test_consoles_follow_the_environment_after_a_library_replaces_os_environ(monkeypatch):
    """rich binds os.environ's object when it is imported; datasets' multiprocessing (among others)
    swaps os.environ for a copy. Our consoles read whichever os.environ is current, so a width set
    afterwards (CliRunner's env, a user's COLUMNS) is honoured."""
    from envengineer.cli import commands as cli
    from envengineer.display import Console

    monkeypatch.setitem(os.environ, "COLUMNS", "80")  # a width when the consoles were made (pytest-xdist sets one)
    early = Console()
    monkeypatch.setattr(os, "environ", os.environ.copy())  # what such a library does
    monkeypatch.setitem(os.environ, "COLUMNS", "173")
    assert cli.state.console.width == 173 and cli.state.err_console.width == 173 and early.width == 173 and Console().width == 173
    assert Console(width=64).width == 64
    assert Console(_environ={"COLUMNS": "91"}).width == 91  # an explicit environment still wins


def test_an_error_naming_a_long_path_prints_the_path_whole(tmp_path, monkeypatch):
    """Errors are soft-wrapped: a long path is never broken across lines (it is copied from there)."""
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "run.yaml"
    code = "import sys; from envengineer.cli.commands import main; sys.argv = ['envengineer', 'run', sys.argv[1]]; main()"
    result = subprocess.run([sys.executable, "-c", code, str(deep)], capture_output=True, text=True,
                            env={**os.environ, "COLUMNS": "80"})
    assert result.returncode == 2 and str(deep) in result.stderr


def test_the_readme_lists_every_command():
    """README's `## Commands` block names every top-level command `envengineer --help` lists (and no other)."""
    import re
    from pathlib import Path

    import typer

    from envengineer.cli.commands import app

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    block = readme.split("## Commands", 1)[1].split("```", 2)[1]
    listed = set(re.findall(r"^envengineer ([a-z-]+)", block, flags=re.M))
    assert listed == set(typer.main.get_command(app).commands)


def test_run_configs_override_examples_name_files_that_exist(tmp_path):
    """docs/run-config.md's override commands, as written, from a clone's root: each names a config
    the repository has, and each passes `run --dry-run` (the overrides are valid fields)."""
    import re
    import shlex
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    page = (root / "docs" / "run-config.md").read_text()
    block = page.split("## Overrides on the command line", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [shlex.split(line) for line in block.splitlines() if line.startswith("envengineer run ")]
    assert len(commands) == 2
    (tmp_path / "examples").symlink_to(root / "examples")
    for command in commands:
        assert (root / command[2]).is_file(), command[2]
        code = "import sys; from envengineer.cli.commands import main; sys.argv = sys.argv[1:]; main()"
        done = subprocess.run([sys.executable, "-c", code, *command, "--dry-run"], capture_output=True, text=True,
                              timeout=300, cwd=tmp_path, env={**os.environ, "OMP_NUM_THREADS": "1"})
        assert done.returncode == 0, (command, (done.stdout + done.stderr)[-2000:])
    assert re.search(r"output=runs/\S+", block)
