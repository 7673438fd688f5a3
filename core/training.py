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
