"""Prompt styles for mapf-frozenlake, and the compact answer format of the tiny policy.

``full``: chat messages for an LLM: the rules, the map, the agents, the answer format.
``compact``: one short, regular line for a tiny model, e.g.
``N4 H 1_1 2_3 S1 0_0 G1 3_3 S2 3_0 G2 0_3 P``; its answer lists every agent's cell one
time step at a time from t = 1 (``| 0_1 2_0 | 0_2 1_0 | …``) so that conflicts are local
in the sequence. :func:`compact_to_answer` turns it into the contract's answer format before
scoring, so the validator only ever sees one format.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Mapping, Sequence
from typing import Any

from envengineer.tasks.mapf_frozenlake import SIZE_NAMES, SIZES
from envengineer.tasks.mapf_frozenlake.knobs import HOLE_RATIO_MAX, RATIO_FLOOR, agents_fitting
from envengineer.tasks.mapf_frozenlake.instance import Cell, Instance

STYLES = ("full", "compact")

RULES = """\
Rules:
- Time advances in steps t = 0, 1, 2, ... At each step every agent either moves one cell up, down, left or right, or WAITs in place.
- An agent may never leave the grid or step onto a hole (H).
- Two agents may never be on the same cell at the same time, and two agents may not swap cells in one step. Moving into a cell that another agent leaves in the same step is allowed.
- An agent whose path has ended stays on its last cell for ever and still blocks it.
- Every agent must end its path on its own goal.
- Minimise the total cost: the sum over agents of the time each one reaches its goal for good (waiting on the goal at the end costs nothing)."""

ANSWER_FORMAT = """\
Answer format: for each agent, list the cells it occupies at t = 0, 1, 2, ..., starting with its start cell and ending on its goal; repeat a cell to WAIT. Write one line per agent inside <answer></answer>, cells as (row,col) joined by " -> ", for example:
<answer>
Agent 1: (0,0) -> (0,1) -> (1,1)
Agent 2: (1,2) -> (1,2) -> (0,2)
</answer>"""


def render_map(instance: Instance) -> str:
    width = len(str(instance.size - 1))
    header = " " * (width + 2) + " ".join(str(c).rjust(1) for c in range(instance.size))
    rows = [f"{str(r).rjust(width)}  " + " ".join(row) for r, row in enumerate(instance.grid)]
    return "\n".join([header, *rows])


def render_full(instance: Instance) -> list[dict[str, str]]:
    """The chat prompt for an LLM policy."""
    k = instance.k
    agents = "\n".join(
        f"- Agent {i}: start ({a.start[0]},{a.start[1]}), goal ({a.goal[0]},{a.goal[1]})"
        for i, a in enumerate(instance.agents, start=1)
    )
    text = (
        f"Plan paths for {k} agents on a frozen lake.\n\n"
        f"The map is a {instance.size}x{instance.size} grid. Cells are (row,col), numbered from 0; "
        "(0,0) is the top-left cell. F is frozen ice (safe), H is a hole.\n\n"
        f"{render_map(instance)}\n\n"
        f"Agents:\n{agents}\n\n{RULES}\n\n{ANSWER_FORMAT}"
    )
    return [{"role": "user", "content": text}]


def _tok(cell: Sequence[int]) -> str:
    return f"{cell[0]}_{cell[1]}"


def render_compact(instance: Instance) -> str:
    """``N<size> H <hole cells> S1 <start> G1 <goal> … P`` (single tokens, space separated)."""
    parts = [f"N{instance.size}", "H", *(_tok(c) for c in instance.holes())]
    for i, agent in enumerate(instance.agents, start=1):
        parts += [f"S{i}", _tok(agent.start), f"G{i}", _tok(agent.goal)]
    parts.append("P")
    return " ".join(parts)


def compact_answer(paths: Sequence[Sequence[Cell]]) -> str:
    """A solution in the compact answer format (the supervised target of the tiny policy).

    Steps start at t = 1: the start cells are in the prompt, and
    :func:`compact_to_answer` puts them back, so the model spends its capacity on
    planning moves rather than on copying.
    """
    horizon = max(len(p) for p in paths)
    steps = []
    for t in range(1, horizon):
        steps.append("| " + " ".join(_tok(p[min(t, len(p) - 1)]) for p in paths))
    return " ".join(steps)


_CELL_TOKEN = re.compile(r"^(-?\d{1,4})_(-?\d{1,4})$")
MAX_COMPACT_STEPS = 512
_UNPARSEABLE = "<answer>\n</answer>"


def _read_compact(text: str, starts: Sequence[Sequence[int]], goals: Sequence[Sequence[int]] | None):
    """(paths as cell lists or None when malformed, end offset in ``text`` or None when all of it is read)."""
    agents = len(starts)
    target = [tuple(int(v) for v in g) for g in goals] if goals is not None else None
    paths: list[list[tuple[int, int]]] = [[(int(s[0]), int(s[1]))] for s in starts]
    if target is not None and [p[0] for p in paths] == target:
        return paths, 0
    body = text.split("</s>", 1)[0]
    offset, steps = 0, 0
    for index, chunk in enumerate(body.split("|", MAX_COMPACT_STEPS + 1)):
        start, offset = offset, offset + len(chunk) + 1
        if index == 0 and not chunk.strip():
            continue
        steps += 1
        if steps > MAX_COMPACT_STEPS:
            return None, None
        tokens = chunk.split()
        if len(tokens) != agents:
            return None, None
        cells = []
        for token in tokens:
            match = _CELL_TOKEN.match(token)
            if match is None:
                return None, None
            cells.append((int(match.group(1)), int(match.group(2))))
        for path, cell in zip(paths, cells):
            path.append(cell)
        if target is not None and cells == target:
            return paths, start + len(chunk.rstrip())
    return paths, None


def compact_to_answer(text: str, starts: Sequence[Sequence[int]], goals: Sequence[Sequence[int]] | None = None) -> str:
    """Convert a compact answer to the contract's format, each path beginning at its start.

    Steps are separated by ``|``; each must hold exactly one cell token per agent. Anything
    malformed yields a response without agent lines, which the validator scores as a
    ``parse`` failure. Bounded work: at most :data:`MAX_COMPACT_STEPS` steps are read.

    With ``goals``, the plan ends at the first step where every agent stands on its goal
    (or at t = 0 if all start there): what follows it, including ``</s>`` or its absence,
    is not part of the answer. Cutting a plan there never makes it invalid or costlier
    (after that step every agent waits on its goal), and solver-optimal plans end there
    anyway, so a model need not learn to stop on its own.
    """
    paths, _ = _read_compact(text, starts, goals)
    if paths is None:
        return _UNPARSEABLE
    lines = [f"Agent {i}: " + " -> ".join(f"({r},{c})" for r, c in path) for i, path in enumerate(paths, start=1)]
    return "<answer>\n" + "\n".join(lines) + "\n</answer>"


def compact_answer_end(text: str, starts: Sequence[Sequence[int]], goals: Sequence[Sequence[int]]) -> int | None:
    """Characters of ``text`` that :func:`compact_to_answer` reads: up to the step that puts every
    agent on its goal (None when it reads all of it)."""
    return _read_compact(text, starts, goals)[1]


def constraint_rules(budget: int | None = None, agents_range: tuple[int, int] | None = None) -> list[str]:
    """The hard rules of a configuration: in the G module, and in every design prompt
    (``agents_range``: the agents knob is on, within that range)."""
    per_round = f" at {budget} instances per round" if budget else ""
    rules = [
        f"Keep all {len(SIZE_NAMES)} map sizes ({SIZE_NAMES[0]} to {SIZE_NAMES[-1]}); every ratio stays at or above {RATIO_FLOOR} and the ratios sum to 1.",
        f"The budget is fixed{per_round}: raising one size's ratio lowers the others.",
    ]
    if agents_range is None:
        rules.append(f"Change only ratio, hole_ratio and wait_ratio. hole_ratio is between 0 and {HOLE_RATIO_MAX}; wait_ratio between 0 and 1.")
    else:
        low, high = agents_range
        caps = [f"{agents_fitting(n, 0.0)} on {n}x{n}" for n in SIZES if agents_fitting(n, 0.0) < high]
        capped = f", and agents is capped at what an empty map holds ({', '.join(caps)})" if caps else ""
        rules.append(
            f"Change only ratio, hole_ratio, wait_ratio and agents. hole_ratio is between 0 and {HOLE_RATIO_MAX}; wait_ratio "
            f"between 0 and 1; agents a whole number from {low} to {high}. A map keeps 2k + 1 free cells for k agents: "
            f"hole_ratio is lowered to make room{capped}."
        )
    return rules


def _agents_text(agents: int, agents_range: tuple[int, int] | None) -> str:
    """What the training instances' agent count is, for the design brief."""
    if agents_range is None:
        return f"every training instance has {agents} agent{'s' if agents != 1 else ''}"
    low, high = agents_range
    return (f"every training instance has its map size's agent count, which you may set from {low} to {high} "
            f"(the run starts at {agents} for every size)")


