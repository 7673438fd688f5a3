"""What the loop and an engineer exchange in one design step: the request it reads, the reply it
returns, the error a transport raises when it gives up, and the step's outcome."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from envengineer.design.evidence import Evidence


@dataclass
class DesignRequest:
    """One design step, as an engineer sees it."""

    evidence: Evidence
    context: str  # the composed context modules
    prompt: str  # the analysis prompt, filled with the context
    current_config: Any  # the generator config object (pydantic) of the round just finished
    generator: Any  # the task's Generator component
    policy_path: str | None = None  # the current policy checkpoint (for the checkpoint engineer)
    base_policy_path: str | None = None  # the starting weights (for the base engineer)
    chat_template_kwargs: dict[str, Any] | None = None  # the policy's chat-template options (checkpoint/base engineers)
    followups: list[dict[str, str]] = field(default_factory=list)  # a re-ask's extra turns
    seed: int = 0
    budget: dict[str, Any] | None = None  # what a context budget cut (envengineer.design.budget.BudgetRecord), None without one
    run_dir: str | None = None  # the run directory the evidence comes from (engineers that read the run: the critic)

    @property
    def messages(self) -> list[dict[str, str]]:
        """The conversation: the prompt, then any re-ask turns."""
        return [{"role": "user", "content": self.prompt}, *self.followups]


@dataclass
class EngineerReply:
    """What an engineer returned for one attempt."""

    text: str
    usage: dict[str, int] = field(default_factory=dict)  # prompt_tokens, completion_tokens
    latency_s: float = 0.0
    model: str = ""
    attempts: int = 1  # API calls this reply took (retries included)
    proposal: dict[str, Any] | None = None  # set by baselines that build the update directly
    calls: list[dict[str, Any]] = field(default_factory=list)  # one record per API call


class EngineerCallError(Exception):
    """An engineer's transport failed for good (after its retries); ``calls`` records each try."""

    def __init__(self, message: str, calls: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.calls = calls or []


@dataclass
class DesignOutcome:
    """The result of one design step."""

    config: Any  # C_{n+1}: the projected proposal, or the previous config on a fallback
    projection: Any | None  # the task's Projection, when a proposal was usable
    fallback: bool
    reason: str  # why it fell back, or "" / a note
    replies: list[EngineerReply] = field(default_factory=list)
    summary: str | None = None
    proposal: dict[str, Any] | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)  # every API call of the step, failed ones too (calls.jsonl's records)
