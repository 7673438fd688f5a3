"""Offline replay: a design step re-run on a recorded run directory with any engineer
(``envengineer propose``) and the context it would see (``envengineer context``).

The run's ``run.yaml`` is read once (:func:`run_config`) and handed down to what needs its sections."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from envengineer.design.contract import DesignOutcome, DesignRequest
from envengineer.design.step import design
from envengineer.design.prompts import build_request
from envengineer.store.rundir import RunDir


def run_config(run_dir: Path) -> dict[str, Any]:
    """The run config ``run_dir``'s ``run.yaml`` records ({} when it holds no mapping)."""
    from envengineer.fileio import read_yaml

    data = read_yaml(RunDir(run_dir).run_yaml)
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
    return run_config(run_dir).get("context") or None


def engineer_section(run: dict[str, Any], name: str | None, config_file: Path | None) -> tuple[str, dict[str, Any]]:
    """The engineer's name and options: ``--engineer``/``--engineer-config`` or the ``engineer:`` section of
    ``run`` (a recorded run's config, :func:`run_config`).

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
        section = dict(run.get("engineer") or {})
    chosen = name or section.get("name")
    if not chosen:
        raise ConfigError("engineer: no --engineer given and the run config names none")
    section.pop("name", None)
    return chosen, section


def offline_request(registry: Any, run_dir: Path, round: int, instance: Any, run: dict[str, Any]) -> DesignRequest:
    """The request the loop's design step built after recorded round ``round``, for the engineer ``instance``
    (``run``: the run's config, :func:`run_config`).

    The checkpoint and base engineers get the models the run itself used: the round's
    trained checkpoint and the base policy its ``pretrain`` step recorded; the analysis
    prompt is the run's own ``design.prompt_file`` when it set one."""
    from envengineer.design.evidence import load_evidence
    from envengineer.loop.steps import round_seed

    run_dir = Path(run_dir)
    evidence = load_evidence(run_dir, round, registry)
    records = RunDir(run_dir)
    checkpoint, base = records.checkpoint(round), records.base_policy()
    section = run.get("design")
    prompt_file = section.get("prompt_file") if isinstance(section, dict) else None
    return build_request(
        evidence,
        registry,
        run.get("context") or None,
        policy_path=str(checkpoint),  # even when gone: the engineer's error then names the path
        base_policy_path=str(base) if base is not None else None,
        prompt_path=prompt_file if isinstance(prompt_file, str) else None,
        seed=round_seed(int(run.get("seed") or 0), round),  # the seed the loop's design step had
        chat_template_kwargs=policy.get("chat_template_kwargs") if isinstance(policy := run.get("policy"), dict) else None,
        engineer=instance,
        run_dir=str(run_dir),
    )


def propose_offline(registry: Any, run_dir: Path, round: int, engineer: str | None, config_file: Path | None, *, out_dir: Path | None = None, reask: int = 1) -> tuple[DesignRequest, DesignOutcome]:
    """Run an engineer on a recorded round's evidence, without training (``envengineer propose``):
    :func:`offline_request`, then the loop's design step."""
    run_dir = Path(run_dir)
    run = run_config(run_dir)
    name, options = engineer_section(run, engineer, config_file)
    instance = registry.create("engineer", name, options, where=f"engineer.{name}")
    request = offline_request(registry, run_dir, round, instance, run)
    return request, design(instance, request, out_dir=out_dir, reask=reask)
