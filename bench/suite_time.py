#!/usr/bin/env python
"""Where the test suite's time goes: every test's wall and CPU seconds, summed per file and per worker.

    python bench/suite_time.py                      # the whole suite, as `pytest` runs it (two workers here)
    python bench/suite_time.py tests/test_loop.py   # any pytest arguments
    python bench/suite_time.py --top 20 --json out/suite-time.json
    python bench/suite_time.py --tests 30 -m long   # also the 30 slowest tests; the long tier alone

Runs pytest with a small plugin (this file, loaded with ``-p``) that reads ``resource.getrusage`` (the process
and its waited-for children) and the monotonic clock around each test, and writes one JSON file per worker;
then prints the files by wall seconds, the workers' sums and the CPU the tests used, the figure that bounds the
suite's wall time from below on a machine (CPU seconds / cores). docs/performance.md quotes its output.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_OUT = "ENVENGINEER_TEST_TIME_DIR"

# ----------------------------------------------------------------------------- the pytest plugin (in the workers)

_rows: list[tuple[str, float, float]] = []


def _cpu() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


try:
    import pytest

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(item, nextitem):  # noqa: ARG001 - pytest's hook signature
        cpu, wall = _cpu(), time.monotonic()
        yield
        _rows.append((item.nodeid, _cpu() - cpu, time.monotonic() - wall))

    def pytest_sessionfinish(session):  # noqa: ARG001
        folder = os.environ.get(_OUT)
        if folder:
            worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
            Path(folder, f"{worker}.json").write_text(json.dumps(_rows))
except ImportError:  # the plugin needs pytest; the report below does not
    pass


# ----------------------------------------------------------------------------- the report


def main(argv: list[str]) -> int:
    top, tests, json_out, args = 15, 0, None, []
    it = iter(argv)
    for arg in it:
        if arg == "--top":
            top = int(next(it))
        elif arg == "--tests":
            tests = int(next(it))
        elif arg == "--json":
            json_out = Path(next(it))
        else:
            args.append(arg)
    from rich.console import Console
    from rich.table import Table

    console = Console()
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, _OUT: folder, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT / "bench"), os.environ.get("PYTHONPATH")]))}
        start = time.monotonic()
        rc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "suite_time", "-p", "no:cacheprovider", *args], cwd=ROOT, env=env).returncode
        wall = time.monotonic() - start
        rows = {p.stem: json.loads(p.read_text()) for p in Path(folder).glob("*.json")}
    by_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    by_worker = {w: (sum(r[1] for r in rs), sum(r[2] for r in rs), len(rs)) for w, rs in rows.items()}
    for rs in rows.values():
        for nodeid, cpu, seconds in rs:
            entry = by_file[nodeid.split("::")[0]]
            entry[0] += seconds
            entry[1] += cpu
            entry[2] += 1
    table = Table(title=f"the {min(top, len(by_file))} slowest of {len(by_file)} test files (wall and CPU seconds of their tests)")
    for column in ("file", "tests", "wall s", "CPU s", "share of wall"):
        table.add_column(column, justify="left" if column == "file" else "right")
    total_wall = sum(e[0] for e in by_file.values()) or 1.0
    for name, (seconds, cpu, count) in sorted(by_file.items(), key=lambda kv: -kv[1][0])[:top]:
        table.add_row(name, str(count), f"{seconds:.1f}", f"{cpu:.1f}", f"{100 * seconds / total_wall:.1f}%")
    console.print(table)
    every = sorted((row for rs in rows.values() for row in rs), key=lambda row: -row[1])
    if tests:
        slowest = Table(title=f"the {min(tests, len(every))} tests that used the most CPU (setup and teardown included)")
        for column in ("test", "CPU s", "wall s"):
            slowest.add_column(column, justify="left" if column == "test" else "right")
        for nodeid, cpu, seconds in every[:tests]:
            slowest.add_row(nodeid, f"{cpu:.1f}", f"{seconds:.1f}")
        console.print(slowest)
    cpu_total = sum(c for c, _, _ in by_worker.values())
    for worker, (cpu, seconds, count) in sorted(by_worker.items()):
        console.print(f"{worker}: {count} tests, {seconds:.0f} s in tests, {cpu:.0f} CPU s")
    cores = os.cpu_count() or 1
    console.print(f"pytest: exit {rc}, {wall:.0f} s wall; the tests used {cpu_total:.0f} CPU s, at least "
                  f"{cpu_total / cores:.0f} s on this machine's {cores} cores")
    if json_out is not None:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps({"wall_s": wall, "exit": rc, "cpu_s": cpu_total, "workers": by_worker,
                                        "files": {k: {"wall_s": v[0], "cpu_s": v[1], "tests": v[2]} for k, v in by_file.items()},
                                        "tests": {nodeid: {"cpu_s": cpu, "wall_s": seconds} for nodeid, cpu, seconds in every}},
                                       indent=1, sort_keys=True) + "\n")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
