"""The ``critic`` engineer: K proposals of another engineer, one chosen by the instrument before the round trains.

An engineer that samples (an LLM at a temperature, ``random``) is asked ``proposals`` times on the same design
request, each time with its own sampling seed; each proposal is parsed and projected as the design step would, and
scored for the round's checkpoint by the engineer benchmark's measure (:class:`.scoring.RoundScorer`: fresh
instances drawn from the proposed config, each answered ``draws`` times by the checkpoint at the trainer's
temperature; the figure is the expected kept prompts per budget, kept/B). The reply of the highest kept/B is
returned (ties: the earliest), its text led by a line that names the choice; the design step then applies it as it
applies any reply. A proposal that cannot be parsed, or whose call failed for good, is not scored; when none can be,
the first reply is returned (when every call failed, the first failure is raised), so the design step re-asks or
falls back exactly as without the critic.

The critic's instances and samples are its own: its draws are seeded under the tag ``critic`` and cached apart from
the benchmark's, so ``envengineer engineers score`` scoring a critic scores its choice on other instances (out of
sample). What it costs: ``proposals`` replies of the engineer and up to ``proposals`` × ``instances`` × ``draws``
samples of the checkpoint a design step (docs/engineers.md#critic).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from envengineer.api import (
    DesignOutcome,
    DesignRequest,
    Engineer,
    EngineerCallError,
    EngineerReply,
    UnusableProposal,
    proposal_of,
)


class CriticOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    engineer: dict[str, Any] = Field(..., description="the engineer whose proposals are chosen among: {name: ..., and its options}")
    proposals: int = Field(2, ge=2, le=16, description="K: proposals asked of the engineer a design step, each with its own sampling seed")
    instances: int = Field(32, ge=1, le=4096, description="fresh instances drawn from each proposed config")
    draws: int = Field(4, ge=2, le=64, description="answers the checkpoint samples per instance (a prompt is kept when they are mixed)")
    seed: int = Field(0, description="the critic's draws: instances and samples, seeded apart from the engineer benchmark's")
    cache_dir: str | None = Field(None, description="where the critic's samples are cached (default: the envengineer cache's critic/ folder)")

    @field_validator("engineer")
    @classmethod
    def _named(cls, value: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(value.get("name"), str) or not value["name"]:
            raise ValueError("engineer: give the engineer to choose among as {name: ..., options...}")
        if value["name"] == "critic":
            raise ValueError("engineer: a critic of a critic is not supported")
        return value


def _seed(request_seed: int, k: int) -> int:
    from envengineer.plugins.engineer_bench.recorded import derived_seed

    return derived_seed("critic", "proposal", int(request_seed), k)


class CriticEngineer(Engineer):
    name: ClassVar[str] = "critic"
    description: ClassVar[str] = "K proposals of another engineer, the one the instrument scores highest (expected kept prompts) applied"
    Options: ClassVar[type[BaseModel]] = CriticOptions
    options: CriticOptions

    def __init__(self, options: BaseModel | None = None) -> None:
        super().__init__(options)
        self.registry: Any = None
        self.inner: Any = None

    def bind_registry(self, registry: Any, where: str = "engineer.critic") -> None:
        """Called by the registry that made this engineer: the engineer chosen among is made through the same registry
        (its options checked now, named ``engineer.critic.engineer.<name>`` in an error)."""
        spec = dict(self.options.engineer)
        name = spec.pop("name")
        self.registry = registry
        self.inner = registry.create("engineer", name, spec, where=f"{where}.engineer.{name}")
        self.uses_llm = self.inner.uses_llm  # an LLM's fallbacks stop a run as they would without the critic

    def _part(self) -> Any:
        if self.inner is None:
            from envengineer.registry import load_registry

            self.bind_registry(load_registry())
        return self.inner

    @property
    def model(self) -> str | None:
        return self._part().model

    @property
    def max_prompt_tokens(self) -> int | None:
        return self._part().max_prompt_tokens

    def prompt_token_counter(self, request: DesignRequest) -> Any:
        return self._part().prompt_token_counter(request)

    def secret_values(self) -> Any:
        return self._part().secret_values()

    def summarize(self, request: DesignRequest, outcome: DesignOutcome) -> str | None:
        summary = self._part().summarize(request, outcome)
        self.last_summary_calls = list(getattr(self.inner, "last_summary_calls", []))
        return summary

    def ask(self, request: DesignRequest, messages: list[dict[str, str]], schema: dict[str, Any] | None = None) -> EngineerReply | None:
        return self._part().ask(request, messages, schema)

    def _scorer(self, request: DesignRequest) -> Any:
        from envengineer.fileio import cache_root
        from envengineer.plugins.engineer_bench.recorded import ScoreSettings, load_recorded_run
        from envengineer.plugins.engineer_bench.scoring import RoundScorer, SampleCache

        o = self.options
        run = load_recorded_run(self.registry, request.run_dir)
        if request.evidence.round not in run.rounds:
            raise EngineerCallError(f"engineer.critic: {request.run_dir} has no checkpoint and evidence for round {request.evidence.round}")
        cache = Path(o.cache_dir) if o.cache_dir else cache_root() / "critic"
        settings = ScoreSettings(proposals=o.proposals, instances=o.instances, draws=o.draws, seed=o.seed)
        return RoundScorer(run, request.evidence.round, settings, SampleCache(cache), tag="critic")

    def propose(self, request: DesignRequest) -> EngineerReply:
        if not request.run_dir:  # before any reply is asked for: nothing to score them with
            raise EngineerCallError("engineer.critic: the design request names no run directory, so there is no checkpoint to score "
                                    "proposals for (the loop, `envengineer propose` and `engineers score` pass it)")
        replies: list[EngineerReply | None] = []
        scored: list[tuple[int, float, dict[str, Any]]] = []
        calls: list[dict[str, Any]] = []
        failures: list[EngineerCallError] = []
        reasons: dict[int, str] = {}
        inner = self._part()
        for k in range(self.options.proposals):
            try:
                reply = inner.propose(replace(request, seed=_seed(request.seed, k)))
            except EngineerCallError as exc:  # one failed call costs that proposal, not the step
                failures.append(exc)
                calls.extend(exc.calls)
                replies.append(None)
                reasons[k] = f"the call failed: {exc}"
                continue
            replies.append(reply)
            calls.extend(reply.calls)
        if not any(r is not None for r in replies):
            raise EngineerCallError(str(failures[0]), calls)
        configs: dict[int, Any] = {}
        parsed: dict[int, EngineerReply] = {}
        for k, reply in enumerate(replies):
            if reply is None:
                continue
            try:
                proposal = proposal_of(reply)
            except UnusableProposal as exc:
                reasons[k] = str(exc)
                continue
            configs[k] = request.generator.project(proposal, request.current_config).config
            parsed[k] = reply
        if not configs:
            return next(r for r in replies if r is not None)
        scorer = self._scorer(request)
        try:
            for k, config in configs.items():
                figures = scorer.score(config)
                scored.append((k, float(figures["kept_per_budget"]), figures))
        finally:
            scorer.close()
        best = max(scored, key=lambda item: (item[1], -item[0]))
        chosen = parsed[best[0]]
        lines = [f"proposal {k + 1}: kept/B {value:.2f}" for k, value, _ in scored]
        lines += [f"proposal {k + 1}: not scored ({reason})" for k, reason in sorted(reasons.items())]
        note = (f"critic: proposal {best[0] + 1} of {len(replies)} applied, the highest expected kept prompts per budget for this "
                f"round's checkpoint ({self.options.instances} instances x {self.options.draws} samples each): " + "; ".join(lines) + ".")
        record = {"critic": {"chosen": best[0] + 1, "scores": [{"proposal": k + 1, "kept_per_budget": value, "success": f.get("success"),
                                                                 "mixed": f.get("mixed")} for k, value, f in scored],
                             "unscored": {str(k + 1): r for k, r in reasons.items()}}}
        return replace(chosen, text=f"{note}\n\n{chosen.text}", calls=[*calls, record],
                       latency_s=sum(r.latency_s for r in replies if r is not None),
                       attempts=sum(r.attempts for r in replies if r is not None))


ENGINEERS = (CriticEngineer,)
