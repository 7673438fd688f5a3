"""The component kinds plugins register, and the small value types they exchange.

Every component is a class with a ``name`` and an ``Options`` pydantic model (its
section of the run config). The registry validates a section against ``Options``
and instantiates the class with the result, so each plugin owns its own schema and
an error reads ``engineer.openai.model: Field required``.

A task family is split in two: a :class:`Generator` (knobs,
generation, projection, prompts) and a :class:`Validator` (scoring), paired by name.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, model_validator

from envengineer import knobs as _knobs  # the defaults of Generator's knob methods (knobs imports only declarations)
from envengineer.declarations import (  # noqa: F401 - the value types plugins exchange, importable from here too
    METRIC_RATES,
    Aggregate,
    Benchmark,
    Change,
    GenerationResult,
    Grouping,
    Knob,
    Projection,
    Verdict,
    prompt_text,
)
from envengineer.errors import ConfigError


def retired_options(**why: str) -> Any:
    """A ``mode="before"`` validator for an ``Options`` model that refuses options which were
    removed or moved, each with its own message (``{value}`` in it stands for the value given),
    so an old config gets a way forward instead of "extra inputs are not permitted".

    Use it as a class attribute: ``_retired = retired_options(time_budget_s="was removed: ...")``.
    """

    def refuse(cls: type, data: Any) -> Any:
        if isinstance(data, dict):
            for key, message in why.items():
                if key in data:
                    value = data[key]
                    raise ValueError(f"{key}: " + message.format(value=str(value).lower() if isinstance(value, bool) else value))
        return data

    return model_validator(mode="before")(classmethod(refuse))


class NoOptions(BaseModel):
    """Options model of a component that takes none."""

    model_config = ConfigDict(extra="forbid")


class Component:
    """Base of every registered component: a name, a description, an options model."""

    name: ClassVar[str] = ""
    description: ClassVar[str] = ""
    Options: ClassVar[type[BaseModel]] = NoOptions

    def __init__(self, options: BaseModel | None = None) -> None:
        self.options = options if options is not None else self.Options()


# --------------------------------------------------------------------------- tasks


class Generator(Component, abc.ABC):
    """A task family's instance generator, its knobs, their projection, and its prompts.

    ``Options`` holds what is fixed for a run (e.g. the agent count); the *generator
    config* (``config_model``) holds the knobs the engineer rewrites each round.
    """

    config_model: ClassVar[type[BaseModel]]
    prompt_styles: ClassVar[tuple[str, ...]] = ("full",)
    #: How evaluation files this task's records, first = primary (the evidence groups that
    #: :meth:`group` and :meth:`groups` read). None declared: one group, ``all``.
    groupings: ClassVar[tuple[Grouping, ...]] = ()

    #: The config field that maps each group to its knob values (``sizes`` for mapf-frozenlake);
    #: None: the declared knobs are fields at the config's top level.
    knob_table: ClassVar[str | None] = None
    #: The numeric knobs the engineers move, in display order (see :class:`Knob`).
    knobs: ClassVar[tuple[Knob, ...]] = ()
    #: The registered benchmark a run evaluates on each round (the loop's evidence) when the run
    #: config leaves ``eval.validation`` unset. None: a run must name one.
    validation_benchmark: ClassVar[str | None] = None

    def knob(self, name: str) -> Knob:
        """The declared knob called ``name`` (``KeyError`` naming the declared ones otherwise)."""
        for knob in self.knobs:
            if knob.name == name:
                return knob
        raise KeyError(f"task {self.name!r} declares no knob {name!r} (knobs: {', '.join(k.name for k in self.knobs) or 'none'})")

    def share_knob(self) -> Knob | None:
        """The knob holding each group's share of the budget (the shares sum to 1), if any."""
        return next((knob for knob in self.knobs if knob.share), None)

    def difficulty_knobs(self) -> tuple[Knob, ...]:
        """The declared knobs that make instances harder one way (``harder`` up or down)."""
        return tuple(knob for knob in self.knobs if knob.harder != "none" and not knob.share)

    def knob_values(self, config: BaseModel | Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """``{group: {knob: value}}`` of the declared knobs in ``config``'s knob table, groups in the
        table's order ({} when the task has no knob table)."""
        return _knobs.knob_values(self, config)

    def knob_proposal(self, values: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """A (partial) proposal that :meth:`project` accepts, from ``{group: {knob: value}}``."""
        if self.knob_table is None:
            return {str(k): v for group in values.values() for k, v in group.items()}
        return {self.knob_table: {str(g): dict(v) for g, v in values.items() if v}} if any(values.values()) else {}

    def default_config(self) -> BaseModel:
        """The config a run starts from when the user gives none (default: ``config_model``'s field defaults)."""
        return _knobs.default_config(self)

    def random_config(self, seed: int) -> BaseModel:
        """A random valid config (the paper's random round-0 start). Default: every declared knob
        drawn uniformly within its bounds in every group of the default config, shares renormalised."""
        return _knobs.random_config(self, seed)

    @abc.abstractmethod
    def generate(
        self,
        config: BaseModel,
        *,
        n: int,
        seed: int,
        workers: int = 1,
        progress: Any = None,
    ) -> GenerationResult:
        """Generate ``n`` instance records, byte-identical for the same config and seed."""

    def project(self, proposal: Mapping[str, Any], current: BaseModel) -> Projection:
        """Merge a (partial, untrusted) proposal onto ``current`` and project it; never raises.

        Default: unknown fields, groups and knobs are dropped, each declared knob is clipped to
        its bounds and put on its step, a share knob is renormalised to sum to 1, other fields of
        the config model are taken when they validate; every change is reported and every field
        applied as proposed is listed in ``accepted``."""
        return _knobs.project(self, proposal, current)

    @abc.abstractmethod
    def render(self, record: Mapping[str, Any], style: str = "full") -> list[dict[str, str]] | str:
        """The prompt for one instance: chat messages, or a plain string for compact styles."""

    def style_problem(self, style: str) -> str | None:
        """Why a policy cannot prompt this task in ``style`` (None: it can): the style must be one of
        :attr:`prompt_styles`. Callers raise it with the config field that named the style."""
        if style in self.prompt_styles:
            return None
        return f"task {self.name!r} has no prompt style {style!r} (its styles: {', '.join(self.prompt_styles)})"

    def check_record(self, record: Mapping[str, Any]) -> None:
        """Raise ``ValueError`` naming the field when an instance record is malformed."""

    def decode_response(self, record: Mapping[str, Any], response: str, style: str | None = None) -> str:
        """Turn a response in a prompt style's own answer format into the validator's format."""
        return response

    def answer_end(self, record: Mapping[str, Any], response: str, style: str | None = None) -> int | None:
        """How many leading characters of ``response`` :meth:`decode_response` reads (None: all of it).

        A trainer leaves what follows out of the loss: those tokens never change the reward.
        """
        return None

    def group(self, record: Mapping[str, Any]) -> str:
        """The evidence group of an instance in the primary grouping (per-group rates feed the engineer)."""
        primary = self.groupings[0] if self.groupings else None
        value = primary.value(record) if primary is not None else None
        return "all" if value is None else value

    def groups(self) -> tuple[str, ...]:
        """Every group name of the primary grouping, in display order (empty: as met)."""
        return self.groupings[0].order if self.groupings else ("all",)

    def evaluation_groupings(self) -> tuple[Grouping, ...]:
        """The declared groupings; a task that declares none but overrides :meth:`group` is filed
        under one grouping named ``group``."""
        if self.groupings:
            return self.groupings
        return (Grouping("group", order=tuple(self.groups())),)

    def instance_knobs(self, record: Mapping[str, Any]) -> dict[str, float]:
        """The declared knobs' values one instance was drawn at, where its record tells (the simulated
        student reads an instance's difficulty from them). Default: the record's fields named like a
        declared knob other than the share knob, when they are numbers."""
        values: dict[str, float] = {}
        for knob in self.knobs:
            value = record.get(knob.name)
            if not knob.share and isinstance(value, (int, float)) and not isinstance(value, bool):
                values[knob.name] = float(value)
        return values

    def record_id(self, record: Mapping[str, Any]) -> str:
        """The instance's identifier (unique within a set)."""
        return str(record["id"])

    def example_prompt(self, record: Mapping[str, Any]) -> str:
        """The instance as a failing example shows it to the engineer (the F module): the
        shortest of its declared prompt styles, as text (chat messages joined)."""
        texts = []
        for style in self.prompt_styles:
            try:
                texts.append(prompt_text(self.render(record, style)))
            except Exception:  # noqa: BLE001 - a style that cannot render this record is skipped
                continue
        return min(texts, key=len) if texts else ""

    def guidelines(self) -> str:
        """Task-specific text for the G context module: the task, the knobs, the rules."""
        return ""

    def design_brief(self, budget: int | None = None) -> str:
        """A few sentences every design prompt carries, whichever context modules are on: how
        the training setting differs from the one the policy is judged on, and the hard
        constraints of a configuration (``budget``: training instances per round)."""
        per_round = f" at {budget} instances per round" if budget else ""
        return (
            "The policy trains on instances drawn from your configuration and is judged on held-out "
            "evaluation sets it never trains on.\n\n"
            "Constraints on the configuration:\n"
            "- Change only the generator configuration's fields; unknown fields are ignored and "
            "out-of-range values clipped.\n"
            f"- The training budget is fixed{per_round}."
        )

    def reference_answer(self, record: Mapping[str, Any]) -> str:
        """An optimal answer in the policy's answer format (for checks and warm starts)."""
        raise NotImplementedError(f"task {self.name!r} has no reference solver")

    # -- a policy built from scratch for this task (the embedded ``tiny`` policy). The defaults
    # -- serve any family with a reference solver: a character-level tokenizer, random
    # -- embeddings, and a warm start on generated records answered by reference_answer.

    def reference_completion(self, record: Mapping[str, Any], style: str) -> str:
        """An optimal answer in ``style``'s own answer format: what :meth:`decode_response` reads.

        Default: :meth:`reference_answer` (a style without an answer format of its own answers
        in the validator's)."""
        return self.reference_answer(record)

    def warm_start_pairs(self, *, n: int, seed: int, style: str) -> list[tuple[str, str]]:
        """``n`` (prompt, optimal completion) pairs in ``style`` for a supervised warm start.

        Deterministic in ``seed``, and independent of run options that do not change the pairs'
        meaning (a policy caches what it learns from them by task name and style). Default: the
        records of :meth:`generate` on :meth:`default_config`, their prompts from :meth:`render`
        (chat messages: their contents joined) and their completions from
        :meth:`reference_completion`."""
        pairs = []
        for record in self.generate(self.default_config(), n=n, seed=seed).records:
            prompt = self.render(record, style)
            text = prompt if isinstance(prompt, str) else "".join(m["content"] for m in prompt)
            pairs.append((text, self.reference_completion(record, style)))
        return pairs

    def warm_start_recipe(self) -> dict[str, Any]:
        """The task options that change :meth:`warm_start_pairs` (e.g. the agent counts drawn), as
        plain JSON values. A policy that caches what it learns from the pairs keys its cache on
        these too, so two runs that differ here never share a base model. Default: none."""
        return {}

    def tiny_vocabulary(self, style: str) -> list[str] | None:
        """Every word of ``style``'s prompts and answers, for a word-level tokenizer that splits on
        whitespace (special tokens are the policy's own). None (default): read characters."""
        return None

    def tiny_init_embeddings(self, weight: Any, token_ids: Mapping[str, int], style: str) -> None:
        """Set initial rows of a fresh model's input embedding matrix (``weight``: a torch tensor,
        vocabulary × hidden, written in place; ``token_ids``: token → row), e.g. to give related
        tokens similar starting vectors. Default: keep the random initialisation."""

    def tiny_prebuilt(self, key: str) -> Path | None:
        """A warm-started base model this task ships for the tiny policy's recipe ``key`` (the hash
        of the task, style and warm-start options that name its cache folder), or None (default):
        the policy builds it. The folder is a Hugging Face model directory with ``warm_start.json``
        and a ``SHA256SUMS`` file the policy checks before use; ship one only as the exact output of
        ``envengineer pretrain --force`` with that recipe."""
        return None


class Validator(Component, abc.ABC):
    """Scores responses for the generator of the same name."""

    failure_types: ClassVar[tuple[str, ...]] = ()

    @abc.abstractmethod
    def score(self, record: Mapping[str, Any], response: str) -> Verdict:
        """Judge one response. Never raises on any string; bounded time."""


# ---------------------------------------------------------- the loop's components


class ContextModule(Component, abc.ABC):
    """One block of the engineer's context (F, G, H, S, T)."""

    title: ClassVar[str] = ""
    #: never left out to fit a context budget (F); other modules may be (envengineer.budget)
    essential: ClassVar[bool] = False

    @abc.abstractmethod
    def render(self, evidence: Any) -> str:
        """Markdown for this module, or an empty string when it has nothing to say."""

    def budget_cuts(self, evidence: Any) -> Sequence[Any]:
        """The :class:`envengineer.budget.Cut` steps that shorten this module's block for a context budget, in
        the order they are applied within their stage (``history``, ``rows``, ``compact``); each updates this
        module's options. None by default: the module is only left out whole (unless :attr:`essential`)."""
        return ()


class Engineer(Component, abc.ABC):
    """Reads a context and proposes the next generator config."""

    #: A language model answers (API or local weights): its fallbacks mean a broken experiment
    #: (missing key, model not found), so ``design.max_fallbacks`` stops the run after a few.
    uses_llm: ClassVar[bool] = False

    def __init__(self, options: BaseModel | None = None) -> None:
        super().__init__(options)
        #: the calls (one record each) the last :meth:`summarize` made, for the design record
        self.last_summary_calls: list[dict[str, Any]] = []

    @abc.abstractmethod
    def propose(self, request: Any) -> Any:
        """Return the engineer's reply for one design step."""

    @property
    def model(self) -> str | None:
        """The model that answers (an API model's name), for messages and records; None for a non-LLM engineer."""
        return None

    def summarize(self, request: Any, outcome: Any) -> str | None:
        """The S note after a design step (3–5 sentences), or None: the loop then writes a factual note."""
        return None

    def ask(self, request: Any, messages: list[dict[str, str]], schema: dict[str, Any] | None = None) -> Any:
        """Another question on a design request's context, answered by the engineer's model: its reply (an
        ``EngineerReply``; ``schema``: the answer's JSON schema, decoded under it where the backend can), or None
        for an engineer without a model (the engineer benchmark's self-prediction skips it)."""
        return None

    def secret_values(self) -> Sequence[str]:
        """Values (API keys) that must never reach a file: the design record redacts them."""
        return ()

    @property
    def max_prompt_tokens(self) -> int | None:
        """The most analysis-prompt tokens this engineer reads (None: no budget): its ``max_prompt_tokens``
        option where its options derive from :class:`envengineer.budget.PromptBudgetOptions`."""
        from envengineer.budget import PromptBudgetOptions

        return self.options.max_prompt_tokens if isinstance(self.options, PromptBudgetOptions) else None

    def prompt_token_counter(self, request: Any) -> tuple[str, Any]:
        """(what counts, ``count(text) -> int``) for the budget: the estimate (characters / 4) unless an engineer
        with a tokenizer overrides it."""
        from envengineer.budget import ESTIMATE, estimate_tokens

        return ESTIMATE, estimate_tokens


@dataclass(frozen=True)
class Resources:
    """What one run asks a cluster for (``envengineer suite --launcher ray|slurm``): GPUs on each of
    ``nodes`` nodes and CPUs for the run's own process. A run's need is the largest of its trainer's
    and its policy's (:meth:`Trainer.resources`, :meth:`Policy.resources`)."""

    gpus_per_node: int = 0
    nodes: int = 1
    cpus: int = 1

    def union(self, other: "Resources") -> "Resources":
        """Enough for both (they run one after the other in the same process)."""
        return Resources(max(self.gpus_per_node, other.gpus_per_node), max(self.nodes, other.nodes), max(self.cpus, other.cpus))


class Trainer(Component, abc.ABC):
    """Trains a policy for one round on a training set.

    A trainer writes ``rollouts.jsonl`` into the round's output folder, one line per training prompt
    it sampled (:mod:`envengineer.signal`): the training signal the engineers read."""

    #: the run config's ``budget_mode`` values it honours (``kept_prompts`` needs a trainer that samples
    #: prompts before training on them: see :func:`envengineer.training.fill_kept`)
    budget_modes: ClassVar[tuple[str, ...]] = ("instances",)

    @abc.abstractmethod
    def train(self, request: Any) -> Any:
        """Run one round of training; return the new checkpoint and curves."""

    def describe(self) -> Mapping[str, Any]:
        """Training details for the T context module (``full``)."""
        return {}

    @property
    def epochs(self) -> float | None:
        """Passes over a round's training set, for the T module's bookkeeping (None: not counted in epochs)."""
        return None

    @property
    def sampling_temperature(self) -> float | None:
        """The temperature its rollouts sample at (evaluation's sampled pass@1 uses it; None: unknown)."""
        return None

    def plan(self, request: Any) -> Mapping[str, Any] | None:
        """For ``envengineer run --dry-run``: prepare what one round needs (its data files) and say what would run
        (e.g. ``{"command": ...}``) without training. None: the trainer runs in-process and has nothing to show."""
        return None

    def memory_plan(self, model: Any, gpu_bytes: float) -> Any:
        """For ``envengineer plan``: this trainer's GPU memory per GPU for ``model`` (a
        :class:`envengineer.model_shape.ModelShape`) as a :class:`envengineer.memory.MemoryEstimate`
        (rows per phase, what it leaves out, candidate fixes as dotted overrides), or None: it has no estimate."""
        return None

    def resources(self) -> Resources:
        """What a round of training asks a cluster for (default: one CPU, no GPU)."""
        return Resources()


class Policy(Component, abc.ABC):
    """Samples responses from a policy (used by evaluation)."""

    #: False for a model behind an API: no weights to prepare, train or load from a path.
    has_weights: ClassVar[bool] = True

    #: prompts per :meth:`sample` call in evaluation (None: evaluation's default); a policy with a
    #: costly start per call (vLLM in a child process) asks for everything at once
    sample_batch_size: ClassVar[int | None] = None

    def memory_plan(self, model: Any, gpu_bytes: float, prompt_tokens: int | None = None) -> Any:
        """For ``envengineer plan``: this policy's GPU memory when it evaluates (a
        :class:`envengineer.memory.MemoryEstimate`; ``prompt_tokens``: the longest prompt the trainer plans for),
        or None: it uses no GPU memory of its own."""
        return None

    def failed_calls(self) -> Sequence[str]:
        """Errors of the calls that gave no answer so far, oldest first (their responses are empty)."""
        return ()

    @property
    def prompt_style(self) -> str:
        """How the task renders prompts for this policy (the ``prompt_style`` option, else ``full``)."""
        return str(getattr(self.options, "prompt_style", None) or "full")

    @property
    def chat_template_kwargs(self) -> dict[str, Any] | None:
        """The chat-template options chat prompts are rendered with (None: the renderer's default)."""
        value = getattr(self.options, "chat_template_kwargs", None)
        return dict(value) if value is not None else None

    def prepare(self, *, generator: Any = None, force: bool = False, progress: Any = None) -> Path:
        """The model directory a run starts from (building it first if the policy builds its own)."""
        raise ConfigError(f"policy {self.name!r}: a model behind an API has no weights to train")

    def input_problem(self) -> tuple[str, str] | None:
        """What a run of this policy lacks that it does not make itself (a model folder that is missing or
        incomplete) and how to get it, as (problem, fix); None (default): nothing. Asked before anything is
        written under a run's output, and by ``envengineer doctor CONFIG``; reads files, makes none."""
        return None

    def with_path(self, path: str | Path) -> "Policy":
        """The same sampling options on another checkpoint (the loop's round models)."""
        raise ConfigError(f"policy {self.name!r}: a model behind an API has no weights to load from {path}")

    def describe(self) -> Mapping[str, Any]:
        """Sampling settings, recorded with evaluation results."""
        return {"policy": self.name}

    def evaluation_key(self) -> str | None:
        """A string that names everything deciding this policy's answers (weights and sampling
        options) when its answers are a pure function of it, so that an evaluation of the same
        weights on the same records can be reused (the loop caches its base evaluations by it).
        None (default): answers may vary from call to call; never reuse them."""
        return None

    def sampling(self, *, temperature: float, seed: int) -> "Policy | None":
        """The same weights sampled at ``temperature`` with ``seed`` (evaluation's sampled pass@1 beside
        the greedy rate). None (default): the policy cannot be asked to sample another way."""
        return None

    def sample_records(self, generator: Any, records: Sequence[Mapping[str, Any]], *, style: str, n: int = 1) -> list[list[str]]:
        """``n`` responses per instance record. Default: :meth:`sample` on each record's prompt rendered
        in ``style``; a policy that reads the instance itself (the simulated student) overrides it."""
        return self.sample([generator.render(record, style) for record in records], n=n)

    def close(self) -> None:
        """Release what the policy holds (memory a trainer needs next)."""

    def resources(self) -> Resources:
        """What sampling asks a cluster for (default: one CPU, no GPU)."""
        return Resources()

    @abc.abstractmethod
    def sample(self, prompts: Sequence[list[dict[str, str]] | str], *, n: int = 1) -> list[list[str]]:
        """``n`` responses per prompt."""


KINDS: dict[str, type[Component]] = {
    "generator": Generator,
    "validator": Validator,
    "context_module": ContextModule,
    "engineer": Engineer,
    "trainer": Trainer,
    "policy": Policy,
}
