"""Real replies of a model served by llama.cpp as the engineer: what each design step does, and whether it moves
the configuration the way the evidence points.

Each cell (recorded run, round, context preset, interface) is one structured design step of the
``openai-compatible`` engineer against ``envengineer serve MODEL --server llama.cpp`` (started here), greedy, one
re-ask. Recorded per step: applied / re-asked then applied / fallback (and why), whether the applied config
restates the current one, and the **direction** of its moves against the evidence's:

* the evidence's direction for a group: its success ``p`` (sampled success on the round's training prompts, else
  the greedy validation valid rate; the rule baselines' ``Success``) at or above ``--high`` (0.8): harder; at or
  below ``--low`` (0.2): easier; between: keep (the frontier GRPO learns from);
* the proposal's direction for a group: the sign of its difficulty knobs' moves (each as a fraction of the knob's
  declared range, toward its hard end positive); a group the evidence says to move counts as **toward** when it
  moved that way, **against** when it moved the other way, **still** when it did not move; a frontier group as
  **kept** or **moved**. The same definition holds for every task family, since it reads only the task's
  declarations (``harder``, ``low``/``high``).

Results go line by line to a JSONL file (resumable: cells already there are skipped) and to a table per
(model, task, preset, interface).

    python bench/served_replies.py --model qwen2.5-coder-0.5b-instruct --run runs/scale/sim-gw --run runs/scale/sim-mapf \\
        --rounds 0,1,2 --presets V1,V4,V6 --interfaces config,changes,decisions,decisions-read --output bench/results/served_replies.jsonl
    python bench/served_replies.py --report bench/results/served_replies.jsonl --markdown out.md
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from design_step import start_server  # noqa: E402  (bench/design_step.py, beside this file)


#: the bench's interface names: the engineer's ``interface`` values, and ``decisions-read`` for the decisions
#: interface with ``read_first`` (each group's success read off the evidence before its words)
READ_FIRST = "decisions-read"


def interface_options(name: str) -> dict[str, Any]:
    """The engineer options of one of the bench's interface names."""
    return {"interface": "decisions", "read_first": True} if name == READ_FIRST else {"interface": name}


def readings(raw: str | None) -> dict[str, int]:
    """Each group's success as the model read it off the evidence: the ``success_pct`` of a ``read_first`` reply's
    decisions (``raw``: the structured reply as decoded; ``all`` for a task without groups); none for another form."""
    try:
        decided = json.loads(raw or "").get("decisions")
    except (ValueError, AttributeError):
        return {}
    if not isinstance(decided, dict):
        return {}
    if "success_pct" in decided:  # a task without groups: one decision
        decided = {"all": decided}
    return {g: d["success_pct"] for g, d in decided.items() if isinstance(d, dict) and isinstance(d.get("success_pct"), int)}


def directions(request: Any, config: Any, low: float, high: float) -> dict[str, dict[str, Any]]:
    """Per group: the evidence's p and direction, the proposal's difficulty move, and the verdict."""
    from envengineer.api import config_moves
    from envengineer.components.knobs import WHOLE
    from envengineer.plugins.engineers.baselines import Success

    generator = request.generator
    before = generator.knob_rows(request.current_config)
    moves = config_moves(generator, request.current_config, config)
    success = Success(request, list(before), min_samples=16)
    out: dict[str, dict[str, Any]] = {}
    for group in before:
        if group not in success.p:
            continue
        p = success.p[group]
        wanted = "harder" if p >= high else "easier" if p <= low else "keep"
        name = group if group != WHOLE else "all"
        moved = moves.get(name, {}).get("difficulty", "keep")
        out[name] = {"p": round(p, 3), "wanted": wanted, "moved": moved, "verdict": verdict(wanted, moved)}
    return out


def verdict(wanted: str, moved: str) -> str:
    """A group the evidence says to move (harder/easier): toward, against or still; a frontier group (keep): kept or
    moved."""
    if wanted == "keep":
        return "kept" if moved == "keep" else "moved"
    return "toward" if moved == wanted else "still" if moved == "keep" else "against"


