"""The prompts of a design step: the analysis prompt (context, configuration, the task's brief),
the summary prompt (the S note), their templates, the request an engineer reads, and the factual
note written when no engineer note can be had."""

from __future__ import annotations

import functools
import string
from pathlib import Path
from typing import Any

import yaml

from envengineer.design.contract import DesignOutcome, DesignRequest
from envengineer.design.evidence import Evidence

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
    """The analysis prompt. Rounds are numbered from 0, as the run's ``round-NN`` folders are:
    ``$round`` is the round just finished, ``$next_round`` the one being designed, ``$last_round``
    the run's last (``$rounds_total`` - 1)."""
    return fill_prompt(
        template if template is not None else load_prompt("analysis"),
        context=context.rstrip(),
        config=_config_yaml(config),
        round=evidence.round,
        next_round=evidence.round + 1,
        rounds_total=evidence.rounds_total,
        last_round=evidence.rounds_total - 1,
        task=evidence.task.name,
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
    changes = "\n".join(f"- {c.field}: {c.proposed!r} -> {c.applied!r} ({c.reason})" for c in (outcome.projection.changes if outcome.projection is not None else ()))
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
        round=evidence.round,
        next_round=evidence.round + 1,
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
    engineer: Any = None,
    run_dir: str | None = None,
) -> DesignRequest:
    """Compose the context, fill the analysis prompt, and wrap it all in a :class:`DesignRequest`.

    With an ``engineer`` that sets ``max_prompt_tokens``, the context is shortened to fit
    (:func:`envengineer.design.budget.fit_prompt`; ``request.budget`` records the cuts); a budget
    the prompt cannot fit raises :class:`~envengineer.errors.ConfigError` naming the option."""
    from envengineer.design.context import analysis_template, compose_context, create_module, ordered_modules

    generator = evidence.task
    if current_config is None:
        current_config = generator.config_model.model_validate(evidence.config)
    context = compose_context(registry, spec, evidence)
    template = load_prompt(analysis_template(spec), prompt_path)
    prompt = analysis_prompt(evidence, context, current_config, template)
    budget = None
    limit = engineer.max_prompt_tokens if engineer is not None else None
    if limit is not None:
        from envengineer.design.budget import fit_prompt

        paths = DesignRequest(evidence=evidence, context=context, prompt=prompt, current_config=current_config, generator=generator,
                              policy_path=policy_path, base_policy_path=base_policy_path, chat_template_kwargs=chat_template_kwargs, seed=seed)
        counter, count = engineer.prompt_token_counter(paths)
        resolved = ordered_modules(registry, spec)
        context, prompt, record = fit_prompt(
            resolved, functools.partial(create_module, registry), evidence,
            lambda text: analysis_prompt(evidence, text, current_config, template), limit, count, counter,
            where=f"engineer.{engineer.name}.max_prompt_tokens",
        )
        budget = record.to_dict()
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
        budget=budget,
        run_dir=run_dir,
    )


def factual_note(request: DesignRequest, outcome: DesignOutcome) -> str:
    """A templated S note (baselines, and LLM engineers whose transport failed)."""
    overall = request.evidence.report.get("overall", {})
    valid, optimal = overall.get("valid_rate"), overall.get("optimal_rate")
    parts = [f"Round {request.evidence.round}: validation valid rate {_pct(valid)}, optimal rate {_pct(optimal)}."]
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
        n = len(outcome.projection.accepted) if outcome.projection is not None else 0
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
