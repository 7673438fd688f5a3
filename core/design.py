"""The proposal pipeline: ask an engineer, make whatever comes back safe, record it all.

Every engineer's reply goes the same way: the last fenced YAML block is extracted,
parsed safely (size limit, no aliases, anchors or tags, must be a mapping), merged and
projected by the task (``generator.project``, which never raises). Unusable output
gets a re-ask that quotes the problem; after that the previous config is kept and the
step is marked a fallback. Nothing an engineer returns or raises escapes
:func:`design`.
"""

from __future__ import annotations

import re
import string
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from envengineer.evidence import Evidence

#: The largest YAML block we parse (characters).
MAX_YAML_CHARS = 16_000
#: How much of a bad answer a re-ask quotes.
QUOTE_CHARS = 1_500


# ------------------------------------------------------------------------ types


@dataclass
class DesignRequest:
    """One design step, as an engineer sees it."""

    evidence: Evidence
    context: str  # the composed context modules
    prompt: str  # the analysis prompt, filled with the context
    current_config: Any  # the generator config object (pydantic) of the round just finished
    generator: Any  # the task's Generator component
    policy_path: str | None = None  # the current policy checkpoint (for the checkpoint engineer)
    base_policy_path: str | None = None  # the starting weights (for the base engineer)
    chat_template_kwargs: dict[str, Any] | None = None  # the policy's chat-template options (checkpoint/base engineers)
    followups: list[dict[str, str]] = field(default_factory=list)  # a re-ask's extra turns
    seed: int = 0

    @property
    def messages(self) -> list[dict[str, str]]:
        """The conversation: the prompt, then any re-ask turns."""
        return [{"role": "user", "content": self.prompt}, *self.followups]


@dataclass
class EngineerReply:
    """What an engineer returned for one attempt."""

    text: str
    usage: dict[str, int] = field(default_factory=dict)  # prompt_tokens, completion_tokens
    latency_s: float = 0.0
    model: str = ""
    attempts: int = 1  # API calls this reply took (retries included)
    proposal: dict[str, Any] | None = None  # set by baselines that build the update directly
    calls: list[dict[str, Any]] = field(default_factory=list)  # one record per API call


class EngineerCallError(Exception):
    """An engineer's transport failed for good (after its retries); ``calls`` records each try."""

    def __init__(self, message: str, calls: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.calls = calls or []


@dataclass
class DesignOutcome:
    """The result of one design step."""

    config: Any  # C_{n+1}: the projected proposal, or the previous config on a fallback
    projection: Any | None  # the task's Projection, when a proposal was usable
    fallback: bool
    reason: str  # why it fell back, or "" / a note
    replies: list[EngineerReply] = field(default_factory=list)
    summary: str | None = None
    proposal: dict[str, Any] | None = None


class UnusableProposal(ValueError):
    """The reply held no usable proposal; the message says why (quoted in the re-ask)."""


# ------------------------------------------------------------------- parsing

_FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)^[ \t]*\1[ \t]*$", re.S | re.M)


