"""Reading and writing the policy's answer format (mapf-frozenlake.md, "Answer format").

The parser faces untrusted model output, so it never raises and its cost is linear in
the text: every regex below either has no backtracking or backtracks over one run of
characters at most once, blocks are found with ``str.find``, and numbers too long to
matter are not converted digit by digit.

Choices the contract leaves open:

- Lines are split at ``\\n`` only; ``\\r`` and other whitespace count as spaces.
- Tags are matched case-sensitively. Blocks pair the way
  ``re.findall(r"<answer>(.*?)</answer>", text, re.S)`` pairs them: each ``<answer>``
  closes at the first ``</answer>`` after it; the last such block is read.
- An agent line is ``Agent <digits>:`` at the start of a line, with optional spaces
  (leading, before the number, before the colon). ``Agent 01`` is agent 1. Lines that
  do not start that way (``- Agent 1:``, ``**Agent 1**:``, prose) are not agent lines.
- Between and around the cells only ``->``, commas and whitespace may appear, in any
  number (none at all between two cells is fine); a stray ``-`` or ``>`` is a
  ``parse`` failure. Digits are ASCII only.
- A number with more than 100 significant digits is read as ±10**100 (out of bounds
  on any grid) rather than converted.
- A repeated agent number keeps its last line in ``paths``; ``agent_numbers`` keeps
  every line's number so the validator can report ``agent_count``.
"""

from __future__ import annotations

import re
from collections.abc import Container, Sequence
from dataclasses import dataclass

Cell = tuple[int, int]

HUGE = 10**100
"""What a number with more than 100 significant digits is read as (with its sign)."""

_THINK_END = "</think>"
_OPEN = "<answer>"
_CLOSE = "</answer>"
# An agent line: ``Agent <k>:`` at a line start; group 2 is the rest of the line.
_HEADER = re.compile(r"^[^\S\n]*Agent[^\S\n]*([0-9]+)[^\S\n]*:([^\n]*)", re.M)
_CELL = re.compile(r"\([^\S\n]*(-?[0-9]+)[^\S\n]*,[^\S\n]*(-?[0-9]+)[^\S\n]*\)")
# Anything around the cells that is not whitespace, a comma or ``->`` (NUL joins gaps).
_BAD_SEPARATOR = re.compile(r"[^\s,>\-\x00]|-(?!>)|(?<!-)>")
# Two line breaks inside one gap: the line between them has no cell.
_CELLESS_LINE = re.compile(r"\n[^\x00\n]*\n")
_MAX_DIGITS = 100
_BATCH = 8  # more agent lines than this are checked in one pass over their joined text
# Cells as they are usually written, so reading a path allocates no new tuples.
_COMMON = {(str(r), str(c)): (r, c) for r in range(-10, 40) for c in range(-10, 40)}


@dataclass(frozen=True)
class ParsedAnswer:
    """The paths an answer gives, or why none could be read."""

    paths: dict[int, tuple[Cell, ...]] | None
    """Agent number -> cells (last line wins for a repeated number); None on failure."""
    error: str | None
    """Why parsing failed (short, human readable); None when it succeeded."""
    agent_numbers: tuple[int, ...] = ()
    """The number of every agent line, in order, repeats included."""

    @property
    def ok(self) -> bool:
        return self.paths is not None


def _to_int(text: str) -> int:
    digits = text.lstrip("-").lstrip("0")
    if len(digits) <= _MAX_DIGITS:
        return int(text)
    return -HUGE if text.startswith("-") else HUGE


def _snippet(text: str, at: int) -> str:
    piece = text[at : at + 24].replace("\x00", " ")
    return repr(piece + "…" if len(text) > at + 24 else piece)


def _only_separators(gaps: str) -> bool:
    rest = gaps.replace("->", " ").replace(",", " ")
    return not rest or rest.isspace()


def _parse_cells(body: str) -> tuple[Cell, ...] | str:
    """The cells of one agent line's body, or a message saying why it is malformed."""
    parts = _CELL.split(body)
    if len(parts) == 1:
        bad = _BAD_SEPARATOR.search(body)
        return f"no (row,col) cell, got {_snippet(body, bad.start())}" if bad else "no (row,col) cell"
    # split() alternates [gap, row, col, gap, row, col, ..., gap]; joining the gaps with
    # spaces keeps a '-' and a '>' from two different gaps from reading as one '->'.
    gaps = " ".join(parts[0::3])
    if not _only_separators(gaps):
        bad = _BAD_SEPARATOR.search(gaps.replace("\x00", "?"))
        return f"unexpected text {_snippet(gaps, bad.start() if bad else 0)}"
    rows = parts[1::3]
    cols = parts[2::3]
    try:
        return tuple(map(_COMMON.__getitem__, zip(rows, cols)))
    except KeyError:
        pass
    if max(map(len, rows)) < 19 and max(map(len, cols)) < 19:
        return tuple(zip(map(int, rows), map(int, cols)))
    return tuple(zip(map(_to_int, rows), map(_to_int, cols)))


