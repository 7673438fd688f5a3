"""Frozen benchmark sets: checksums, verification and identical rebuilds.

A benchmark is a JSONL file in the repository with its sha256 in a ``SHA256SUMS``
file beside it. Files are never silently regenerated: ``build`` refuses to write a
file whose rebuilt checksum differs from the frozen one unless asked to re-freeze.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.table import Table

from envengineer.display import Console
from envengineer.components import Benchmark
from envengineer.errors import UnknownComponentError
from envengineer.fileio import atomic_open, dumps_json, write_text

SUMS = "SHA256SUMS"


def read_checksums(folder: Path) -> dict[str, str]:
    """``file name -> sha256`` from ``folder/SHA256SUMS`` (empty when absent)."""
    sums = {}
    path = folder / SUMS
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                digest, _, name = line.strip().partition("  ")
                sums[name.strip()] = digest.strip()
    return sums


def frozen_benchmark(path: Path, **fields: Any) -> Benchmark:
    """The :class:`Benchmark` frozen at ``path`` (a JSONL file): its sha256 read from the ``SHA256SUMS`` beside
    it (empty until ``envengineer bench build NAME`` freezes it), ``fields`` the rest of its declaration."""
    return Benchmark(path=path, sha256=read_checksums(path.parent).get(path.name, ""), **fields)


def write_checksum(folder: Path, name: str, digest: str) -> None:
    sums = read_checksums(folder)
    sums[name] = digest
    write_text(folder / SUMS, "".join(f"{sums[k]}  {k}\n" for k in sorted(sums)))


def sha256_file(path: Path) -> str:
    """A file's sha256, read in 1 MiB blocks (a model file of gigabytes never sits in memory whole)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def serialize(records: Iterable[dict]) -> bytes:
    return "".join(dumps_json(r) + "\n" for r in records).encode()


def _select(registry, names: Sequence[str] | None) -> list[Benchmark]:
    known = {entry.name: entry.obj for entry in registry.entries("benchmark")}
    if not names:
        return list(known.values())
    missing = [n for n in names if n not in known]
    if missing:
        raise UnknownComponentError(f"unknown benchmark {missing[0]!r} (registered: {', '.join(sorted(known)) or 'none'})")
    return [known[n] for n in names]


def benchmark_table(registry) -> Table:
    table = Table(title="benchmarks", title_justify="left")
    table.add_column("name", no_wrap=True)
    table.add_column("task", no_wrap=True)
    table.add_column("instances", justify="right")
    table.add_column("sha256", no_wrap=True)
    table.add_column("description")
    for bench in _select(registry, None):
        count = sum(1 for line in bench.path.open() if line.strip()) if bench.path.exists() else 0
        table.add_row(bench.name, bench.task, str(count), bench.sha256[:12] or "-", bench.description)
    return table


def verify(registry, names: Sequence[str] | None = None, *, console: Console | None = None) -> list[str]:
    """Check each file against its frozen sha256; return the problems (empty when all match)."""
    console = console or Console()
    problems = []
    for bench in _select(registry, names):
        if not bench.sha256:
            problems.append(f"{bench.name}: no frozen checksum")
        elif not bench.path.exists():
            problems.append(f"{bench.name}: {bench.path} is missing")
        else:
            actual = sha256_file(bench.path)
            if actual != bench.sha256:
                problems.append(f"{bench.name}: {bench.path} has sha256 {actual}, frozen {bench.sha256}")
            else:
                console.print(f"[green]ok[/]  {bench.name}  {actual[:16]}…")
    for problem in problems:
        console.print(f"[red]FAIL[/] {escape(str(problem))}")
    return problems


def build(registry, names: Sequence[str] | None = None, *, check: bool = False, update: bool = False, console: Console | None = None) -> list[str]:
    """Rebuild benchmark files from their specs; see the module docstring."""
    console = console or Console()
    problems = []
    for bench in _select(registry, names):
        if bench.build is None:
            problems.append(f"{bench.name}: has no build recipe")
            continue
        with console.status(f"building {bench.name}"):
            data = serialize(bench.build())
        digest = hashlib.sha256(data).hexdigest()
        if bench.sha256 and digest != bench.sha256 and not update:
            problems.append(f"{bench.name}: rebuilt sha256 {digest} differs from the frozen {bench.sha256}")
            continue
        if check:
            console.print(f"[green]identical[/] {bench.name}  {digest[:16]}…" if digest == bench.sha256 else f"[yellow]new[/] {bench.name}  {digest[:16]}…")
            continue
        with atomic_open(bench.path, "wb") as handle:
            handle.write(data)
        write_checksum(bench.path.parent, bench.path.name, digest)
        state = "unchanged" if digest == bench.sha256 else "frozen"
        console.print(f"[green]{state}[/] {bench.name}: {bench.path} ({digest[:16]}…)")
    for problem in problems:
        console.print(f"[red]FAIL[/] {escape(str(problem))}")
    return problems
