"""A task family's two components: a :class:`Generator` (knobs, generation, projection, prompts) and a
:class:`Validator` (scoring), paired by name."""

from __future__ import annotations

import abc
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel

from envengineer.components import knobs as _knobs  # the defaults of Generator's knob methods (knobs imports only declarations)
from envengineer.components.base import Component
from envengineer.components.declarations import (
    GenerationResult,
    Grouping,
    Knob,
    Projection,
    Verdict,
    prompt_text,
)


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
    #: True when the knob table's groups, in the table's order, are the levels of the task's difficulty from
    #: easy to hard (grid-walk's k3 … k10: walks of that many moves), not environments of their own: a rule
    #: that climbs one difficulty (``rlve``) climbs the groups, and their budget shares are the mix of levels
    #: a round's instances are drawn from. False: each group is an environment, its difficulty in its knobs.
    groups_are_levels: ClassVar[bool] = False
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

    def knob_rows(self, config: BaseModel | Mapping[str, Any]) -> dict[str, dict[str, Any]]:
        """:meth:`knob_values`, and for a task without a knob table one group, ``all``, of its top-level knobs."""
        return _knobs.knob_rows(self, config)

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
