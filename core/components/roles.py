"""The loop's components: context modules, engineers, trainers, policies and trackers (the :class:`Tracker` base
lives here; :mod:`envengineer.loop.trackers` fans a run's events out to the selected trackers)."""

from __future__ import annotations

import abc
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar

from pydantic import BaseModel

from envengineer.components.base import Component
from envengineer.errors import ConfigError

if TYPE_CHECKING:  # the contracts' types (tests/test_import_layers.py: typing-only imports may point up)
    from envengineer.components.model_shape import ModelShape
    from envengineer.components.resources import MemoryEstimate
    from envengineer.components.task import Generator
    from envengineer.components.training import TrainRequest, TrainResult
    from envengineer.design.budget import Cut
    from envengineer.design.contract import DesignOutcome, DesignRequest, EngineerReply
    from envengineer.design.evidence import Evidence


# ---------------------------------------------------------- the loop's components


class ContextModule(Component, abc.ABC):
    """One block of the engineer's context (F, G, H, S, T)."""

    title: ClassVar[str] = ""
    #: never left out to fit a context budget (F); other modules may be (envengineer.design.budget)
    essential: ClassVar[bool] = False
    #: how the block changes between a run's rounds: ``run`` (the same every round, G), ``history`` (earlier
    #: rounds' text kept as it was, new text appended, H) or ``round`` (written anew each round); the context's
    #: ``order: stable-first`` puts blocks in that order so a server's prompt cache reuses the longest prefix
    stability: ClassVar[str] = "round"

    @abc.abstractmethod
    def render(self, evidence: Evidence) -> str:
        """Markdown for this module, or an empty string when it has nothing to say."""

    def budget_cuts(self, evidence: Evidence) -> Sequence[Cut]:
        """The :class:`envengineer.design.budget.Cut` steps that shorten this module's block for a context budget, in
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
    def propose(self, request: DesignRequest) -> EngineerReply:
        """Return the engineer's reply for one design step."""

    @property
    def model(self) -> str | None:
        """The model that answers (an API model's name), for messages and records; None for a non-LLM engineer."""
        return None

    def summarize(self, request: DesignRequest, outcome: DesignOutcome) -> str | None:
        """The S note after a design step (3–5 sentences), or None: the loop then writes a factual note."""
        return None

    def ask(self, request: DesignRequest, messages: list[dict[str, str]], schema: dict[str, Any] | None = None) -> EngineerReply | None:
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
        option where its options derive from :class:`envengineer.components.prompt_budget.PromptBudgetOptions`."""
        from envengineer.components.prompt_budget import PromptBudgetOptions

        return self.options.max_prompt_tokens if isinstance(self.options, PromptBudgetOptions) else None

    def prompt_token_counter(self, request: DesignRequest) -> tuple[str, Callable[[str], int]]:
        """(what counts, ``count(text) -> int``) for the budget: the estimate (characters / 4) unless an engineer
        with a tokenizer overrides it."""
        from envengineer.components.prompt_budget import ESTIMATE, estimate_tokens

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
    it sampled (:mod:`envengineer.loop.signal`): the training signal the engineers read."""

    #: the run config's ``budget_mode`` values it honours (``kept_prompts`` needs a trainer that samples
    #: prompts before training on them: see :func:`envengineer.components.training.fill_kept`)
    budget_modes: ClassVar[tuple[str, ...]] = ("instances",)

    @abc.abstractmethod
    def train(self, request: TrainRequest) -> TrainResult:
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

    def plan(self, request: TrainRequest) -> Mapping[str, Any] | None:
        """For ``envengineer run --dry-run``: prepare what one round needs (its data files) and say what would run
        (e.g. ``{"command": ...}``) without training. None: the trainer runs in-process and has nothing to show."""
        return None

    def memory_plan(self, model: ModelShape, gpu_bytes: float) -> MemoryEstimate | None:
        """For ``envengineer plan``: this trainer's GPU memory per GPU for ``model`` (a
        :class:`envengineer.components.model_shape.ModelShape`) as a :class:`envengineer.components.resources.MemoryEstimate`
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

    def memory_plan(self, model: ModelShape, gpu_bytes: float, prompt_tokens: int | None = None) -> MemoryEstimate | None:
        """For ``envengineer plan``: this policy's GPU memory when it evaluates (a
        :class:`envengineer.components.resources.MemoryEstimate`; ``prompt_tokens``: the longest prompt the trainer plans for),
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

    def prepare(self, *, generator: Generator | None = None, force: bool = False, progress: Any = None) -> Path:
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

    def sample_records(self, generator: Generator, records: Sequence[Mapping[str, Any]], *, style: str, n: int = 1) -> list[list[str]]:
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


# --------------------------------------------------------------------------- trackers


class Tracker(Component):
    """Base of experiment trackers: a ``name``, a ``description``, an ``Options`` model (the fields a
    run config's ``trackers`` entry may set: ``{name: wandb, project: ...}``), and the lifecycle
    hooks as ``@hookimpl`` methods. One instance serves one run."""

    #: the pip extra that installs what the tracker needs (named in its warning when missing)
    extra: ClassVar[str] = ""

    def trainer_settings(self) -> dict[str, Any] | None:
        """What a trainer needs to write its own step metrics into this tracker's run (the built-in
        trainers read the built-in trackers' settings: a log directory, a run id); None: nothing.
        Called after ``on_run_start`` succeeded, before each round's training."""
        return None

    def close(self) -> None:
        """Release what the tracker holds (called when it is disabled, and after ``on_run_end``)."""


class TrackerUnavailable(Exception):
    """A tracker cannot work in this run, for the reason given (no key, package missing); raised from
    a hook, it disables the tracker with that reason, like any error."""


def missing_package(tracker: str, module: str, extra: str) -> TrackerUnavailable:
    return TrackerUnavailable(f"{module} is not installed (pip install \"envengineer[{extra}]\")")
