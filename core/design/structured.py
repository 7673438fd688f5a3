"""Structured replies: the engineer's config block constrained to the task's declared config schema.

An engineer with ``structured: true`` asks its backend to decode under a JSON schema instead of
hoping for a well-formed fenced YAML block. The schema is built here from what the task declares,
never from task-specific names: the generator's ``config_model`` (its pydantic JSON schema gives
each field's description) restricted to what the engineer may change, the declared knobs
(:attr:`Generator.knobs`, with their bounds and integer-ness) that each group of the knob table
(:attr:`Generator.knob_table`) holds in the current config, or at the top level when the task
has no table. Every object is closed (``additionalProperties: false``) and lists all its
properties as required, which is what OpenAI's strict mode demands and what makes the block the
whole next setting of every knob (the task's projection still clips, snaps and renormalises).

Two reply shapes come from it:

* :func:`reply_schema`: ``{"analysis": str, "config": {...}}``, the whole reply as JSON (the API
  engineers and vLLM); :func:`reply_text` turns such a reply into the free-text form (analysis, then
  a fenced block holding the config as JSON, which YAML parses), so the design step parses it with
  the same strict loader and projects it as it does any answer;
* :func:`config_schema`: the block alone (the in-process transformers engineer writes free analysis,
  then the fenced block is forced by a grammar).

Whatever a model returns stays untrusted: :func:`reply_text` bounds its size and nesting, and a
reply that is not such an object becomes a :class:`StructuredReply` whose ``problem`` the design
step reports (and quotes in its re-ask).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from envengineer.design.contract import EngineerReply
from envengineer.design.proposals import MAX_YAML_CHARS, one_line

#: The name the schema is sent under (OpenAI: a-z, A-Z, 0-9, _ and -, at most 64 characters).
SCHEMA_NAME = "engineer_config"
#: The largest structured reply parsed (characters): the analysis plus a config block.
MAX_REPLY_CHARS = 4 * MAX_YAML_CHARS

ANALYSIS_DESCRIPTION = "your analysis of the evidence: what fails, why, and what you change (a few sentences)"

#: The instruction a whole-JSON reply adds to the conversation (the design prompt asks for a YAML block).
JSON_INSTRUCTION = (
    "Answer with one JSON object under the given schema: \"analysis\" holds your analysis, \"config\" the next "
    "configuration, every listed field with its value (repeat a value you keep)."
)
#: The same for the ``changes`` interface: only what changes, an empty list keeping the configuration.
CHANGES_INSTRUCTION = (
    "Answer with one JSON object under the given schema: \"analysis\" holds your analysis, \"changes\" lists only the "
    "settings you change, each with its new value; an empty list keeps the configuration as it is."
)
#: The same for the ``decisions`` interface: a word per group, turned into knob moves by the task's declarations.
DECISIONS_INSTRUCTION = (
    "Answer with one JSON object under the given schema: \"analysis\" holds your analysis, \"decisions\" lists only the "
    "groups you change: for each, whether its instances get harder or easier, and whether it gets more or less of the "
    "training budget; a group you leave out stays as it is, and an empty list keeps the configuration."
)
#: The ``decisions`` interface with ``read_first``: every group, its success read off the evidence before its words.
DECISIONS_READ_INSTRUCTION = (
    "Answer with one JSON object under the given schema: \"analysis\" holds your analysis, \"decisions\" holds every "
    "group in order: first its success rate in percent as the evidence above shows it, then whether its instances get "
    "harder or easier (or keep), and whether it gets more or less of the training budget (or the same)."
)
#: The reply shapes a structured engineer asks for (the LLM engineers' ``interface`` option): ``config``, the whole
#: next configuration (every knob of every group, required); ``changes``, a list of (group, knob, new value);
#: ``decisions``, a list of (group, harder/easier/keep, more/less/same) that :func:`decided_config` turns into moves.
INTERFACES = ("config", "changes", "decisions")
DIFFICULTY_WORDS = ("harder", "easier", "keep")
BUDGET_WORDS = ("more", "less", "same")


class InterfaceOptions(BaseModel):
    """The reply-shape options every LLM engineer has (API, served and in-process alike): ``interface``, the analysis's
    bound and the decisions' step sizes; an engineer class mixes it into its options beside its ``structured`` flag,
    and :meth:`reply_shape` makes a design request into the schema, the conversation and the decision rule."""

    interface: Literal["config", "changes", "decisions"] = Field(
        "config", description="with structured: the reply's shape. config: the whole next configuration, every knob "
        "(a small model tends to copy it back); changes: a list of the settings it changes (group, knob, new value), "
        "an empty list keeping the configuration; decisions: per group it changes, harder/easier/keep and "
        "more/less/same budget, made into knob moves by the task's declarations (docs/engineers.md#interfaces)",
    )
    analysis_chars: int | None = Field(
        None, ge=1, description="with structured: the analysis string's maxLength in the reply schema (null: unbounded; the "
        "in-process engineers' grammar needs a bound and takes 400 then). A local server's grammar enforces it (llama.cpp, "
        "vLLM), so a greedy small model that repeats a sentence stops there instead of running out of max_tokens inside the "
        "string; whether a hosted API accepts maxLength in its strict subset is that service's call",
    )
    decision_step: float = Field(0.1, gt=0, le=1, description="interface decisions: how far harder/easier moves each "
                                 "difficulty knob, as a fraction of its declared range (at least one of its steps)")
    decision_factor: float = Field(1.5, gt=1, le=10, description="interface decisions: more/less multiplies/divides the "
                                   "group's budget share by this (then the shares are renormalised)")
    read_first: bool = Field(False, description="interface decisions: the reply holds every group, in the config's order, "
                             "each with its success rate in percent read off the evidence (success_pct) before its words, "
                             "so a small model decides right after the figure it decides on; the readings are recorded "
                             "beside the decisions")

    @model_validator(mode="after")
    def _interface_is_structured(self) -> "InterfaceOptions":
        if self.interface != "config" and not getattr(self, "structured", False):
            raise ValueError(f"interface: {self.interface} is a structured reply shape; set structured: true (free text "
                             "already asks for only the fields that change)")
        if self.read_first and self.interface != "decisions":
            raise ValueError(f"read_first: the decisions interface's option (each group's reading before its words); "
                             f"interface is {self.interface}")
        return self

    def reply_shape(self, request: Any, analysis_chars: int | None = None) -> tuple[dict[str, Any], list[dict[str, str]], Any]:
        """The whole reply's schema under ``interface``, the request's conversation with its instruction, and the rule that
        makes a ``decisions`` reply a config (:func:`decided_config` bound to the request); ``analysis_chars``: the bound
        to use where the option is null. Raises ValueError for a task the interface cannot serve."""
        schema, instruction = interface_schema(self.interface, request.generator, request.current_config,
                                               self.analysis_chars or analysis_chars, read_first=self.read_first)
        decide = functools.partial(decided_config, generator=request.generator, current=request.current_config,
                                   step=self.decision_step, factor=self.decision_factor)
        return schema, with_instruction(request.messages, instruction), decide


@dataclass
class StructuredReply(EngineerReply):
    """A reply decoded under a schema; ``problem`` says why it holds no proposal (None: it does); ``raw``: the reply
    as decoded, the JSON object ``text`` renders in free-text form."""

    problem: str | None = None
    raw: str | None = None


def _knob_fields(generator: Any) -> dict[str, dict[str, Any]]:
    """Each config field's JSON schema where a knob lives (the group model's, or the config's own)."""
    try:
        schema = generator.config_model.model_json_schema()
    except Exception:  # noqa: BLE001 - a model pydantic cannot express: the declarations alone
        return {}
    defs = schema.get("$defs", {})

    def resolve(node: Any) -> dict[str, Any]:
        for _ in range(8):
            if not isinstance(node, dict):
                return {}
            ref = node.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                node = defs.get(ref.split("/")[-1], {})
                continue
            options = node.get("anyOf")
            if isinstance(options, list):
                node = next((o for o in options if isinstance(o, dict) and o.get("type") != "null"), {})
                continue
            return node
        return {}

    node = resolve(schema)
    table = generator.knob_table
    if table is not None:
        node = resolve(resolve(node.get("properties", {}).get(table)).get("additionalProperties"))
    props = node.get("properties", {})
    return {str(k): resolve(v) for k, v in props.items()} if isinstance(props, dict) else {}