def extract_yaml_block(text: str) -> str:
    """The last fenced block tagged ``yaml``/``yml`` or untagged; raises :class:`UnusableProposal`."""
    if not isinstance(text, str) or not text.strip():
        raise UnusableProposal("the answer was empty")
    blocks = [m.group(3) for m in _FENCE.finditer(text) if m.group(2).lower() in ("", "yaml", "yml")]
    if not blocks:
        raise UnusableProposal("the answer has no fenced YAML block (```yaml ... ```)")
    return blocks[-1]


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases, anchors and explicit tags (no billion laughs, no objects)."""

    def compose_node(self, parent: Any, index: Any) -> Any:  # type: ignore[override]
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent):
            raise yaml.YAMLError(f"aliases are not allowed (*{event.anchor})")
        anchor = getattr(event, "anchor", None)
        if anchor is not None:
            raise yaml.YAMLError(f"anchors are not allowed (&{anchor})")
        tag = getattr(event, "tag", None)
        if tag not in (None, "!") and not isinstance(event, (yaml.DocumentStartEvent, yaml.StreamStartEvent)):
            raise yaml.YAMLError(f"explicit tags are not allowed ({tag})")
        return super().compose_node(parent, index)


def parse_proposal(block: str, max_chars: int = MAX_YAML_CHARS) -> dict[str, Any]:
    """Parse one YAML block into a mapping; raises :class:`UnusableProposal` with the reason."""
    if len(block) > max_chars:
        raise UnusableProposal(f"the YAML block is too long ({len(block)} characters, limit {max_chars})")
    try:
        data = yaml.load(block, Loader=_StrictLoader)  # noqa: S506 - strict safe loader
    except yaml.YAMLError as exc:
        raise UnusableProposal(f"the YAML block does not parse: {_one_line(str(exc))}") from None
    except RecursionError:
        raise UnusableProposal("the YAML block is nested too deeply") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UnusableProposal(f"the YAML block must be a mapping of fields, got {type(data).__name__}")
    return data


def proposal_of(reply: EngineerReply, max_chars: int = MAX_YAML_CHARS) -> dict[str, Any]:
    if reply.proposal is not None:
        if not isinstance(reply.proposal, dict):
            raise UnusableProposal(f"the proposal must be a mapping, got {type(reply.proposal).__name__}")
        return reply.proposal
    return parse_proposal(extract_yaml_block(reply.text), max_chars)


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _nothing_applied(proposal: dict[str, Any], projection: Any) -> str | None:
    """A reason when a non-empty proposal had no effect at all (every part ignored)."""
    if not proposal or projection.accepted:
        return None
    if any(change.applied is not None for change in projection.changes):
        return None
    reasons = "; ".join(f"{c.field}: {c.reason}" for c in projection.changes[:8])
    return f"no part of the proposal could be applied ({reasons})" if reasons else "the proposal changed nothing"


# ------------------------------------------------------------------- prompts

PROMPTS_PACKAGE = "envengineer.plugins"


def load_prompt(name: str, path: str | Path | None = None) -> str:
    """A prompt template: ``path`` if given, else the built-in ``prompts/<name>.md``."""
    if path is not None:
        return Path(path).read_text(encoding="utf-8")
    import importlib.resources

    return (importlib.resources.files(PROMPTS_PACKAGE) / "prompts" / f"{name}.md").read_text(encoding="utf-8")


def _config_yaml(config: Any) -> str:
    data = config.model_dump() if hasattr(config, "model_dump") else config
    return yaml.safe_dump(data, sort_keys=False, allow_unicode=True).rstrip()


def fill_prompt(template: str, **values: Any) -> str:
    """``$name`` placeholders (string.Template): braces in contexts and YAML stay untouched."""
    return string.Template(template).safe_substitute({k: str(v) for k, v in values.items()})


def analysis_prompt(evidence: Evidence, context: str, config: Any, template: str | None = None) -> str:
    return fill_prompt(
        template if template is not None else load_prompt("analysis"),
        context=context.rstrip(),
        config=_config_yaml(config),
        round=evidence.round + 1,
        next_round=evidence.round + 2,
        rounds_total=evidence.rounds_total,
        task=getattr(evidence.task, "name", "the task"),
        budget=evidence.budget or "the fixed",
        brief=evidence.task.design_brief(evidence.budget or None).strip(),
    )


def _groups_text(evidence: Evidence) -> str:
    """The evidence's groups for the summary prompt, e.g. ``size groups (3x3, 4x4, ...)``."""
    dims = [dim for dim, values in (evidence.report.get("by") or {}).items() if values]
    names = [str(g) for g in evidence.task.groups()]
    kind = f"{dims[0]} groups" if dims else "groups"
    return f"{kind} ({', '.join(names)})" if names and names != ["all"] else kind


def summary_prompt(request: DesignRequest, outcome: DesignOutcome, template: str | None = None) -> str:
    changes = "\n".join(f"- {c.field}: {c.proposed!r} -> {c.applied!r} ({c.reason})" for c in getattr(outcome.projection, "changes", ()))
    differ = "\n".join(f"- {name}: {old} -> {new}" for name, old, new in diff_rows(request.current_config, outcome.config))
    evidence = request.evidence
    return fill_prompt(
        template if template is not None else load_prompt("summary"),
        context=request.context.rstrip(),
        previous_config=_config_yaml(request.current_config),
        config=_config_yaml(outcome.config),
        config_changes=differ or "- none",
        projection=changes or "- none",
        fallback="yes: " + outcome.reason if outcome.fallback else "no",
        round=evidence.round + 1,
        next_round=evidence.round + 2,
        groups=_groups_text(evidence),
        failure_types=", ".join(evidence.failure_types) or "as named in the evidence",
    )


def build_request(
    evidence: Evidence,
    registry: Any,
    spec: Any,
    *,
    current_config: Any = None,
    policy_path: str | None = None,
    base_policy_path: str | None = None,
    prompt_path: str | Path | None = None,
    seed: int = 0,
    chat_template_kwargs: dict[str, Any] | None = None,
) -> DesignRequest:
    """Compose the context, fill the analysis prompt, and wrap it all in a :class:`DesignRequest`."""
    from envengineer.evidence import compose_context

    generator = evidence.task
    if current_config is None:
        current_config = generator.config_model.model_validate(evidence.config)
    context = compose_context(registry, spec, evidence)
    template = load_prompt("analysis", prompt_path)
    prompt = analysis_prompt(evidence, context, current_config, template)
    return DesignRequest(
        evidence=evidence,
        context=context,
        prompt=prompt,
        current_config=current_config,
        generator=generator,
        policy_path=policy_path,
        base_policy_path=base_policy_path,
        chat_template_kwargs=chat_template_kwargs,
        seed=seed,
    )


