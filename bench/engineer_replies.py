"""What a real small instruct model's replies do to the design step: SmolLM2-135M-Instruct as the
``checkpoint`` engineer (transformers, CPU) on the recorded evidence of a real run, every
(round, context preset, structured off/on, seed) one design step with one re-ask.

For each model call it records whether the proposal was applied (as is, or changed by the
projection: out of bounds clipped, shares renormalised, unknown keys dropped), re-asked, or
ended in a fallback, and why (no block, unclosed block, YAML error, not a mapping, unknown
key), with prompt tokens, completion tokens, seconds and, for a forced (structured) block, its
tokens and token limit. Results go line by line to a JSONL file (a long run can be stopped and
resumed: cells already there are skipped), then to a markdown table (one row per task, preset
and structured, and a total) and a rich table. Every run directory given (``--run``, repeatable)
is one task's recorded run; docs/engineers.md ("Real replies") has the commands measured.

    OMP_NUM_THREADS=1 ENVENGINEER_CACHE=/tmp/eecache python bench/engineer_replies.py \\
        --run /tmp/eer/gridwalk-sim --run /tmp/eer/rg-sim --rounds 0 --presets V1,V4,V6 --structured off,on --seeds 0 \\
        --output bench/results/engineer_replies.jsonl
    python bench/engineer_replies.py --report bench/results/engineer_replies.jsonl [--reclassify]
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path
from typing import Any


#: The kinds of call, refusals first (a refusal is re-asked, or ends the step in a fallback).
KINDS = ("no block", "unclosed block", "YAML error", "not a mapping", "unknown key", "nothing applied",
         "applied", "applied (renormalised)", "applied, projection changed it", "applied, unknown keys dropped",
         "applied (empty: no change)", "applied (repeats the config: no change)")


def refusal(reply_text: str) -> tuple[str, str] | None:
    """(kind, reason) when the parser refuses the reply (no block, unclosed block, YAML error, not a mapping), else None."""
    from envengineer.design.contract import EngineerReply
    from envengineer.design.proposals import UnusableProposal, proposal_of

    try:
        proposal_of(EngineerReply(text=reply_text))
    except UnusableProposal as exc:
        why = str(exc)
        return ("no block" if "no fenced" in why or "was empty" in why else "unclosed block" if "never closed" in why
                else "YAML error" if "does not parse" in why else "not a mapping" if "mapping" in why else "other"), why
    return None


def classify(reply_text: str, request: Any) -> tuple[str, str]:
    """(kind, detail) of one reply: applied (as is, empty, renormalised, unknown keys dropped, projection changed it) /
    no block / unclosed block / YAML error / not a mapping / unknown key / nothing applied."""
    from envengineer.design.contract import EngineerReply
    from envengineer.design.proposals import nothing_applied, proposal_of

    refused = refusal(reply_text)
    if refused:
        return refused
    proposal = proposal_of(EngineerReply(text=reply_text))
    projection = request.generator.project(proposal, request.current_config)
    problem = nothing_applied(proposal, projection)
    if problem:
        return ("unknown key" if "unknown" in problem else "nothing applied"), problem
    if not proposal:
        return "applied (empty: no change)", ""
    if projection.config == request.current_config:  # every knob set to the value it had
        return "applied (repeats the config: no change)", ""
    reasons = [c.reason for c in projection.changes]
    dropped = [c.field for c in projection.changes if c.applied is None]
    changed = [c for c in projection.changes if c.applied is not None and "renormalised" not in c.reason]
    if dropped:
        return "applied, unknown keys dropped", "; ".join(f"{c.field}: {c.reason}" for c in projection.changes if c.applied is None)[:300]
    if changed:
        return "applied, projection changed it", "; ".join(f"{c.field}: {c.reason}" for c in changed)[:300]
    return "applied" if not reasons else "applied (renormalised)", ""


def run(args: argparse.Namespace) -> None:
    from envengineer.design.step import design
    from envengineer.design.evidence import load_evidence
    from envengineer.design.prompts import build_request
    from envengineer.registry import load_registry

    registry = load_registry()
    out = Path(args.output)
    out.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    if out.exists():
        for line in out.read_text().splitlines():
            r = json.loads(line)
            done.add((r["run"], r["round"], r["preset"], r["structured"], r["seed"]))
    # seeds outermost: a stopped run has covered every (round, preset, structured) cell evenly
    cells = [(run_dir, rnd, preset, s == "on", seed)
             for seed in args.seeds for s in args.structured for preset in args.presets for rnd in args.rounds for run_dir in args.run]
    log = open(args.log, "a") if args.log else None
    for i, (run_dir, rnd, preset, structured, seed) in enumerate(cells, 1):
        key = (str(run_dir), rnd, preset, structured, seed)
        if key in done:
            continue
        evidence = load_evidence(run_dir, rnd, registry)
        request = build_request(evidence, registry, {"preset": preset})
        options = {"model_path": args.model, "backend": "transformers", "max_new_tokens": args.max_new_tokens, "seed": seed, "temperature": 0.7}
        if structured:
            options["structured"] = True
        engineer = registry.create("engineer", "checkpoint", options)
        step_dir = Path(args.steps) / f"{Path(run_dir).name}-r{rnd}-{preset}-{'on' if structured else 'off'}-s{seed}"
        started = time.monotonic()
        outcome = design(engineer, request, out_dir=step_dir, reask=1, summarize=False)
        seconds = time.monotonic() - started
        calls = [json.loads(l) for l in (step_dir / "calls.jsonl").read_text().splitlines()]
        attempts = []
        for n, reply in enumerate(outcome.replies, 1):
            kind, detail = classify(reply.text, request)
            call = next((c for c in calls if c.get("design_attempt") == n), {})
            usage = reply.usage or {}
            attempts.append({"attempt": n, "kind": kind, "detail": detail, "prompt_tokens": usage.get("prompt_tokens"),
                             "completion_tokens": usage.get("completion_tokens"), "seconds": call.get("latency_s"), "text": reply.text,
                             # structured (transformers): the forced block's tokens and the limit it had (the schema's longest block)
                             **{k: usage[k] for k in ("analysis_tokens", "block_tokens", "block_token_limit") if k in usage}})
        final = ("fallback" if outcome.fallback else "applied" if len(outcome.replies) == 1 else "re-asked, then applied")
        record = {"run": str(run_dir), "task": request.generator.name, "round": rnd, "preset": preset,
                  "structured": structured, "seed": seed, "max_new_tokens": args.max_new_tokens, "outcome": final, "reason": outcome.reason,
                  "seconds": round(seconds, 1), "attempts": attempts}
        with out.open("a") as f:
            f.write(json.dumps(record) + "\n")
        if log:
            log.write(f"{time.strftime('%H:%M:%S')} {i}/{len(cells)} {key} {final} {[a['kind'] for a in attempts]} {seconds:.0f}s\n")
            log.flush()


def reclassify(path: str) -> None:
    """Classify every recorded reply again with today's parser and projection (no model call), where the
    record's run directory is still there; elsewhere a reply the parser refuses gets today's reason and
    a parsed one keeps its kind (projecting it needs the run's config)."""
    from envengineer.design.evidence import load_evidence
    from envengineer.design.prompts import build_request
    from envengineer.registry import load_registry

    registry = load_registry()
    records = [json.loads(l) for l in Path(path).read_text().splitlines()]
    requests: dict[tuple, Any] = {}
    redone = 0
    for r in records:
        key = (r["run"], r["round"], r["preset"])
        if key not in requests:
            requests[key] = build_request(load_evidence(r["run"], r["round"], registry), registry, {"preset": r["preset"]}) if Path(r["run"]).is_dir() else None
        for a in r["attempts"]:
            if requests[key] is not None:
                a["kind"], a["detail"] = classify(a["text"], requests[key])
            else:  # no evidence to project on: only the parser's verdict is redone (a refusal stays one, with today's reason)
                refused = refusal(a["text"])
                if refused:
                    a["kind"], a["detail"] = refused
        redone += requests[key] is not None
    Path(path).write_text("".join(json.dumps(r) + "\n" for r in records))
    print(f"reclassified {redone} of {len(records)} steps; the others' run directories are gone: their refusals were parsed again")


def report(path: str, markdown: str | None) -> str:
    """One row per (task, preset, structured) and a total: steps by outcome, calls by kind, mean cost."""
    from rich.console import Console
    from rich.table import Table

    records = [json.loads(l) for l in Path(path).read_text().splitlines()]
    rows: dict[tuple, Counter] = {}
    cost: dict[tuple, list] = {}
    for r in records:
        for key in ((r.get("task", "mapf-frozenlake"), r["preset"], "on" if r["structured"] else "off"), ("all", "", "")):
            c = rows.setdefault(key, Counter())
            c["steps"] += 1
            c[r["outcome"]] += 1
            for a in r["attempts"]:
                c["calls"] += 1
                c["kind:" + a["kind"]] += 1
                if "block_tokens" in a and a["block_tokens"] >= a["block_token_limit"]:
                    c["cut"] += 1
                cost.setdefault(key, []).append((a["prompt_tokens"] or 0, a["completion_tokens"] or 0, a["seconds"] or 0))
    seen = {k[5:] for c in rows.values() for k in c if k.startswith("kind:")}
    kinds = [*KINDS, *sorted(seen - set(KINDS))]  # every kind, 0 or not, in a fixed order
    head = ["task", "preset", "structured", "steps", "calls", "step: applied", "step: re-asked, then applied", "step: fallback",
            *("call: " + k for k in kinds), "prompt tok (mean)", "completion tok (mean)", "s/call (mean)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    total = rows[("all", "", "")]
    table = Table(*head, title=f"SmolLM2-135M-Instruct design calls ({total['calls']} calls, {total['steps']} steps)")
    for key in sorted(rows, key=lambda k: (k[0] == "all", k)):
        c, k = rows[key], cost[key]
        cells = [*key, c["steps"], c["calls"], c["applied"], c["re-asked, then applied"], c["fallback"],
                 *(c["kind:" + kind] for kind in kinds),
                 round(sum(x[0] for x in k) / len(k)), round(sum(x[1] for x in k) / len(k)), round(sum(x[2] for x in k) / len(k), 1)]
        if key[0] == "all":
            cells = [f"**{x}**" if x != "" else "" for x in cells]
        lines.append("| " + " | ".join(str(x) for x in cells) + " |")
        table.add_row(*(str(x) for x in cells))
    blocks = [a for r in records for a in r["attempts"] if "block_tokens" in a]
    if blocks:
        cut = sum(a["block_tokens"] >= a["block_token_limit"] for a in blocks)
        by_task: dict[str, list] = {}
        for r in records:
            for a in r["attempts"]:
                if "block_tokens" in a:
                    by_task.setdefault(r["task"], []).append(a)
        def span(values: list[int]) -> str:
            return f"{min(values)}-{max(values)}" if min(values) != max(values) else str(values[0])

        sizes = "; ".join(f"{t}: {span([a['block_tokens'] for a in v])} of {span([a['block_token_limit'] for a in v])}"
                          for t, v in sorted(by_task.items()))
        lines.append(f"\nForced blocks with their token limit recorded: {len(blocks)}, cut at the limit: {cut} (tokens a block used of its limit, per task: {sizes}).")
    Console().print(table)
    text = "\n".join(lines) + "\n"
    if markdown:
        Path(markdown).write_text(text)
    return text


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", action="append", default=None, help="a recorded run directory (repeatable)")
    p.add_argument("--rounds", default="0,1", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--presets", default="V1,V4,V6", type=lambda s: s.split(","))
    p.add_argument("--structured", default="off", type=lambda s: s.split(","))
    p.add_argument("--seeds", default="0", type=lambda s: [int(x) for x in s.split(",")])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--max-new-tokens", type=int, default=300)
    p.add_argument("--output", default="bench/results/engineer_replies.jsonl")
    p.add_argument("--steps", default="/tmp/engineer_replies_steps", help="where each design step's files go")
    p.add_argument("--log", default=None, help="progress log file")
    p.add_argument("--report", default=None, help="only print the table of this JSONL")
    p.add_argument("--markdown", default=None, help="also write the table here")
    p.add_argument("--reclassify", action="store_true", help="with --report: classify the recorded replies again first (no model call)")
    args = p.parse_args()
    if args.report:
        if args.reclassify:
            reclassify(args.report)
        report(args.report, args.markdown)
        return
    if not args.run:
        p.error("--run is required")
    run(args)
    report(args.output, args.markdown)


if __name__ == "__main__":
    import torch

    torch.set_num_threads(1)
    main()
