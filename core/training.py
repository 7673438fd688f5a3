"""What the loop hands a trainer for one round, and what it gets back.

Kept free of heavy imports: the loop and the trainers share these types, and
``import envengineer`` must not pull in torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Keys of one line of ``curves.jsonl`` (missing values are written as null).
CURVE_KEYS = ("step", "reward_mean", "reward_std", "zero_std_frac", "kl", "completion_length", "loss", "learning_rate")

#: What a trainer's ``reward`` option rewards: ``valid`` (R_acc) or the validator's graded ``score``.
REWARDS = ("valid", "score")


def reward_value(verdict: Any, reward: str = "valid", optimality_bonus: float = 0.0) -> float:
    """One response's reward: R_acc (``valid``) or ``Verdict.score`` (``score``), plus the bonus when optimal."""
    base = float(verdict.score) if reward == "score" else float(verdict.reward)
    return base + (float(optimality_bonus) if verdict.valid and verdict.optimal else 0.0)


def reward_text(reward: str = "valid", optimality_bonus: float = 0.0) -> str:
    """The reward as the T context module's training details describe it."""
    text = "R_acc (1 valid, 0 otherwise)" if reward != "score" else "the validator's graded score in [0, 1]"
    return text + (f" + {optimality_bonus} if optimal" if optimality_bonus else "")


@dataclass
class TrainRequest:
    """One round of training: start from ``policy_path``, train on this round's ``records``."""

    policy_path: Path
    records: list[dict[str, Any]]
    generator: Any  # envengineer.components.Generator
    validator: Any  # envengineer.components.Validator
    out_dir: Path
    seed: int = 0
    round: int = 0
    prompt_style: str = "full"
    #: the policy's ``chat_template_kwargs`` for chat prompts (None: the trainer's default), so
    #: training renders prompts exactly as evaluation does
    chat_template_kwargs: dict[str, Any] | None = None
    #: the loop's validation set (a trainer that validates on its own, e.g. verl, may use it)
    validation_records: list[dict[str, Any]] | None = None
    #: the run config's task section (name and options), for trainers whose reward runs in other processes
    task: dict[str, Any] | None = None


@dataclass
class TrainResult:
    """The new checkpoint (a Hugging Face model directory), its curves, and summary metrics."""

    checkpoint: Path
    curves: Path
    metrics: dict[str, Any] = field(default_factory=dict)