def factual_note(request: DesignRequest, outcome: DesignOutcome) -> str:
    """A templated S note (baselines, and LLM engineers whose transport failed)."""
    overall = request.evidence.report.get("overall", {})
    valid, optimal = overall.get("valid_rate"), overall.get("optimal_rate")
    parts = [f"Round {request.evidence.round + 1}: validation valid rate {_pct(valid)}, optimal rate {_pct(optimal)}."]
    by = _first_grouping(request.evidence.report)
    if by:
        worst = min(by.items(), key=lambda kv: kv[1].get("valid_rate", 0.0))
        best = max(by.items(), key=lambda kv: kv[1].get("valid_rate", 0.0))
        parts.append(f"Weakest group {worst[0]} ({_pct(worst[1].get('valid_rate'))} valid), strongest {best[0]} ({_pct(best[1].get('valid_rate'))}).")
    failures = overall.get("failures") or {}
    if failures:
        top = max(failures.items(), key=lambda kv: kv[1])
        parts.append(f"Most frequent failure: {top[0]} ({top[1]}).")
    if outcome.fallback:
        parts.append(f"The configuration was kept unchanged (fallback: {outcome.reason}).")
    else:
        n = len(getattr(outcome.projection, "accepted", ()) or ())
        parts.append(f"The next configuration applies {n} accepted change(s); watch whether the weakest group improves.")
    return " ".join(parts)


def _pct(rate: Any) -> str:
    return f"{100 * rate:.1f}%" if isinstance(rate, (int, float)) else "n/a"


def _first_grouping(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    by = report.get("by") or {}
    for values in by.values():
        if values:
            return values
    return {}


# -------------------------------------------------------------------- design


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
            reason = f"engineer call failed: {_one_line(str(exc))}"
            responses.append(f"(no response: {reason})")
            break
        except Exception as exc:  # an engineer's bug must not crash the run
            reason = f"engineer raised {type(exc).__name__}: {_one_line(str(exc))}"
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
            problem = _nothing_applied(proposal, projection)
            if problem:
                raise UnusableProposal(problem)
        except UnusableProposal as exc:
            reason = str(exc)
            continue
        except Exception as exc:  # a task's projection must never raise; be safe anyway
            reason = f"projection raised {type(exc).__name__}: {_one_line(str(exc))}"
            continue
        outcome = DesignOutcome(config=projection.config, projection=projection, fallback=False, reason="", replies=replies, proposal=proposal)
        break
    if outcome is None:
        outcome = DesignOutcome(config=current, projection=None, fallback=True, reason=reason or "no usable proposal", replies=replies, proposal=proposal)

    if summarize and hasattr(engineer, "summarize"):
        try:
            note = engineer.summarize(request, outcome)
        except Exception as exc:
            calls.append({"summary": True, "error": f"{type(exc).__name__}: {_one_line(str(exc))}"})
            note = factual_note(request, outcome)
        outcome.summary = note.strip() if isinstance(note, str) and note.strip() else None
        calls.extend({**c, "summary": True} for c in getattr(engineer, "last_summary_calls", []) or [])

    if out_dir is not None:
        write_outcome(Path(out_dir), request, outcome, attempt_request, responses, calls, _secrets(engineer))
    return outcome


def _secrets(engineer: Any) -> list[str]:
    try:
        values = engineer.secret_values() if hasattr(engineer, "secret_values") else []
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
    """Write prompt.md, response.md, proposal.yaml, projection.yaml, summary.md, calls.jsonl (atomically)."""
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
        "accepted": list(getattr(outcome.projection, "accepted", ()) or ()),
        "changes": [
            {"field": c.field, "proposed": _plain(c.proposed), "applied": _plain(c.applied), "reason": c.reason}
            for c in getattr(outcome.projection, "changes", ()) or ()
        ],
        "config": outcome.config.model_dump() if hasattr(outcome.config, "model_dump") else outcome.config,
    }
    write_text(out_dir / "projection.yaml", _redact(yaml.safe_dump(projection, sort_keys=False, allow_unicode=True), secrets))
    if outcome.summary:
        write_text(out_dir / "summary.md", _redact(outcome.summary, secrets) + "\n")
    write_text(out_dir / "calls.jsonl", "".join(_redact(dumps_json(_plain(c)), secrets) + "\n" for c in calls))


