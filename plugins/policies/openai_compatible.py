"""API models as policies that answer a task's prompts (the MAPF paper's baseline rows), over any OpenAI-compatible endpoint.

One chat-completions call per response, ``concurrency`` at a time, carrying only the
parameters the model family accepts (``envengineer.plugins._shared.api_params``, shared with the API
engineers: gpt-5 gets ``max_completion_tokens`` and no temperature). The SDK retries rate
limits, server errors and timeouts (``max_retries``); a call that still fails, or an answer
with no text, gives an empty response, which the validator scores as a parse failure, and is
recorded in :meth:`OpenAICompatiblePolicy.failed_calls` (``envengineer eval`` reports them).
The ``openai`` SDK is imported inside the methods; the API key comes from the environment
variable named by ``api_key_env`` and is never written anywhere, errors included.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from envengineer.api import ConfigError, Policy
from envengineer.plugins._shared.api_params import TokenField, chat_sampling


class OpenAICompatibleOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str = Field(..., description="model name sent to the API")
    base_url: str | None = Field(None, description="API base URL, e.g. http://127.0.0.1:8000/v1 (default: OpenAI's)")
    api_key_env: str | None = Field("OPENAI_API_KEY", description="environment variable holding the API key (unset: a placeholder key, for local servers)")
    prompt_style: str = Field("full", min_length=1, description="how the task renders prompts for this policy: one of the task's declared prompt styles (the built-in families: full, compact)")
    temperature: float = Field(0.0, ge=0.0, le=2.0, description="sampling temperature, sent only where the model accepts one (see send_temperature)")
    send_temperature: bool | None = Field(None, description="send `temperature` (null: unless the model family fixes it, e.g. gpt-5, o3, kimi-k2.5)")
    max_tokens: int = Field(4096, ge=1, description="most tokens in one answer (reasoning models: reasoning included)")
    max_tokens_field: TokenField | None = Field(
        None, description="the request field that carries max_tokens (null: max_completion_tokens for OpenAI's endpoint and reasoning models, else max_tokens)"
    )
    timeout: float = Field(300.0, gt=0, description="seconds before one call times out")
    max_retries: int = Field(4, ge=0, le=20, description="SDK retries of one call on 429, 5xx, timeouts")
    concurrency: int = Field(8, ge=1, le=256, description="calls in flight at once")
    seed: int | None = Field(None, description="sent as the API's seed when set")


class OpenAICompatiblePolicy(Policy):
    name: ClassVar[str] = "openai-compatible"
    description: ClassVar[str] = "an API model behind an OpenAI-compatible chat-completions endpoint"
    Options: ClassVar[type[BaseModel]] = OpenAICompatibleOptions
    has_weights: ClassVar[bool] = False
    options: OpenAICompatibleOptions

    def __init__(self, options: BaseModel | None = None) -> None:
        super().__init__(options)
        self.errors: list[str] = []
        self.usage = {"prompt_tokens": 0, "completion_tokens": 0, "calls": 0}
        self._lock = threading.Lock()
        self._key: str | None = None

    def failed_calls(self) -> Sequence[str]:
        return list(self.errors)

    def request_params(self) -> dict[str, Any]:
        o = self.options
        params = chat_sampling(o.model, o.base_url, temperature=o.temperature, max_tokens=o.max_tokens,
                               send_temperature=o.send_temperature, max_tokens_field=o.max_tokens_field)
        if o.seed is not None:
            params["seed"] = o.seed
        return params

    def prepare(self, *, generator: Any = None, force: bool = False, progress: Any = None) -> Path:
        raise ConfigError(f"policy.{self.name}: an API model has no weights to train; use it for evaluation only")

    def with_path(self, path: str | Path) -> "OpenAICompatiblePolicy":
        return self

    def describe(self) -> dict[str, Any]:
        o = self.options
        return {"policy": self.name, "model": o.model, "base_url": o.base_url, **self.request_params()}

    def _client(self) -> Any:
        from openai import OpenAI

        o = self.options
        key = os.environ.get(o.api_key_env) if o.api_key_env else None
        if not key:
            if o.base_url is None:
                raise ConfigError(f"policy.{self.name}.api_key_env: environment variable {o.api_key_env!r} is not set")
            key = "EMPTY"  # local servers (vLLM serve) accept any key
        else:
            self._key = key
        return OpenAI(api_key=key, base_url=o.base_url, timeout=o.timeout, max_retries=o.max_retries)

    def _fail(self, error: str) -> str:
        if self._key:
            error = error.replace(self._key, "[REDACTED]")
        with self._lock:
            self.errors.append(error)
        return ""

    def _one(self, client: Any, messages: list[dict[str, str]]) -> str:
        kwargs: dict[str, Any] = {"model": self.options.model, "messages": messages, **self.request_params()}
        try:
            reply = client.chat.completions.create(**kwargs)
        except Exception as exc:  # after the SDK's retries: score as an empty answer
            return self._fail(f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}")
        usage = reply.usage
        with self._lock:
            self.usage["calls"] += 1
            if usage is not None:
                self.usage["prompt_tokens"] += usage.prompt_tokens or 0
                self.usage["completion_tokens"] += usage.completion_tokens or 0
        choice = reply.choices[0] if reply.choices else None
        text = (choice.message.content or "") if choice is not None else ""
        if not text.strip():
            finish = choice.finish_reason if choice is not None else "no choices"
            used = usage.completion_tokens if usage is not None else 0
            hint = ": the token limit ran out (reasoning included); raise max_tokens" if finish == "length" else ""
            return self._fail(f"EmptyAnswer: {self.options.model} returned no text (finish reason {finish}; {used} output tokens; max_tokens {self.options.max_tokens}){hint}")
        return text

    def sample(self, prompts: Sequence[list[dict[str, str]] | str], *, n: int = 1) -> list[list[str]]:
        """``n`` responses per prompt, in prompt order."""
        if n < 1:
            raise ValueError(f"n: must be at least 1, got {n}")
        client = self._client()
        jobs = []
        for prompt in prompts:
            messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
            jobs += [messages] * n
        with ThreadPoolExecutor(max_workers=self.options.concurrency) as pool:
            texts = list(pool.map(lambda m: self._one(client, m), jobs))
        return [texts[i * n : (i + 1) * n] for i in range(len(prompts))]
