"""A context budget: the most prompt tokens an engineer reads, and the cuts that make a prompt fit.

An engineer whose options derive from
:class:`~envengineer.components.prompt_budget.PromptBudgetOptions` may set ``max_prompt_tokens``
(default None: no budget, the prompt is exactly what it always was). With a budget,
:func:`fit_prompt` renders the analysis prompt, counts it with the engineer's counter
(:meth:`envengineer.components.Engineer.prompt_token_counter`: the model's own tokenizer for
the checkpoint/base engineers, :func:`~envengineer.components.prompt_budget.estimate_tokens` otherwise) and, while it is too long,
applies cuts one at a time in a fixed order:

1. ``history`` — each context module's history cuts (H: fewer rounds in full, oldest first);
2. ``rows`` — fewer rows (F: fewer failing examples, the last picked first);
3. ``compact`` — compact tables (F and T without the training-signal column and tables);
4. ``drop`` — whole sections that are not essential, last in prompt order first (V6: T, S, H,
   G; F is never dropped).

Stages 1–3 come from the modules themselves (:meth:`ContextModule.budget_cuts`), in prompt
order within a stage; stage 4 is the core's. Every cut is kept (they accumulate), a note naming
them ends the context, and the record (:class:`BudgetRecord`) goes to the design step's
``engineer/budget.json``. A prompt that does not fit after the last cut is an error naming the
option (:class:`envengineer.errors.ConfigError`): a prompt longer than the model reads would be
cut off by the server or refused, and a design step on a truncated prompt is no experiment.

Nothing here imports a tokenizer library; the checkpoint engineer's tokenizer is loaded by it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable



from envengineer.errors import ConfigError

if TYPE_CHECKING:
    from envengineer.design.evidence import Evidence

#: The stages in the order they are applied (docs/context.md, "A context budget").
STAGES = ("history", "rows", "compact", "drop")


@dataclass(frozen=True)
class Cut:
    """One shortening step of a module: ``options`` update its options (cumulatively) at ``stage``."""

    stage: str
    what: str  # e.g. "H: 2 rounds in full"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class BudgetRecord:
    """What a budget did to one prompt (``engineer/budget.json``)."""

    max_prompt_tokens: int
    counter: str
    tokens_before: int
    tokens_after: int
    cuts: list[dict[str, str]] = field(default_factory=list)  # {"stage", "what"} in the order applied

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def budget_note(record: BudgetRecord) -> str:
    """The note that ends a shortened context."""
    cuts = "; ".join(c["what"] for c in record.cuts)
    return (f"_Context shortened to fit {record.max_prompt_tokens} prompt tokens "
            f"(was {record.tokens_before}, {record.counter}): {cuts}._")


def _blocks(modules: list[tuple[str, dict[str, Any], Any]], evidence: Evidence, dropped: set[str]) -> list[str]:
    out = []
    for name, _, module in modules:
        if name in dropped:
            continue
        text = module.render(evidence).strip()
        if text:
            out.append(f"## {getattr(module, 'title', '') or name} ({name})\n\n{text}")
    return out


def fit_prompt(
    resolved: list[tuple[str, dict[str, Any]]],
    make_module: Callable[[str, dict[str, Any]], Any],
    evidence: Evidence,
    fill: Callable[[str], str],
    max_tokens: int,
    count: Callable[[str], int],
    counter: str,
    where: str = "engineer.max_prompt_tokens",
) -> tuple[str, str, BudgetRecord]:
    """The (context, prompt, record) that fits ``max_tokens`` as counted by ``count``.

    ``resolved`` is the context's (module name, options) list (:func:`envengineer.design.context.resolve_context`),
    ``make_module(name, options)`` builds one module, ``fill`` turns a context into the full analysis
    prompt. Raises :class:`ConfigError` naming ``where`` when even the most compact prompt is longer.
    """
    options = {name: dict(opts) for name, opts in resolved}
    make = lambda name: make_module(name, options[name])  # noqa: E731
    modules = [(name, options[name], make(name)) for name, _ in resolved]

    def compose(dropped: set[str], note: str) -> str:
        blocks = _blocks(modules, evidence, dropped)
        if note:
            blocks.append(note)
        return "\n\n".join(blocks) + ("\n" if blocks else "")

    context = compose(set(), "")
    prompt = fill(context)
    before = count(prompt)
    record = BudgetRecord(max_tokens, counter, before, before)
    if before <= max_tokens:
        return context, prompt, record

    # the ladder: module cuts by stage (prompt order within a stage), then the core's drops
    ladder: list[tuple[str, str, str, dict[str, Any]]] = []
    for stage in STAGES[:-1]:
        for name, _, module in modules:
            ladder += [(stage, name, cut.what, cut.options) for cut in module.budget_cuts(evidence) if cut.stage == stage]
    for name, _, module in reversed(modules):
        if not getattr(module, "essential", False):
            ladder.append(("drop", name, f"{name} left out", {}))

    dropped: set[str] = set()
    for stage, name, what, update in ladder:
        if stage == "drop":
            dropped.add(name)
        else:
            options[name].update(update)
            index = next(i for i, m in enumerate(modules) if m[0] == name)
            modules[index] = (name, options[name], make(name))
        record.cuts.append({"stage": stage, "what": what})
        context = compose(dropped, budget_note(record))
        prompt = fill(context)
        record.tokens_after = count(prompt)
        if record.tokens_after <= max_tokens:
            return context, prompt, record
    raise ConfigError(
        f"{where}: the analysis prompt needs {record.tokens_after} tokens ({counter}) even with every cut "
        f"({'; '.join(c['what'] for c in record.cuts)}), more than the budget of {max_tokens}; raise "
        f"{where.rsplit('.', 1)[-1]} to at least {record.tokens_after} or set it to null"
    )