def _plain(value: Any) -> Any:
    """YAML/JSON-safe copy of a value (tuples to lists, unknown objects to strings)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


# ------------------------------------------------------------------ offline use


def _run_config(run_dir: Path) -> dict[str, Any]:
    from envengineer.fileio import read_yaml

    data = read_yaml(Path(run_dir) / "run.yaml")
    return data if isinstance(data, dict) else {}


def context_spec_from_cli(run_dir: Path, preset: str | None, modules: str | None) -> Any:
    """``--preset``/``--modules F,G,H,T`` (T may be ``T:full``), else the run's own ``context:`` section."""
    if preset and modules:
        from envengineer.errors import ConfigError

        raise ConfigError("give --preset or --modules, not both")
    if preset:
        return {"preset": preset}
    if modules:
        names, t_mode = [], None
        for item in (part.strip() for part in modules.split(",") if part.strip()):
            name, _, mode = item.partition(":")
            if name == "T":
                t_mode = mode or "bookkeeping"
            else:
                names.append(name)
        return {"modules": names, **({"T": t_mode} if t_mode else {})}
    return _run_config(run_dir).get("context") or None


def engineer_section(run_dir: Path, name: str | None, config_file: Path | None) -> tuple[str, dict[str, Any]]:
    """The engineer's name and options: ``--engineer``/``--engineer-config`` or the run's ``engineer:`` section.

    The options file may be the section itself (``{name: openai, model: ...}``), or a run config holding one.
    """
    from envengineer.errors import ConfigError
    from envengineer.fileio import read_yaml

    section: dict[str, Any] = {}
    if config_file is not None:
        data = read_yaml(config_file) or {}
        if not isinstance(data, dict):
            raise ConfigError(f"{config_file}: expected a mapping")
        section = dict(data.get("engineer", data)) if isinstance(data.get("engineer", data), dict) else {}
    elif name is None:
        section = dict(_run_config(run_dir).get("engineer") or {})
    chosen = name or section.get("name")
    if not chosen:
        raise ConfigError("engineer: no --engineer given and the run config names none")
    section.pop("name", None)
    return chosen, section


def propose_offline(registry: Any, run_dir: Path, round: int, engineer: str | None, config_file: Path | None, *, out_dir: Path | None = None, reask: int = 1) -> tuple[DesignRequest, DesignOutcome]:
    """Run an engineer on a recorded round's evidence, without training (``envengineer propose``).

    The checkpoint and base engineers get the models the run itself used: the round's
    trained checkpoint and the base policy its ``pretrain`` step recorded; the analysis
    prompt is the run's own ``design.prompt_file`` when it set one.
    """
    from envengineer.evidence import load_evidence
    from envengineer.loop import round_seed
    from envengineer.rundir import RunDir

    run_dir = Path(run_dir)
    name, options = engineer_section(run_dir, engineer, config_file)
    instance = registry.create("engineer", name, options, where=f"engineer.{name}")
    evidence = load_evidence(run_dir, round, registry)
    run = _run_config(run_dir)
    records = RunDir(run_dir)
    checkpoint, base = records.checkpoint(round), records.base_policy()
    section = run.get("design")
    prompt_file = section.get("prompt_file") if isinstance(section, dict) else None
    request = build_request(
        evidence,
        registry,
        run.get("context") or None,
        policy_path=str(checkpoint),  # even when gone: the engineer's error then names the path
        base_policy_path=str(base) if base is not None else None,
        prompt_path=prompt_file if isinstance(prompt_file, str) else None,
        seed=round_seed(int(run.get("seed") or 0), round),  # the seed the loop's design step had
        chat_template_kwargs=policy.get("chat_template_kwargs") if isinstance(policy := run.get("policy"), dict) else None,
    )
    return request, design(instance, request, out_dir=out_dir, reask=reask)


def diff_rows(before: Any, after: Any) -> list[tuple[str, str, str]]:
    """(field, before, after) for every leaf that differs, in the config's order."""

    def flat(value: Any, prefix: str = "") -> dict[str, Any]:
        if hasattr(value, "model_dump"):
            value = value.model_dump()
        if isinstance(value, dict):
            out: dict[str, Any] = {}
            for key, inner in value.items():
                out.update(flat(inner, f"{prefix}{key}."))
            return out
        return {prefix[:-1]: value}

    a, b = flat(before), flat(after)
    return [(key, repr(a.get(key)), repr(b.get(key))) for key in list(dict.fromkeys([*a, *b])) if a.get(key) != b.get(key)]
