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