def design_brief(agents: int, held_out: Sequence[int], budget: int | None = None, agents_range: tuple[int, int] | None = None) -> str:
    """The training-versus-evaluation setting and the hard rules, for every design prompt
    (``agents_range``: the agents knob is on, within that range)."""
    if held_out:
        counts = ", ".join(map(str, held_out[:-1])) + (" and " if len(held_out) > 1 else "") + str(held_out[-1])
        judged = (f"the policy is judged on held-out benchmarks with {counts} agents on the same kind of maps, which are "
                  "harder (more agents to coordinate, more conflicts and waits)")
    else:
        judged = "the policy is judged on held-out benchmarks it never trains on"
    setting = textwrap.fill(
        f"Training and evaluation differ: {_agents_text(agents, agents_range)}, "
        f"while {judged}. Favour training data that builds skills which carry over (coordination, waiting, "
        "detours) over squeezing the last points out of the training setting.",
        width=100,
    )
    rules = "\n".join(f"- {rule}" for rule in constraint_rules(budget, agents_range))
    return f"{setting}\n\nConstraints on the configuration:\n{rules}"


def guidelines(agents: int, budget: int | None = None, agents_range: tuple[int, int] | None = None) -> str:
    """The task-specific part of the G context module (``agents_range``: the agents knob is on, within that range)."""
    budget_text = f" ({budget} per round)" if budget else ""
    rules = "\n".join(f"- {rule}" for rule in constraint_rules(budget, agents_range))
    planned = f"{agents} agents" if agents_range is None else "several agents"
    agents_knob = "" if agents_range is None else (
        f"\n- agents: the number of agents in each of that size's instances, a whole number from {agents_range[0]} to "
        f"{agents_range[1]} (every size starts at {agents}).\n  More agents: more conflicts to resolve and longer answers."
    )
    return f"""\
Task: MAPF-FrozenLake. The policy plans collision-free paths for {planned} on N×N grids of
frozen cells (F) and holes (H); a response is valid when all eight checks pass (parse, agent count,
start, in bounds, legal moves, no hole, no conflict, goal) and optimal when its sum of costs is minimal.

The training generator has one set of knobs per map size (3x3, 4x4, ..., 10x10):
- ratio: the share of the round's training instances{budget_text} drawn at that size.
- hole_ratio: the fraction of the map's cells that are holes (more holes: narrower passages, harder planning).
- wait_ratio: the fraction of that size's instances whose optimal solution needs an agent to WAIT or detour
  because of another agent (more: more coordination, more conflict practice).{agents_knob}

Rules for a new configuration:
{rules}
- Keep an easy-to-hard progression across sizes; do not make every size maximally hard.
- Answer with one fenced YAML block that contains only the fields you change, for example:
```yaml
sizes:
  7x7: {{ratio: 0.2, wait_ratio: 0.5}}
  3x3: {{ratio: 0.05}}
```"""


def instance_from(record: Mapping[str, Any] | Instance) -> Instance:
    if isinstance(record, Instance):
        return record
    from envengineer.tasks.mapf_frozenlake.instance import from_record

    return from_record(record)
