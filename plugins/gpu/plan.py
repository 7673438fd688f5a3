"""``envengineer plan``: a run's GPU memory per GPU, estimated before anything is launched.

The core knows no trainer and no policy: each answers ``memory_plan(model, gpu_bytes)`` with a
:class:`MemoryEstimate` (rows grouped in phases, what it leaves out, and candidate fixes as dotted
overrides). The core adds them up per phase, decides whether the largest phase fits the GPU, and for a
run that does not fit re-plans each candidate fix (alone, then together) and names the ones that fit.
The convention is accelerate's ``estimate-memory``: parameters, gradients and optimizer state from the
model's shape at the dtypes used, here with the run's activations, logits and KV cache added; the
estimate states what it leaves out.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envengineer.components.model_shape import GB, ModelShape, model_shape
from envengineer.components.resources import LEAVES_OUT, Fix, MemoryEstimate, MemoryRow

@dataclass
class MemoryPlan:
    model: ModelShape
    gpu_bytes: float
    parts: dict[str, MemoryEstimate]  # "trainer NAME" / "policy NAME" -> its estimate
    fixes: list[Fix] = field(default_factory=list)  # fixes that were checked to fit (filled by plan_run)

    @property
    def rows(self) -> list[MemoryRow]:
        return [row for part in self.parts.values() for row in part.rows]

    def phases(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for row in self.rows:
            totals[row.phase] = totals.get(row.phase, 0.0) + row.bytes
        return totals

    @property
    def peak(self) -> tuple[str, float]:
        phases = self.phases()
        if not phases:
            return "", 0.0
        name = max(phases, key=lambda p: phases[p])
        return name, phases[name]

    @property
    def problems(self) -> list[str]:
        return [p for part in self.parts.values() for p in part.problems]

    @property
    def fits(self) -> bool:
        return self.peak[1] <= self.gpu_bytes and not self.problems

    def candidate_fixes(self) -> list[Fix]:
        return [fix for part in self.parts.values() for fix in part.fixes]

    def leaves_out(self) -> list[str]:
        return list(dict.fromkeys([*LEAVES_OUT, *(x for part in self.parts.values() for x in part.leaves_out)]))

    def to_dict(self) -> dict[str, Any]:
        phase, peak = self.peak
        return {
            "model": self.model.name, "model_source": self.model.source, "parameters": self.model.parameters,
            "gpu_gb": round(self.gpu_bytes / GB, 2), "fits": self.fits, "peak_phase": phase, "peak_gb": round(peak / GB, 2),
            "problems": self.problems,
            "phases": {name: round(size / GB, 2) for name, size in self.phases().items()},
            "rows": [{"phase": r.phase, "item": r.item, "gb": round(r.bytes / GB, 3), "how": r.how} for r in self.rows],
            "fixes": [{"overrides": list(f.overrides), "what": f.what} for f in self.fixes],
            "leaves_out": self.leaves_out(),
        }


def estimate_run(run: Any, gpu_memory_gb: float) -> MemoryPlan:
    """The memory plan of a resolved run (:func:`envengineer.loop.runconfig.resolve`), per GPU of ``gpu_memory_gb``."""
    from envengineer.errors import ConfigError

    path = getattr(run.policy.options, "path", None)
    if not path:
        raise ConfigError(f"policy.{run.policy.name}: no model path to plan for (the plan needs the model's config.json or a known name)")
    model = model_shape(str(path), where=f"policy.{run.policy.name}.path")
    gpu = gpu_memory_gb * GB
    parts: dict[str, MemoryEstimate] = {}
    trainer = run.trainer.memory_plan(model, gpu)
    if trainer is not None:
        parts[f"trainer {run.trainer.name}"] = trainer
    policy = run.policy.memory_plan(model, gpu, prompt_tokens=trainer.prompt_tokens if trainer else None)
    if policy is not None:
        parts[f"policy {run.policy.name}"] = policy
    if not parts:
        raise ConfigError(f"neither trainer {run.trainer.name} nor policy {run.policy.name} estimates its GPU memory")
    return MemoryPlan(model, gpu, parts)


def plan_run(config: str | Path, overrides: list[str] | tuple[str, ...], registry: Any, gpu_memory_gb: float) -> MemoryPlan:
    """The plan of a run config with ``overrides``; when it does not fit, the candidate fixes that make it fit,
    each checked by planning the config again with it (alone first, then the candidates together, in order)."""
    plan = _plan(config, overrides, registry, gpu_memory_gb)
    if plan.fits:
        return plan
    candidates = plan.candidate_fixes()
    fitting: list[Fix] = []
    for fix in candidates:
        if _fits(config, [*overrides, *fix.overrides], registry, gpu_memory_gb):
            fitting.append(fix)
    if not fitting:
        chosen: list[Fix] = []
        for fix in candidates:  # the candidates together, in order, until it fits ...
            chosen.append(fix)
            if _fits(config, [*overrides, *_joined(chosen)], registry, gpu_memory_gb):
                break
        else:
            chosen = []
        for fix in reversed(chosen[:-1]):  # ... then without each one it does not need
            rest = [f for f in chosen if f is not fix]
            if _fits(config, [*overrides, *_joined(rest)], registry, gpu_memory_gb):
                chosen = rest
        if chosen:
            fitting.append(Fix(tuple(_joined(chosen)), "; ".join(f.what for f in chosen)))
    plan.fixes = fitting
    return plan


def _joined(fixes: list[Fix]) -> list[str]:
    """The fixes' overrides, a later one replacing an earlier one's value for the same key."""
    joined: dict[str, str] = {}
    for fix in fixes:
        for item in fix.overrides:
            joined[item.split("=", 1)[0]] = item
    return list(joined.values())


def _plan(config: str | Path, overrides: list[str] | tuple[str, ...], registry: Any, gpu_memory_gb: float) -> MemoryPlan:
    from envengineer.loop.runconfig import load_run_config, resolve

    return estimate_run(resolve(load_run_config(config, overrides, registry), registry), gpu_memory_gb)


def _fits(config: str | Path, overrides: list[str], registry: Any, gpu_memory_gb: float) -> bool:
    from envengineer.errors import EnvEngineerError

    try:
        return _plan(config, overrides, registry, gpu_memory_gb).fits
    except EnvEngineerError:  # a fix the config's own checks refuse (e.g. a batch that no longer divides)
        return False


def gb(size: float) -> str:
    return f"{size / GB:.1f}"


def print_plan(plan: MemoryPlan, console: Any, *, command: str = "") -> None:
    """``command``: the plan's command line without its GPU size, to show a fix applied to it."""
    """The plan as rich tables: the rows per phase, each phase's total against the GPU, the verdict and fixes."""
    from rich.markup import escape
    from rich.table import Table

    model = plan.model
    console.print(f"[bold]model[/]: {escape(model.name)}, {model.parameters / 1e9:.2f} B parameters, {model.num_layers} layers, "
                  f"hidden {model.hidden_size}, {model.num_heads} heads, {model.num_kv_heads} KV heads of {model.head_dim}, "
                  f"intermediate {model.intermediate_size}, vocab {model.vocab_size:,}"
                  f"{', tied embeddings' if model.tied_embeddings else ''} ({escape(model.source)})", highlight=False, soft_wrap=True)
    table = Table(title=f"GPU memory per GPU (GB of 10^9 bytes), GPU of {plan.gpu_bytes / GB:g} GB", title_justify="left")
    for column, justify in (("phase", "left"), ("what", "left"), ("GB", "right"), ("how", "left")):
        table.add_column(column, justify=justify)  # type: ignore[arg-type]
    for part, estimate in plan.parts.items():
        for row in estimate.rows:
            table.add_row(escape(row.phase), escape(f"{row.item}"), gb(row.bytes), escape(row.how))
    console.print(table)
    peak_phase, peak = plan.peak
    totals = Table(title="phases (what is on one GPU at once)", title_justify="left")
    for column, justify in (("phase", "left"), ("total GB", "right"), ("fits", "left")):
        totals.add_column(column, justify=justify)  # type: ignore[arg-type]
    for name, size in plan.phases().items():
        totals.add_row(escape(name), gb(size), "yes" if size <= plan.gpu_bytes else "[bold red]no[/]")
    console.print(totals)
    for part in plan.parts.values():
        for note in part.notes:
            console.print(f"note: {escape(note)}", highlight=False, soft_wrap=True)
    for problem in plan.problems:
        console.print(f"[bold red]problem:[/] {escape(problem)}", highlight=False, soft_wrap=True)
    verdict = "[bold green]fits[/]" if plan.fits else "[bold red]does not fit[/]"
    console.print(f"{verdict}: the largest phase, {escape(peak_phase)}, needs {gb(peak)} GB of {plan.gpu_bytes / GB:g} GB", highlight=False)
    if not plan.fits:
        if plan.fixes:
            console.print("[bold]these overrides make it fit[/] (each checked by planning again):")
            for fix in plan.fixes:
                console.print(f"  {escape(' '.join(fix.overrides))}    # {escape(fix.what)}", highlight=False, soft_wrap=True)
            if command:
                fix = plan.fixes[0].overrides
                keys = {item.split("=", 1)[0] for item in fix}
                given = [word for word in command.split() if word.split("=", 1)[0] not in keys]  # the fix replaces a value given
                console.print(f"  e.g. {escape(' '.join([*given, *fix]))} --gpu-memory-gb {plan.gpu_bytes / GB:g}", highlight=False, soft_wrap=True)
        else:
            tried = "; ".join(" ".join(f.overrides) for f in plan.candidate_fixes()) or "none"
            console.print(f"no override tried makes it fit (tried: {escape(tried)}); a GPU with more memory or more GPUs are needed",
                          highlight=False, soft_wrap=True)
    console.print("[bold]left out of the estimate[/]: " + escape("; ".join(plan.leaves_out())), highlight=False, soft_wrap=True)
