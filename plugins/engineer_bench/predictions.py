"""Self-prediction (``--predict``): an engineer with a model asked to predict the checkpoint's sampled success per
group, each prediction scored by Brier against what the fixed reference then measured."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from envengineer.plugins.engineer_bench.recorded import ScoreSettings, derived_seed
from envengineer.plugins.engineer_bench.statistics import cluster_bootstrap

PREDICT_INSTRUCTION = (
    "Before you design anything, predict how the current policy will do. For each group listed below, give the share "
    "of its answers that will be right when the policy samples {draws} answers per fresh training instance of the "
    "current config, at the training temperature {temperature}: a number from 0 (never right) to 1 (always right). "
    "Groups: {groups}. Reply with one JSON object mapping every group to its number, in a fenced block:\n\n"
    "```yaml\n{example}\n```"
)


def prediction_schema(groups: Sequence[str]) -> dict[str, Any]:
    """The self-prediction's JSON schema: every group, a number in [0, 1] (closed, every group required)."""
    return {"type": "object", "properties": {g: {"type": "number", "minimum": 0, "maximum": 1} for g in groups},
            "required": list(groups), "additionalProperties": False}


def prediction_messages(messages: Sequence[Mapping[str, str]], groups: Sequence[str], *, draws: int, temperature: float) -> list[dict[str, str]]:
    """The design request's conversation with the self-prediction's question appended to its last user turn."""
    from envengineer.design.structured import with_instruction

    # the format without numbers: an example's values are copied by a small model (17 of 24 SmolLM2 predictions were)
    example = "{" + ", ".join(f'"{g}": <number>' for g in groups[:2]) + (", ..." if len(groups) > 2 else "") + "}"
    return with_instruction(messages, PREDICT_INSTRUCTION.format(draws=draws, temperature=temperature, groups=", ".join(groups), example=example))


def parse_prediction(text: str, groups: Sequence[str]) -> tuple[dict[str, float] | None, str]:
    """The per-group numbers of a self-prediction reply (its last fenced block, else the whole text, as JSON or YAML),
    or None and why: every group must be there with a number in [0, 1] (untrusted input: nothing else is read)."""
    from envengineer.design.proposals import UnusableProposal, extract_yaml_block, parse_proposal

    if not isinstance(text, str) or not text.strip():
        return None, "empty reply"
    try:
        block = extract_yaml_block(text)
    except UnusableProposal:  # no fenced block: the whole reply (an API's JSON answer)
        block = text
    try:
        data = parse_proposal(block)  # the design step's strict loader and size limit
    except UnusableProposal as exc:
        return None, str(exc)
    missing = [g for g in groups if g not in data]
    if missing:
        return None, f"no number for {', '.join(missing[:5])}"
    out = {}
    for g in groups:
        value = data[g]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= float(value) <= 1 or value != value:
            return None, f"{g}: {value!r} is not a number in [0, 1]"
        out[g] = float(value)
    return out, ""


def brier(predicted: Mapping[str, float], measured: Mapping[str, float]) -> float:
    """Mean squared difference over the groups measured."""
    groups = [g for g in measured if g in predicted]
    return sum((predicted[g] - measured[g]) ** 2 for g in groups) / len(groups)


def predict_round(instance: Any, request: Any, reference: Mapping[str, Any], settings: ScoreSettings, temperature: float,
                  where: Mapping[str, Any], label: str) -> list[dict[str, Any]]:
    """``settings.predictions`` self-predictions of one engineer on one round, each scored by Brier against the
    reference's measured success per group (the round's checkpoint sampled ``draws`` times per fresh instance of the
    round's config at the trainer's temperature); beside it the Brier of two engineers with no self-knowledge: 0.5
    everywhere, and a copy of the round's evidence (the training signal's success per group, where it has the group)."""
    from envengineer.loop.signal import group_success

    measured = {g: float(cell["success"]) for g, cell in reference["by_group"].items()}
    groups = list(measured)
    evidence = {g: float(cell["success"]) for g, cell in group_success(request.evidence.signal).items()
                if g in measured and isinstance(cell, Mapping) and cell.get("success") is not None}
    messages = prediction_messages(request.messages, groups, draws=settings.draws, temperature=temperature)
    schema = prediction_schema(groups)
    out = []
    for index in range(settings.predictions):
        asked = request if index == 0 else replace(request, seed=derived_seed("engineer-score", "prediction", request.seed, index))
        line: dict[str, Any] = {**where, "engineer": label, "prediction": index, "measured": measured,
                                "instances": {g: round(cell["share"] * reference["instances"]) for g, cell in reference["by_group"].items()},
                                "brier_half": round(brier({g: 0.5 for g in groups}, measured), 6),
                                "brier_evidence": round(brier(evidence, {g: measured[g] for g in evidence}), 6) if evidence else None}
        try:
            reply = instance.ask(asked, messages, schema)
        except Exception as exc:  # noqa: BLE001 - an engineer call that fails is recorded, not fatal
            reply, line["error"] = None, f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        if reply is None and "error" not in line:
            return []  # an engineer without a model: nothing to ask
        predicted, problem = parse_prediction(getattr(reply, "text", "") or "", groups) if reply is not None else (None, line["error"])
        line.update(predicted=predicted, problem=problem or None, reply=(getattr(reply, "text", "") or "")[:2000] if reply is not None else None,
                    brier=round(brier(predicted, measured), 6) if predicted else None)
        if predicted and evidence:
            line["brier_evidence_same_groups"] = round(brier({g: predicted[g] for g in evidence}, {g: measured[g] for g in evidence}), 6)
        out.append(line)
    return out


def summarize_predictions(lines: Sequence[Mapping[str, Any]], *, seed: int = 0) -> dict[str, Any]:
    """Per engineer: predictions asked, usable, the mean Brier (cluster-bootstrap interval over rounds) and the
    no-knowledge references' mean Brier on the same rounds."""
    out: dict[str, Any] = {}
    for engineer in dict.fromkeys(l["engineer"] for l in lines):
        mine = [l for l in lines if l["engineer"] == engineer]
        usable = [l for l in mine if l.get("brier") is not None]
        rounds: dict[tuple[str, int], list[float]] = {}
        for line in usable:
            rounds.setdefault((line["run"], line["round"]), []).append(float(line["brier"]))
        interval = cluster_bootstrap(list(rounds.values()), seed=seed) if rounds else None
        evidence = [float(l["brier_evidence"]) for l in mine if l.get("brier_evidence") is not None]
        out[engineer] = {
            "asked": len(mine), "usable": len(usable),
            "brier": {"mean": round(sum(float(l["brier"]) for l in usable) / len(usable), 6) if usable else None,
                      "ci95": None if interval is None else [round(x, 6) for x in interval]},
            "brier_half": round(sum(float(l["brier_half"]) for l in mine) / len(mine), 6),
            "brier_evidence": round(sum(evidence) / len(evidence), 6) if evidence else None,
            "distinct": len({json.dumps(l["predicted"], sort_keys=True) for l in usable}),
            "problems": sorted({str(l["problem"]) for l in mine if l.get("problem")})[:5],
        }
    return out
