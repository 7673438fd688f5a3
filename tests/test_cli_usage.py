"""A usage mistake on the command line is one message and exit 2, never a traceback (typer vendors
its own click, whose exceptions are not click's)."""

import subprocess
import sys


def _envengineer(*args):
    return subprocess.run([sys.executable, "-c", "from envengineer.cli import main; main()", *args],
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

    import envengineer.benchmarks as benchmarks
    from envengineer.cli import main

    monkeypatch.setattr(benchmarks, "verify", lambda *a, **k: ["x: damaged"])
    with pytest.raises(SystemExit) as exited:
        main(["bench", "verify"])
    assert exited.value.code == 1
    monkeypatch.setattr(benchmarks, "verify", lambda *a, **k: [])
    main(["bench", "verify"])  # all fine: returns, no exit