def run(args: argparse.Namespace) -> None:
    from envengineer.design.evidence import load_evidence
    from envengineer.design.prompts import build_request
    from envengineer.design.step import design
    from envengineer.registry import load_registry

    registry = load_registry()
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if out.exists():
        for line in out.read_text().splitlines():
            r = json.loads(line)
            done.add((r["model"], r["run"], r["round"], r["preset"], r["interface"], r["order"], r.get("analysis_chars")))
    cells = [(run_dir, rnd, preset, interface) for interface in args.interfaces for preset in args.presets
             for rnd in args.rounds for run_dir in args.run]
    args.analysis_chars = args.analysis_chars or None
    todo = [c for c in cells if (args.model, str(c[0]), c[1], c[2], c[3], args.order, args.analysis_chars) not in done]
    if not todo:
        return
    with tempfile.TemporaryDirectory(prefix="served-replies-") as tmp:
        log = Path(tmp) / "llama-server.log"
        server = start_server(args.model, args.threads, args.ctx, log)
        url = server.url
        try:
            for i, (run_dir, rnd, preset, interface) in enumerate(todo, 1):
                evidence = load_evidence(run_dir, rnd, registry)
                request = build_request(evidence, registry, {"preset": preset, "order": args.order})
                engineer = registry.create("engineer", "openai-compatible", {
                    "model": args.model, "base_url": url + "/v1", "structured": True, **interface_options(interface),
                    "max_tokens": args.max_tokens, "analysis_chars": args.analysis_chars, "temperature": 0.0, "timeout": 1800.0, "max_retries": 0, "api_key_env": None,
                })
                step_dir = Path(args.steps) / f"{args.model}-{Path(run_dir).name}-r{rnd}-{preset}-{interface}-{args.order}"
                started = time.monotonic()
                outcome = design(engineer, request, out_dir=step_dir, reask=1, summarize=False)
                seconds = time.monotonic() - started
                calls = [json.loads(line) for line in (step_dir / "calls.jsonl").read_text().splitlines()]
                restated = (not outcome.fallback) and outcome.config == request.current_config
                record = {
                    "model": args.model, "run": str(run_dir), "task": request.generator.name, "round": rnd, "preset": preset,
                    "interface": interface, "order": args.order, "analysis_chars": args.analysis_chars,
                    "outcome": "fallback" if outcome.fallback else "applied" if len(outcome.replies) == 1 else "re-asked, then applied",
                    "reason": outcome.reason if outcome.fallback else "", "restated": restated, "seconds": round(seconds, 1),
                    "calls": [{k: c.get(k) for k in ("usage", "latency_s", "error")} for c in calls],
                    "groups": {} if outcome.fallback else directions(request, outcome.config, args.low, args.high),
                    "replies": [r.text for r in outcome.replies],
                }
                read = {} if outcome.fallback else readings(getattr(outcome.replies[-1], "raw", None))
                for group, pct in read.items():  # the reading beside the evidence's p (read_first)
                    if group in record["groups"]:
                        record["groups"][group]["read_pct"] = pct
                with out.open("a") as handle:
                    handle.write(json.dumps(record) + "\n")
                verdicts = defaultdict(int)
                for g in record["groups"].values():
                    verdicts[g["verdict"]] += 1
                print(f"{time.strftime('%H:%M:%S')} {i}/{len(todo)} {Path(run_dir).name} r{rnd} {preset} {interface}: "
                      f"{record['outcome']}{' (restated)' if restated else ''} {dict(verdicts)} {seconds:.0f}s", flush=True)
        finally:
            server.stop()


def report(path: str, markdown: str | None) -> str:
    from rich.console import Console
    from rich.table import Table

    records = [json.loads(line) for line in Path(path).read_text().splitlines()]
    rows: dict[tuple, list] = defaultdict(list)
    for r in records:
        rows[(r["model"], r["task"], r["preset"], r["interface"])].append(r)
        rows[(r["model"], "all", "", r["interface"])].append(r)
    head = ["model", "task", "preset", "interface", "steps", "applied", "re-asked, applied", "fallback", "restated",
            "to move: toward", "to move: against", "to move: still", "frontier: kept", "frontier: moved",
            "|read − p| (points)", "prompt tok", "new tok", "s/step"]
    table = Table(*head, title=f"served engineers' design steps ({len(records)} steps)")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for key in sorted(rows, key=lambda k: (k[0], k[1] == "all", k)):
        rs = rows[key]
        verdicts = defaultdict(int)
        for r in rs:
            for g in r["groups"].values():
                verdicts[verdict(g["wanted"], g["moved"])] += 1
        calls = [c for r in rs for c in r["calls"]]
        mean = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
        misread = [abs(g["read_pct"] - 100 * g["p"]) for r in rs for g in r["groups"].values() if "read_pct" in g]
        cells = [*key, len(rs), sum(r["outcome"] == "applied" for r in rs), sum(r["outcome"] == "re-asked, then applied" for r in rs),
                 sum(r["outcome"] == "fallback" for r in rs), sum(r["restated"] for r in rs), verdicts["toward"], verdicts["against"],
                 verdicts["still"], verdicts["kept"], verdicts["moved"], f"{mean(misread):.1f}" if misread else "—", round(mean([(c["usage"] or {}).get("prompt_tokens", 0) for c in calls])),
                 round(mean([(c["usage"] or {}).get("completion_tokens", 0) for c in calls])), round(mean([r["seconds"] for r in rs]), 1)]
        lines.append("| " + " | ".join(str(x) for x in cells) + " |")
        table.add_row(*(str(x) for x in cells))
    Console(width=200).print(table)
    text = "\n".join(lines) + "\n"
    if markdown:
        Path(markdown).write_text(text)
    return text


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    p.add_argument("--run", action="append", default=None, help="a recorded run directory (repeatable)")
    p.add_argument("--rounds", default="0,1,2", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--presets", default="V6", type=lambda s: s.split(","))
    p.add_argument("--interfaces", default="config,changes,decisions", type=lambda s: s.split(","),
                   help=f"config, changes, decisions and/or {READ_FIRST} (decisions with read_first)")
    p.add_argument("--order", default="stable-first", choices=("paper", "stable-first"))
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--ctx", type=int, default=8192)
    p.add_argument("--max-tokens", type=int, default=1024)
    p.add_argument("--analysis-chars", type=int, default=600, help="the analysis string's maxLength (0: unbounded)")
    p.add_argument("--low", type=float, default=0.2, help="p at or below: the evidence says easier")
    p.add_argument("--high", type=float, default=0.8, help="p at or above: the evidence says harder")
    p.add_argument("--output", default="bench/results/served_replies.jsonl")
    p.add_argument("--steps", default="/tmp/served_replies_steps", help="where each design step's files go")
    p.add_argument("--report", default=None, help="only print the table of this JSONL")
    p.add_argument("--markdown", default=None, help="also write the table here")
    args = p.parse_args()
    if args.report:
        report(args.report, args.markdown)
        return
    if not args.run:
        p.error("--run is required")
    run(args)
    report(args.output, args.markdown)


if __name__ == "__main__":
    main()
