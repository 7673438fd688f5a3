#!/usr/bin/env python
"""Run the README's first two commands as a newcomer does (CI runs them one after the other, in one fresh venv).

    python scripts/readme_commands.py show                 print both commands
    python scripts/readme_commands.py run quickstart       the first: install and run the embedded quickstart; every
                                                           line of the table the README quotes after it must appear
                                                           in its output, in order
    python scripts/readme_commands.py run tests            the second: install and run the tests (pytest's exit 5,
                                                           no test collected, is a failure)

Each command runs as the README shows it, through ``bash -eo pipefail`` in the repository's root, with its output
passed through and its wall time printed at the end. Standard library only: it runs before anything is installed.
The commands are the README's first two ```bash blocks; the table is the ```text block after the
``<!-- docs-test: output -->`` marker that follows the first (tests/test_docs_commands.py reads the same blocks
with Sybil and checks that both readers agree).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
NAMES = ("quickstart", "tests")
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.MULTILINE | re.DOTALL)
_OUTPUT = "<!-- docs-test: output -->"


def readme_blocks(text: str) -> list[tuple[str, list[str]]]:
    """The README's first two bash blocks, each with the output lines the README declares for it (may be empty)."""
    blocks: list[tuple[str, list[str]]] = []
    fences = list(_FENCE.finditer(text))
    for i, fence in enumerate(fences):
        if fence.group(1) != "bash":
            continue
        expected: list[str] = []
        nxt = fences[i + 1] if i + 1 < len(fences) else None
        if nxt is not None and nxt.group(1) == "text" and text[fence.end():nxt.start()].rstrip().endswith(_OUTPUT):
            expected = [ln for ln in nxt.group(2).splitlines() if ln.strip()]
        blocks.append((fence.group(2).strip(), expected))
        if len(blocks) == 2:
            break
    if len(blocks) < 2:
        raise SystemExit(f"{README}: fewer than two ```bash blocks (the quickstart and the tests)")
    return blocks


def _normal(text: str) -> str:
    return " ".join(text.split())


def missing_lines(output: str, expected: list[str]) -> list[str]:
    """The expected lines the output does not print in order (each within one output line, spaces collapsed)."""
    lines, at, missing = [_normal(ln) for ln in output.splitlines()], 0, []
    for want in expected:
        hit = next((i for i in range(at, len(lines)) if _normal(want) in lines[i]), None)
        if hit is None:
            missing.append(want)
        else:
            at = hit + 1
    return missing


def run(name: str) -> int:
    command, expected = readme_blocks(README.read_text())[NAMES.index(name)]
    print(f"$ {command}", flush=True)
    start = time.monotonic()
    proc = subprocess.Popen(["bash", "-eo", "pipefail", "-c", command], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, bufsize=1)
    seen: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        sys.stdout.write(line)
        seen.append(line)
    rc = proc.wait()
    seconds = time.monotonic() - start
    print(f"README {name} command: exit {rc} after {seconds:.0f} s ({seconds / 60:.1f} min)", flush=True)
    if rc == 5 and name == "tests":
        print("pytest collected no tests: failing", file=sys.stderr)
        return 1
    if rc != 0:
        return rc
    missing = missing_lines("".join(seen), expected)
    if missing:
        print("the README says the command prints (in this order) lines it did not print:\n  " + "\n  ".join(missing),
              file=sys.stderr)
        return 1
    if expected:
        print(f"README {name} command: all {len(expected)} lines of the README's table printed, in order", flush=True)
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["show"]:
        for name, (command, _) in zip(NAMES, readme_blocks(README.read_text())):
            print(f"{name}: {command}")
        return 0
    if len(argv) == 2 and argv[0] == "run" and argv[1] in NAMES:
        return run(argv[1])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