def _knob_schema(knob: Any, field: dict[str, Any]) -> dict[str, Any]:
    low, high = (int(knob.low), int(knob.high)) if knob.integer else (float(knob.low), float(knob.high))
    description = knob.description or str(field.get("description") or field.get("title") or "")
    out: dict[str, Any] = {"type": "integer" if knob.integer else "number", "minimum": low, "maximum": high}
    if knob.share:
        description = (description + "; " if description else "") + "the groups' shares are renormalised to sum to 1"
    if description:
        out["description"] = description
    return out


def _closed(properties: dict[str, Any], description: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": properties, "required": list(properties), "additionalProperties": False}
    if description:
        out["description"] = description
    return out


def config_schema(generator: Any, current: Any = None) -> dict[str, Any]:
    """The JSON schema of the config block: the declared knobs of every group ``current`` holds
    (the task's default config when None), each required, bounded and closed.

    Raises ``ValueError`` naming the task when it declares nothing an engineer could set."""
    fields = _knob_fields(generator)
    # a knob the config model does not hold is not settable (a model that pydantic cannot describe: all declared)
    knobs = [k for k in generator.knobs if not fields or k.name in fields]
    name = getattr(generator, "name", type(generator).__name__)
    if not knobs:
        raise ValueError(f"task {name!r} declares no knobs (Generator.knobs), so a structured reply has nothing to constrain")
    table = generator.knob_table
    if table is None:
        return _closed({k.name: _knob_schema(k, fields.get(k.name, {})) for k in knobs})
    if current is None:
        current = generator.default_config()
    values = generator.knob_values(current)
    groups = list(values) or [g for g in generator.groups() if g]
    if not groups:
        raise ValueError(f"task {name!r}: the current config's {table!r} holds no group to set")

    def group_schema(group: str) -> dict[str, Any]:
        # the declared knobs this group holds (a group model with extra fields, reasoning-gym's levels, holds
        # knobs its JSON schema does not list), else those the config model lists
        held = values.get(group) or {}
        own = [k for k in generator.knobs if k.name in held] or knobs
        return _closed({k.name: _knob_schema(k, fields.get(k.name, {})) for k in own})

    return _closed({table: _closed({g: group_schema(g) for g in groups}, f"one entry per group of {table}")})


#: Fractional digits xgrammar's JSON-schema grammar allows a number with ``minimum`` and ``maximum`` (0.2.x:
#: ``0.``, then at most six digits; no exponent). ``tests/test_structured.py`` checks it against xgrammar itself.
BOUNDED_NUMBER_FRACTION_DIGITS = 6


def _longest_value(node: dict[str, Any]) -> int:
    """Bytes of the longest JSON text the grammar lets ``node`` (a node of :func:`config_schema` or of an interface's
    reply schema: bounded strings, enums, arrays with maxItems, anyOf) take, written without optional whitespace (``", "`` and ``": "`` between items, as xgrammar's
    ``any_whitespace=False``)."""
    kind = node.get("type")
    if kind == "object":
        props = node.get("properties") or {}
        if node.get("additionalProperties") is not False or set(node.get("required") or ()) != set(props):
            raise ValueError("an object that is not closed with every property required has no longest form")
        items = [max(len(json.dumps(k).encode()), len(json.dumps(k, ensure_ascii=False).encode())) + 2 + _longest_value(v)
                 for k, v in props.items()]
        return 2 + sum(items) + 2 * max(0, len(items) - 1)
    if kind in ("integer", "number"):
        low, high = node.get("minimum"), node.get("maximum")
        if low is None or high is None:
            raise ValueError(f"an unbounded {kind} has no longest form")
        if kind == "integer":
            return max(len(str(int(low))), len(str(int(high))))
        whole = len(str(int(max(abs(float(low)), abs(float(high))))))
        return (1 if float(low) < 0 else 0) + whole + 1 + BOUNDED_NUMBER_FRACTION_DIGITS
    if "anyOf" in node:
        return max(_longest_value(option) for option in node["anyOf"])
    if kind == "string":
        if "enum" in node:
            return max(len(json.dumps(v, ensure_ascii=False).encode()) for v in node["enum"])
        if node.get("maxLength") is None:
            raise ValueError("a 'string' value without maxLength has no longest form")
        return 2 + 6 * int(node["maxLength"])  # each character at most a 6-byte escape (\uXXXX)
    if kind == "array":
        if node.get("maxItems") is None:
            raise ValueError("an 'array' without maxItems has no longest form")
        count = int(node["maxItems"])
        return 2 + count * _longest_value(node["items"]) + 2 * max(0, count - 1)
    if kind == "boolean":
        return 5
    raise ValueError(f"a {kind!r} value has no longest form here")


def block_token_limit(schema: dict[str, Any]) -> int:
    """Enough new tokens for any block the grammar of ``schema`` (a :func:`config_schema`) allows: the
    longest such block in bytes (a token the grammar lets through is at least one byte), plus one for
    the end-of-sequence token. A forced block given this many tokens always closes, however many
    groups and knobs the task has; raises ``ValueError`` for a schema with no longest form."""
    return _longest_value(schema) + 1


def analysis_field(analysis_chars: int | None = None) -> dict[str, Any]:
    """The reply's ``analysis`` string, at most ``analysis_chars`` characters (``maxLength``) when given: a bound a
    local server's grammar enforces (llama.cpp, vLLM, xgrammar), so a greedy model that falls into repeating a
    sentence stops there instead of spending ``max_tokens`` inside the string and leaving the JSON unfinished."""
    field: dict[str, Any] = {"type": "string", "description": ANALYSIS_DESCRIPTION}
    if analysis_chars is not None:
        field["maxLength"] = int(analysis_chars)
    return field


def reply_schema(generator: Any, current: Any = None, analysis_chars: int | None = None) -> dict[str, Any]:
    """The whole reply's JSON schema: ``{"analysis": str, "config": <config_schema>}``."""
    return _closed({"analysis": analysis_field(analysis_chars), "config": config_schema(generator, current)})


def change_items(generator: Any, current: Any = None) -> list[dict[str, Any]]:
    """One closed schema per settable (group, knob) of :func:`config_schema`: ``{"group": g, "knob": k, "value": v}``
    with ``v`` bounded as the knob is (``{"knob", "value"}`` for a task without a knob table)."""
    config = config_schema(generator, current)
    table = generator.knob_table
    items = []
    if table is None:
        for knob, node in config["properties"].items():
            items.append(_closed({"knob": {"type": "string", "enum": [knob]}, "value": node}))
        return items
    for group, group_node in config["properties"][table]["properties"].items():
        for knob, node in group_node["properties"].items():
            items.append(_closed({"group": {"type": "string", "enum": [group]}, "knob": {"type": "string", "enum": [knob]},
                                  "value": node}))
    return items


def changes_schema(generator: Any, current: Any = None, analysis_chars: int | None = None) -> dict[str, Any]:
    """The ``changes`` interface's reply schema: ``{"analysis": str, "changes": [{group, knob, value}, ...]}``, each
    change one of :func:`change_items` (a setting the task declares, its value in the knob's bounds); at most one per
    setting, none to keep the configuration. A small model shown a whole configuration tends to copy it; here it
    writes only what it moves."""
    items = change_items(generator, current)
    changes = {"type": "array", "items": {"anyOf": items}, "maxItems": len(items),
               "description": "only the settings you change, each once with its new value; [] keeps the configuration"}
    return _closed({"analysis": analysis_field(analysis_chars), "changes": changes})


def _decision_fields(generator: Any) -> dict[str, dict[str, Any]]:
    """The words a decision may hold for this task: ``difficulty`` when a knob is declared harder up or down (and is
    not a share), ``budget`` when a knob is a share of a knob table's groups."""
    fields: dict[str, dict[str, Any]] = {}
    if any(k.harder != "none" and not k.share for k in generator.knobs):
        fields["difficulty"] = {"type": "string", "enum": list(DIFFICULTY_WORDS),
                                "description": "harder or easier instances for this group, or keep"}
    if generator.knob_table is not None and any(k.share for k in generator.knobs):
        fields["budget"] = {"type": "string", "enum": list(BUDGET_WORDS),
                            "description": "more or less of the training budget for this group, or the same"}
    return fields


def decisions_schema(generator: Any, current: Any = None, analysis_chars: int | None = None, *,
                     read_first: bool = False) -> dict[str, Any]:
    """The ``decisions`` interface's reply schema: ``{"analysis": str, "decisions": [{"group": g, "difficulty":
    harder|easier|keep, "budget": more|less|same}, ...]}`` over the groups :func:`config_schema` lists (a task without
    a knob table: at most one decision, without ``group`` and ``budget``). Words a small model can choose among;
    :func:`decided_config` makes them knob moves. ``read_first``: ``"decisions"`` is an object holding every group in
    the config's order, each ``{"success_pct": 0-100, "difficulty": ..., "budget": ...}`` (a task without a knob table:
    one such object), the reading of the evidence before the words. Raises ``ValueError`` when the task declares no
    difficulty or share knob (nothing a word could move)."""
    fields = _decision_fields(generator)
    name = getattr(generator, "name", type(generator).__name__)
    if not fields:
        raise ValueError(f"task {name!r} declares no difficulty knob (harder up or down) and no share, so a decision "
                         "has nothing to move")
    table = generator.knob_table
    groups = list(config_schema(generator, current)["properties"][table]["properties"]) if table is not None else []
    if read_first:
        read = {"success_pct": {"type": "integer", "minimum": 0, "maximum": 100,
                                "description": "this group's success rate in percent, as the evidence shows it"}}
        decided = (_closed({g: _closed({**read, **fields}) for g in groups},
                           "every group in order: its success rate read off the evidence, then its decision") if groups
                   else _closed({**read, **fields}, "the success rate read off the evidence, then the decision"))
        return _closed({"analysis": analysis_field(analysis_chars), "decisions": decided})
    if table is None:
        item, most = _closed(fields), 1
    else:
        item, most = _closed({"group": {"type": "string", "enum": groups}, **fields}), len(groups)
    decisions = {"type": "array", "items": item, "maxItems": most,
                 "description": "only the groups you change, each once; [] keeps the configuration"}
    return _closed({"analysis": analysis_field(analysis_chars), "decisions": decisions})


def decided_config(decisions: Any, generator: Any, current: Any, *, step: float = 0.1, factor: float = 1.5,
                   ) -> tuple[dict[str, Any] | None, str | None, list[str]]:
    """The partial config a ``decisions`` list stands for, the problem (None: usable), and one line per decision.

    ``harder``/``easier`` moves each of the group's difficulty knobs ``step`` of its declared range (at least one
    of its steps) toward its hard or easy end; ``more``/``less`` multiplies or divides the group's share by
    ``factor`` (the projection renormalises the shares); ``keep``/``same`` and groups left out move nothing."""
    from envengineer.components.knobs import WHOLE, snap, toward

    table = generator.knob_table
    if isinstance(decisions, dict):  # read_first: every group (or the one decision) with its reading first
        if table is None:
            decisions = [decisions]
        else:
            for group, decision in decisions.items():
                if not isinstance(decision, dict):
                    return None, f"the decision of {group} must be an object", []
            decisions = [{"group": group, **decision} for group, decision in decisions.items()]
    if not isinstance(decisions, list):
        return None, "the structured reply's \"decisions\" must be a list", []
    rows = generator.knob_rows(current)
    knobs = {k.name: k for k in generator.knobs}
    values: dict[str, dict[str, Any]] = {}
    lines: list[str] = []
    for i, decision in enumerate(decisions):
        if not isinstance(decision, dict):
            return None, f"decision {i + 1} must be an object", []
        group = decision.get("group") if table is not None else WHOLE
        if group not in rows:
            return None, f"decision {i + 1} names no group of the configuration ({', '.join(rows)})", []
        if group in values:
            return None, f"the structured reply decides on {group} twice (write each group once)", []
        difficulty, budget = decision.get("difficulty", "keep"), decision.get("budget", "same")
        if difficulty not in DIFFICULTY_WORDS or budget not in BUDGET_WORDS:
            return None, f"decision {i + 1}: difficulty is one of {DIFFICULTY_WORDS}, budget one of {BUDGET_WORDS}", []
        moved: dict[str, Any] = {}
        for name, value in rows[group].items():
            knob = knobs.get(name)
            if knob is None or not isinstance(value, (int, float)) or isinstance(value, bool):
                continue
            if knob.share and budget != "same":
                moved[name] = snap(knob, float(value) * (factor if budget == "more" else 1 / factor))
            elif not knob.share and knob.harder != "none" and difficulty != "keep":
                moved[name] = toward(knob, float(value), difficulty == "harder", max(step * (knob.high - knob.low), knob.step))
        values[group] = moved
        read = f" (read {decision['success_pct']}%)" if decision.get("success_pct") is not None else ""
        lines.append(f"{group}{read}: {difficulty}, budget {budget}" if table is not None else f"{difficulty}{read}")
    proposal = generator.knob_proposal({g: v for g, v in values.items() if v})
    return proposal, None, lines


def config_moves(generator: Any, current: Any, proposed: Any) -> dict[str, dict[str, str]]:
    """What a proposal moved, per group, in the ``decisions`` interface's words (whatever interface wrote it):
    ``difficulty`` harder / easier / keep (the group's difficulty knobs' moves, each as a share of its declared range
    and signed by its ``harder`` direction, summed) and ``budget`` more / less / same (its share knob), each present
    when the task declares such a knob; a task without a knob table is one group, ``all``. The inverse of
    :func:`decided_config`, for telling a design from a copy of one word (every group harder, budgets untouched)."""
    from envengineer.components.knobs import WHOLE

    fields = _decision_fields(generator)
    before, after = generator.knob_rows(current), generator.knob_rows(proposed)
    knobs = {k.name: k for k in generator.knobs}
    out: dict[str, dict[str, str]] = {}
    for group, values in before.items():
        difficulty = budget = 0.0
        for name, value in values.items():
            knob, new = knobs.get(name), (after.get(group) or {}).get(name)
            if knob is None or not isinstance(value, (int, float)) or not isinstance(new, (int, float)):
                continue
            delta = (float(new) - float(value)) / ((knob.high - knob.low) or 1.0)
            if knob.share:
                budget += delta
            elif knob.harder != "none":
                difficulty += delta if knob.harder == "up" else -delta
        moved: dict[str, str] = {}
        if "difficulty" in fields:
            moved["difficulty"] = "harder" if difficulty > 1e-9 else "easier" if difficulty < -1e-9 else "keep"
        if "budget" in fields:
            moved["budget"] = "more" if budget > 1e-9 else "less" if budget < -1e-9 else "same"
        out["all" if group == WHOLE else str(group)] = moved
    return out


def interface_schema(interface: str, generator: Any, current: Any = None, analysis_chars: int | None = None, *,
                     read_first: bool = False) -> tuple[dict[str, Any], str]:
    """The reply schema and the instruction of ``interface`` (:data:`INTERFACES`); ``analysis_chars``: the
    analysis's ``maxLength`` (None: unbounded); ``read_first``: the decisions' form with each group's reading first."""
    if interface == "changes":
        return changes_schema(generator, current, analysis_chars), CHANGES_INSTRUCTION
    if interface == "decisions":
        return (decisions_schema(generator, current, analysis_chars, read_first=read_first),
                DECISIONS_READ_INSTRUCTION if read_first else DECISIONS_INSTRUCTION)
    if interface == "config":
        return reply_schema(generator, current, analysis_chars), JSON_INSTRUCTION
    raise ValueError(f"unknown interface {interface!r}; known: {', '.join(INTERFACES)}")


def _changes_config(changes: Any, table: str | None) -> tuple[dict[str, Any] | None, str | None]:
    """The partial config a ``changes`` list stands for, and the problem (None: usable)."""
    if not isinstance(changes, list):
        return None, "the structured reply's \"changes\" must be a list"
    out: dict[str, Any] = {}
    seen: set[tuple[str, str]] = set()
    for i, change in enumerate(changes):
        if not isinstance(change, dict) or not isinstance(change.get("knob"), str) or "value" not in change:
            return None, f"change {i + 1} must be an object with \"knob\" and \"value\""
        group = change.get("group")
        if (table is None) != (group is None) or (group is not None and not isinstance(group, str)):
            return None, (f"change {i + 1} must name its group" if table is not None
                          else f"change {i + 1} names a group, but the task has none")
        key = (group or "", change["knob"])
        if key in seen:
            where = f"{group}.{change['knob']}" if group is not None else change["knob"]
            return None, f"the structured reply changes {where} twice (write each setting once)"
        seen.add(key)
        target = out.setdefault(table, {}).setdefault(group, {}) if table is not None else out
        target[change["knob"]] = change["value"]
    return out, None


def _fence(text: str) -> str:
    """A backtick fence longer than any run of backticks in ``text`` (so the analysis cannot close it)."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _without_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


class _RepeatedKey(Exception):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are unique (json.loads would keep a repeated key's last value silently)."""
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _RepeatedKey(f"the key {key!r} appears twice in one object (write each field once)")
        out[key] = value
    return out


def reply_text(raw: str, table: str | None = None, decide: Any = None) -> tuple[str, str | None]:
    """A whole-JSON reply as the free-text form the design step parses, and the problem (None: usable).

    ``{"analysis": a, "config": c}`` becomes ``a``, then a fenced block holding ``c`` as JSON (YAML
    parses it; nulls, "no value" in a nullable field, are dropped); ``{"analysis": a, "changes": [...]}``
    (the ``changes`` interface; ``table``: the task's knob table) becomes ``a`` and a block holding the
    changed settings alone; ``{"analysis": a, "decisions": [...]}`` becomes ``a``, the decisions in words, and the
    block ``decide(decisions)`` returns (``(config, problem, lines)``, :func:`decided_config`). A reply that is not
    such an object keeps its raw text and gets the reason."""
    if not isinstance(raw, str) or not raw.strip():
        return raw or "", "the structured reply was empty"
    if len(raw) > MAX_REPLY_CHARS:
        return raw, f"the structured reply is too long ({len(raw)} characters, limit {MAX_REPLY_CHARS})"
    try:
        data = json.loads(raw, object_pairs_hook=_unique_keys)
    except RecursionError:
        return raw, "the structured reply is nested too deeply"
    except _RepeatedKey as exc:
        return raw, f"the structured reply is not usable JSON: {exc}"
    except ValueError as exc:
        return raw, f"the structured reply is not valid JSON ({one_line(str(exc), 120)}; cut off by max_tokens?)"
    said = ""
    if isinstance(data, dict) and "decisions" in data and "config" not in data and decide is not None:
        config, problem, lines = decide(data["decisions"])
        if problem:
            return raw, problem
        said = "\n\nDecisions: " + ("; ".join(lines) if lines else "none (keep the configuration)")
    elif isinstance(data, dict) and "changes" in data and "config" not in data:
        config, problem = _changes_config(data["changes"], table)
        if problem:
            return raw, problem
    elif not isinstance(data, dict) or not isinstance(data.get("config"), dict):
        return raw, "the structured reply must be a JSON object with a \"config\" object (or a \"changes\" list)"
    else:
        config = data["config"]
    analysis = data.get("analysis")
    analysis = (analysis.strip() if isinstance(analysis, str) else "") + said
    try:
        block = json.dumps(_without_nulls(config), indent=1, ensure_ascii=False)
    except (RecursionError, ValueError):
        return raw, "the structured reply's config is nested too deeply"
    fence = _fence(analysis)
    return f"{analysis}\n\n{fence}yaml\n{block}\n{fence}\n".lstrip(), None


def structured_reply(reply: EngineerReply, table: str | None = None, decide: Any = None) -> StructuredReply:
    """``reply`` (its text a whole-JSON reply) in the free-text form, with the problem when unusable (``table``: the
    task's knob table, which a ``changes`` reply's groups belong to; ``decide``: what makes a ``decisions`` reply a
    config, :func:`decided_config` bound to the request)."""
    text, problem = reply_text(reply.text, table, decide)
    return StructuredReply(
        text=text, usage=reply.usage, latency_s=reply.latency_s, model=reply.model, attempts=reply.attempts,
        proposal=None, calls=reply.calls, problem=problem, raw=reply.text,
    )


def with_instruction(messages: Sequence[Mapping[str, str]], instruction: str = JSON_INSTRUCTION) -> list[dict[str, str]]:
    """The conversation with ``instruction`` (default :data:`JSON_INSTRUCTION`) appended to its last user turn (a
    conversation without one gets it as a user turn of its own)."""
    out = [dict(m) for m in messages]
    for m in reversed(out):
        if m.get("role") == "user":
            m["content"] = f"{m['content']}\n\n{instruction}"
            return out
    return [*out, {"role": "user", "content": instruction}]
