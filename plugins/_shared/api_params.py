"""Which request parameters each API model family accepts, shared by the API engineers and the
``openai-compatible`` policy, so that a config never sends what the service answers with HTTP 400.

The rules come from the services' documentation (docs/engineers.md lists the sources):

* OpenAI chat completions, reasoning models (``gpt-5*``, ``o1*``, ``o3*``, ``o4*``): ``max_tokens``
  is refused (``max_completion_tokens`` instead) and ``temperature`` only takes its default, 1.
  OpenAI's own endpoint takes ``max_completion_tokens`` for every model; other OpenAI-compatible
  servers (vLLM, Moonshot) document ``max_tokens``.
* Moonshot ``kimi-k2.5`` / ``kimi-k2.6``: temperature cannot be modified (1.0 with thinking, the
  default; 0.6 with ``thinking: {type: disabled}``); any other value is refused.
* Gemini 2.5 thinking budgets: Pro 128..32768 and thinking cannot be turned off (0 is refused);
  Flash 0..24576 and Flash-Lite 0 or 512..24576 (0 turns thinking off); -1 is dynamic everywhere.

Anything not covered is sent as configured; ``send_temperature`` and ``max_tokens_field`` force a
choice when a family table here is out of date.
"""

from __future__ import annotations

import re
from typing import Any, Literal

TokenField = Literal["max_tokens", "max_completion_tokens"]

_OPENAI_REASONING = re.compile(r"^(gpt-5|o1|o3|o4)\b", re.I)
_KIMI_FIXED_TEMPERATURE = re.compile(r"^kimi-k2\.[56]\b", re.I)

#: (model name prefix, smallest budget, largest budget, whether 0 turns thinking off); most specific first.
GEMINI_THINKING: tuple[tuple[str, int, int, bool], ...] = (
    ("gemini-2.5-flash-lite", 512, 24576, True),
    ("gemini-2.5-flash", 1, 24576, True),
    ("gemini-2.5-pro", 128, 32768, False),
)


def base_name(model: str) -> str:
    """The model name without a router prefix (``openai/gpt-5`` -> ``gpt-5``)."""
    return model.rsplit("/", 1)[-1].strip()


def is_openai_reasoning(model: str) -> bool:
    return bool(_OPENAI_REASONING.match(base_name(model)))


def fixed_temperature_reason(model: str) -> str | None:
    """Why the service refuses a chosen temperature for ``model``, or None when it takes one."""
    name = base_name(model)
    if _OPENAI_REASONING.match(name):
        return f"{name} is an OpenAI reasoning model: only the default temperature (1) is accepted"
    if _KIMI_FIXED_TEMPERATURE.match(name):
        return f"{name} fixes its temperature (1.0 with thinking, 0.6 without) and refuses any other value"
    return None


def sends_temperature(model: str, forced: bool | None) -> bool:
    return forced if forced is not None else fixed_temperature_reason(model) is None


def is_openai_endpoint(base_url: str | None) -> bool:
    return base_url is None or "api.openai.com" in base_url


def token_field(model: str, base_url: str | None, forced: TokenField | None) -> TokenField:
    """``max_completion_tokens`` for OpenAI's endpoint and its reasoning models, else ``max_tokens``."""
    if forced is not None:
        return forced
    return "max_completion_tokens" if is_openai_endpoint(base_url) or is_openai_reasoning(model) else "max_tokens"


def chat_sampling(
    model: str,
    base_url: str | None,
    *,
    temperature: float,
    max_tokens: int,
    send_temperature: bool | None = None,
    max_tokens_field: TokenField | None = None,
) -> dict[str, Any]:
    """The sampling fields of one chat-completions request, as the service for ``model`` accepts them."""
    params: dict[str, Any] = {token_field(model, base_url, max_tokens_field): max_tokens}
    if sends_temperature(model, send_temperature):
        params["temperature"] = temperature
    return params


def gemini_thinking_problem(model: str, budget: int | None) -> str | None:
    """Why Gemini refuses ``budget`` for ``model`` (None: fine, or a model this table does not know)."""
    if budget is None or budget == -1:
        return None
    if budget < -1:
        return f"must be -1 (dynamic), 0 (off, where allowed) or a token count, got {budget}"
    name = base_name(model)
    for prefix, low, high, can_turn_off in GEMINI_THINKING:
        if name.startswith(prefix):
            if budget == 0:
                return None if can_turn_off else f"{name} cannot turn thinking off (the service refuses 0); use -1 (dynamic) or {low}..{high}"
            if not low <= budget <= high:
                off = "0 (off), " if can_turn_off else ""
                return f"{name} takes -1 (dynamic), {off}or {low}..{high}, got {budget}"
            return None
    return None
