"""The option an engineer that reads a prompt shares (``max_prompt_tokens``) and the documented token
estimate: what :class:`~envengineer.components.Engineer` reads by default. How a context is cut to fit is
the design step's (:mod:`envengineer.design.budget`)."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

#: What the estimate counts: one token per this many characters, rounded up.
CHARS_PER_TOKEN = 4
ESTIMATE = "estimate: characters/4, rounded up"


class PromptBudgetOptions(BaseModel):
    """The option every engineer that reads a prompt shares: the most prompt tokens it reads."""

    model_config = ConfigDict(extra="forbid")

    max_prompt_tokens: int | None = Field(
        None, ge=1,
        description="most tokens of the analysis prompt (null: no budget); the context is shortened in a fixed "
        "order to fit (docs/context.md, 'A context budget'), and a prompt that cannot fit is an error",
    )


def estimate_tokens(text: str) -> int:
    """The documented estimate for an engineer without a tokenizer: characters / 4, rounded up."""
    return math.ceil(len(text) / CHARS_PER_TOKEN)