def _first_bad_line(bodies: Sequence[str]) -> int | None:
    """Index of the first body that is not a well-formed cell list, in one pass (C speed)."""
    joined = "\n".join(bodies)
    if "\x00" in joined:
        return next((i for i, body in enumerate(bodies) if isinstance(_parse_cells(body), str)), None)
    parts = _CELL.split(joined)
    gaps = parts[0::3]
    if len(parts) == 1 or "\n" in gaps[0]:
        return 0
    # Line breaks sit only in gaps, so the number of breaks before a position in the
    # NUL-joined gaps is the index of the line that position belongs to.
    text = "\x00".join(gaps)
    candidates = []
    if not _only_separators(text.replace("\x00", " ")):
        bad = _BAD_SEPARATOR.search(text)
        candidates.append(text.count("\n", 0, bad.start()) if bad else 0)
    cellless = _CELLESS_LINE.search(text)
    if cellless is not None:
        candidates.append(text.count("\n", 0, cellless.start()) + 1)
    if "\n" in gaps[-1]:
        candidates.append(len(bodies) - 1)
    return min(candidates) if candidates else None


def _answer_region(text: str) -> str:
    """The text the agent lines are read from: the last answer block, else all of it.

    Pairs tags as ``re.findall(r"<answer>(.*?)</answer>", text, re.S)`` does, without
    its quadratic scan over unclosed tags. After any ``</answer>`` that scan is looking
    for an opening tag, so the last block closes at the first ``</answer>`` after the
    last ``<answer>`` that has a close after it, and opens at the first ``<answer>``
    after the ``</answer>`` before that.
    """
    cut = text.rfind(_THINK_END)
    if cut >= 0:
        text = text[cut + len(_THINK_END) :]
    end = text.rfind(_CLOSE)
    if end < 0:
        return text
    last_open = text.rfind(_OPEN, 0, end)
    if last_open < 0:
        return text
    close = text.find(_CLOSE, last_open + len(_OPEN))
    previous = text.rfind(_CLOSE, 0, close)
    start = text.find(_OPEN, previous + len(_CLOSE) if previous >= 0 else 0, close)
    return text[start + len(_OPEN) : close]


def parse_answer(text: str) -> ParsedAnswer:
    """Read the agents' paths from a response. Never raises; linear in ``len(text)``."""
    return read_answer(text)


def read_answer(text: str, agents: Container[int] | None = None) -> ParsedAnswer:
    """:func:`parse_answer`, keeping in ``paths`` only the numbers in ``agents``.

    Every line is still checked (a malformed line is a ``parse`` failure whatever its
    number) and counted in ``agent_numbers``; only the cells of the kept lines are
    read, which bounds the work on answers with thousands of agent lines.
    """
    if not isinstance(text, str):
        return ParsedAnswer(None, f"response is not a string ({type(text).__name__})")
    region = _answer_region(text)
    if "Agent" not in region:
        return ParsedAnswer(None, "no 'Agent <k>:' line")
    # split() gives [before, number, body, between, number, body, ...]: flat strings,
    # no per-line tuples for the garbage collector to walk.
    parts = _HEADER.split(region)
    if len(parts) == 1:
        return ParsedAnswer(None, "no 'Agent <k>:' line")
    number_texts = parts[1::3]
    bodies = parts[2::3]
    paths: dict[int, tuple[Cell, ...]] = {}
    if len(bodies) <= _BATCH:
        numbers = []
        for number_text, body in zip(number_texts, bodies):
            cells = _parse_cells(body)
            if isinstance(cells, str):
                return ParsedAnswer(None, f"Agent {_short(number_text)}: {cells}")
            number = int(number_text) if len(number_text) < 19 else _to_int(number_text)
            numbers.append(number)
            if agents is None or number in agents:
                paths[number] = cells
        return ParsedAnswer(paths, None, tuple(numbers))
    bad = _first_bad_line(bodies)
    if bad is not None:
        message = _parse_cells(bodies[bad])
        if not isinstance(message, str):  # cannot happen: both readings agree
            message = "malformed cells"
        return ParsedAnswer(None, f"Agent {_short(number_texts[bad])}: {message}")
    if max(map(len, number_texts)) < 19:
        numbers = tuple(map(int, number_texts))
    else:
        numbers = tuple(map(_to_int, number_texts))
    last_line = dict(zip(numbers, range(len(numbers))))
    for number, index in last_line.items():
        if agents is None or number in agents:
            cells = _parse_cells(bodies[index])
            paths[number] = cells  # type: ignore[assignment]  # checked above
    return ParsedAnswer(paths, None, numbers)


def _short(number_text: str) -> str:
    return number_text if len(number_text) <= 12 else number_text[:12] + "…"


def format_answer(paths: Sequence[Sequence[Sequence[int]]]) -> str:
    """The answer block for ``paths`` (agent i+1 follows ``paths[i]``), as the policy writes it.

    Raises ``ValueError`` on an empty path: no answer can express it.
    """
    lines = []
    for i, path in enumerate(paths, start=1):
        if not path:
            raise ValueError(f"agent {i}: empty path")
        cells = " -> ".join(f"({int(r)},{int(c)})" for r, c in path)
        lines.append(f"Agent {i}: {cells}")
    return "<answer>\n" + "\n".join(lines) + "\n</answer>"
