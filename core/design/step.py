"""The proposal pipeline: ask an engineer, make whatever comes back safe, record it all.

Every engineer's reply goes the same way: the last fenced YAML block is extracted,
parsed safely (size limit, no aliases, anchors or tags, must be a mapping), merged and
projected by the task (``generator.project``, which never raises). Unusable output
gets a re-ask that quotes the problem; after that the previous config is kept and the
step is marked a fallback. Nothing an engineer returns or raises escapes
:func:`design`.
"""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from envengineer.design.contract import DesignOutcome, DesignRequest, EngineerCallError, EngineerReply
from envengineer.design.prompts import factual_note
from envengineer.design.proposals import MAX_YAML_CHARS, UnusableProposal, nothing_applied, one_line, proposal_of

#: How much of a bad answer a re-ask quotes.
QUOTE_CHARS = 1_500



def _reask_turns(reply_text: str, problem: str) -> list[dict[str, str]]:
    quoted = reply_text if len(reply_text) <= QUOTE_CHARS else reply_text[:QUOTE_CHARS] + "\n…(truncated)"
    return [
        {"role": "assistant", "content": quoted},
        {
            "role": "user",
            "content": (
                f"Your answer could not be used: {problem}.\n"
                "Answer again with exactly one fenced YAML block (```yaml ... ```) that holds only the "
                "fields you change, as a mapping, without anchors, aliases or tags."
            ),
        },
    ]


def design(
    engineer: Any,
    request: DesignRequest,
    *,
    out_dir: str | Path | None = None,
    reask: int = 1,
    max_yaml_chars: int = MAX_YAML_CHARS,
    summarize: bool = True,
) -> DesignOutcome:
    """Ask ``engineer`` for the next config; never raises because of what it returns or raises."""
    replies: list[EngineerReply] = []
    calls: list[dict[str, Any]] = []
    responses: list[str] = []
    current = request.current_config
    attempt_request = request
    outcome: DesignOutcome | None = None
    reason = ""
    proposal: dict[str, Any] | None = None
    for attempt in range(1, max(0, reask) + 2):
        if attempt > 1:
            attempt_request = replace(request, followups=[*attempt_request.followups, *_reask_turns(responses[-1], reason)])
        started = time.monotonic()
        try:
            reply = engineer.propose(attempt_request)
            if not isinstance(reply, EngineerReply):
                reply = EngineerReply(text=str(reply))
        except EngineerCallError as exc:
            calls.extend({**c, "design_attempt": attempt} for c in exc.calls)
            reason = f"engineer call failed: {one_line(str(exc))}"
            responses.append(f"(no response: {reason})")
            break
        except Exception as exc:  # an engineer's bug must not crash the run
            reason = f"engineer raised {type(exc).__name__}: {one_line(str(exc))}"
            calls.append({"design_attempt": attempt, "error": reason, "latency_s": round(time.monotonic() - started, 3)})
            responses.append(f"(no response: {reason})")
            break
        replies.append(reply)
        responses.append(reply.text)
        calls.extend(
            {**c, "design_attempt": attempt}
            for c in (reply.calls or [{"model": reply.model, "usage": reply.usage, "latency_s": round(reply.latency_s, 3), "attempt": reply.attempts, "error": None}])
        )
        try:
            proposal = proposal_of(reply, max_yaml_chars)
            projection = request.generator.project(proposal, current)
            problem = nothing_applied(proposal, projection)
            if problem:
                raise UnusableProposal(problem)
        except UnusableProposal as exc:
            reason = str(exc)
            continue
        except Exception as exc:  # a task's projection must never raise; be safe anyway
            reason = f"projection raised {type(exc).__name__}: {one_line(str(exc))}"
            continue
        outcome = DesignOutcome(config=projection.config, projection=projection, fallback=False, reason="", replies=replies, proposal=proposal,
                                calls=calls)
        break
    if outcome is None:
        outcome = DesignOutcome(config=current, projection=None, fallback=True, reason=reason or "no usable proposal", replies=replies,
                                proposal=proposal, calls=calls)

    if summarize:
        try:
            note = engineer.summarize(request, outcome)
        except Exception as exc:
            calls.append({"summary": True, "error": f"{type(exc).__name__}: {one_line(str(exc))}"})
            note = factual_note(request, outcome)
        outcome.summary = note.strip() if isinstance(note, str) and note.strip() else None
        calls.extend({**c, "summary": True} for c in engineer.last_summary_calls)

    if out_dir is not None:
        write_outcome(Path(out_dir), request, outcome, attempt_request, responses, calls, _secrets(engineer))
    return outcome


def _secrets(engineer: Any) -> list[str]:
    try:
        values = list(engineer.secret_values())
    except Exception:
        values = []
    return [v for v in values if isinstance(v, str) and len(v) >= 4]


def _redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "[REDACTED]")
    return text


def write_outcome(
    out_dir: Path,
    request: DesignRequest,
    outcome: DesignOutcome,
    last_request: DesignRequest,
    responses: list[str],
    calls: list[dict[str, Any]],
    secrets: list[str] = (),  # type: ignore[assignment]
) -> None:
    """Write prompt.md, response.md, proposal.yaml, projection.yaml, summary.md, calls.jsonl and, under a context budget,
    budget.json (what was cut: :class:`envengineer.design.budget.BudgetRecord`), each atomically."""
    from envengineer.fileio import dumps_json, write_text

    secrets = list(secrets)
    prompt = request.prompt
    for turn in last_request.followups:
        prompt += f"\n\n---\n\n<!-- {turn['role']} (re-ask) -->\n\n{turn['content']}"
    write_text(out_dir / "prompt.md", _redact(prompt, secrets))
    response = "\n\n".join(f"<!-- attempt {i} -->\n\n{text}" for i, text in enumerate(responses, start=1))
    write_text(out_dir / "response.md", _redact(response or "(no response)", secrets) + "\n")
    proposal_text = yaml.safe_dump(outcome.proposal, sort_keys=False, allow_unicode=True) if outcome.proposal is not None else "null\n"
    write_text(out_dir / "proposal.yaml", _redact(proposal_text, secrets))
    projection = {
        "fallback": outcome.fallback,
        "reason": outcome.reason,
        "accepted": list(outcome.projection.accepted) if outcome.projection is not None else [],
        "changes": [
            {"field": c.field, "proposed": _plain(c.proposed), "applied": _plain(c.applied), "reason": c.reason}
            for c in (outcome.projection.changes if outcome.projection is not None else ())
        ],
        "config": outcome.config.model_dump() if hasattr(outcome.config, "model_dump") else outcome.config,
    }
    write_text(out_dir / "projection.yaml", _redact(yaml.safe_dump(projection, sort_keys=False, allow_unicode=True), secrets))
    if outcome.summary:
        write_text(out_dir / "summary.md", _redact(outcome.summary, secrets) + "\n")
    write_text(out_dir / "calls.jsonl", "".join(_redact(dumps_json(_plain(c)), secrets) + "\n" for c in calls))
    if request.budget is not None:
        write_text(out_dir / "budget.json", json.dumps(request.budget, indent=2) + "\n")


def _plain(value: Any) -> Any:
    """YAML/JSON-safe copy of a value (tuples to lists, unknown objects to strings)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)
