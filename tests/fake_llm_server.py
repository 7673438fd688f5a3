"""A scripted HTTP server on 127.0.0.1 that speaks the OpenAI chat-completions and Gemini
generateContent wire formats, for testing the real SDK clients with faults.

Each request takes the next step of the script (the last step repeats): a status code,
a reply text, an optional delay, and for thinking models how many thinking tokens the
answer costs. Every request is recorded (path, headers, JSON body).

Requests a real service refuses are refused here too, with that service's HTTP status and
error body, by model family (the rules are written out here on purpose, independently of
the code under test, from the services' documentation and observed error bodies):

* OpenAI reasoning models (gpt-5*, o1*, o3*, o4*): ``max_tokens`` and any ``temperature`` /
  ``top_p`` other than 1 are refused; reasoning tokens count against
  ``max_completion_tokens``, so a small limit gives an empty answer, finish reason ``length``.
* Moonshot kimi-k2.5 / kimi-k2.6: temperature is fixed (1 with thinking, the default; 0.6 with
  ``thinking: {type: disabled}``), as are top_p 0.95, n 1 and both penalties 0.
* Gemini 2.5 generateContent: thinking budgets outside the model's range are refused (Pro cannot
  turn thinking off); thinking tokens count against ``maxOutputTokens``, so thinking can eat the
  whole answer: a candidate without parts, finish reason ``MAX_TOKENS``.
"""

from __future__ import annotations

import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

#: Thinking tokens a thinking model spends on an answer when the step does not say.
DEFAULT_THOUGHTS = 192
#: Tokens in the prompt, and in the answer of a model that does not think (fixed, as tests expect them).
PROMPT_TOKENS, PLAIN_ANSWER_TOKENS = 11, 7


@dataclass
class Step:
    text: str = ""
    status: int = 200
    delay: float = 0.0
    thoughts: int | None = None  # thinking tokens of this answer on a thinking model (None: DEFAULT_THOUGHTS)


def _tokens(text: str) -> int:
    return max(1, len(text) // 4) if text else 0


def _spend(text: str, thoughts: int, limit: int | None) -> tuple[str, int, bool]:
    """(visible text, answer tokens, cut off) when thinking and answer share ``limit`` tokens."""
    answer = _tokens(text)
    if limit is None or thoughts + answer <= limit:
        return text, answer, False
    room = max(0, limit - thoughts)
    return text[: room * 4], room, True


def _number(value: Any) -> str:
    return f"{value:g}" if isinstance(value, (int, float)) and not isinstance(value, bool) else json.dumps(value)


# --------------------------------------------------------------- OpenAI chat completions

_OPENAI_REASONING = re.compile(r"^(gpt-5|o1|o3|o4)\b")
_KIMI_FIXED = re.compile(r"^kimi-k2\.[56]\b")


def _openai_error(message: str, type_: str, param: str | None, code: str | None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "param": param, "code": code}}


def _openai_refusal(model: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    if not _OPENAI_REASONING.match(model):
        return None
    if "max_tokens" in body:
        return 400, _openai_error(
            "Unsupported parameter: 'max_tokens' is not supported with this model. Use 'max_completion_tokens' instead.",
            "invalid_request_error", "max_tokens", "unsupported_parameter",
        )
    for name in ("temperature", "top_p"):
        if name in body and body[name] is not None and body[name] != 1:
            return 400, _openai_error(
                f"Unsupported value: '{name}' does not support {_number(body[name])} with this model. Only the default (1) value is supported.",
                "invalid_request_error", name, "unsupported_value",
            )
    return None


def _moonshot_refusal(model: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]] | None:
    if not _KIMI_FIXED.match(model):
        return None
    thinking = body.get("thinking") or {"type": "enabled"}
    if not isinstance(thinking, dict) or thinking.get("type") not in ("enabled", "disabled"):
        return 400, {"error": {"message": "invalid thinking: type must be enabled or disabled", "type": "invalid_request_error"}}
    fixed = {
        "temperature": 1.0 if thinking["type"] == "enabled" else 0.6,
        "top_p": 0.95, "n": 1, "presence_penalty": 0.0, "frequency_penalty": 0.0,
    }
    for name, allowed in fixed.items():
        value = body.get(name)
        if value is not None and (not isinstance(value, (int, float)) or abs(value - allowed) > 1e-9):
            return 400, {"error": {"message": f"invalid {name}: only {_number(allowed)} is allowed for this model", "type": "invalid_request_error"}}
    return None


def _chat(body: dict[str, Any], step: Step, index: int) -> tuple[int, dict[str, Any]]:
    model = str(body.get("model", "fake")).rsplit("/", 1)[-1]
    refusal = _openai_refusal(model, body) or _moonshot_refusal(model, body)
    if refusal:
        return refusal
    message: dict[str, Any] = {"role": "assistant", "content": step.text}
    usage: dict[str, Any] = {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": PLAIN_ANSWER_TOKENS, "total_tokens": PROMPT_TOKENS + PLAIN_ANSWER_TOKENS}
    finish = "stop"
    thinking_kimi = _KIMI_FIXED.match(model) and (body.get("thinking") or {}).get("type", "enabled") == "enabled"
    if _OPENAI_REASONING.match(model) or thinking_kimi:
        limit = body.get("max_completion_tokens", body.get("max_tokens"))
        budget = step.thoughts if step.thoughts is not None else DEFAULT_THOUGHTS
        thoughts = min(budget, limit) if limit is not None else budget
        text, answer, cut = _spend(step.text, thoughts, limit)
        message["content"] = text
        if thinking_kimi:
            message["reasoning_content"] = "thinking ..."
        finish = "length" if cut else "stop"
        usage = {
            "prompt_tokens": PROMPT_TOKENS, "completion_tokens": thoughts + answer, "total_tokens": PROMPT_TOKENS + thoughts + answer,
            "completion_tokens_details": {"reasoning_tokens": thoughts},
        }
    return 200, {
        "id": f"chatcmpl-{index}", "object": "chat.completion", "created": 0, "model": body.get("model", "fake"),
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage,
    }


# ------------------------------------------------------------------- Gemini generateContent

#: (model prefix, smallest budget, largest budget, whether 0 turns thinking off); most specific first.
_GEMINI_THINKING = (
    ("gemini-2.5-flash-lite", 512, 24576, True),
    ("gemini-2.5-flash", 1, 24576, True),
    ("gemini-2.5-pro", 128, 32768, False),
)


def _gemini_error(message: str) -> tuple[int, dict[str, Any]]:
    return 400, {"error": {"code": 400, "message": message, "status": "INVALID_ARGUMENT"}}


def field_of(data: dict[str, Any], camel: str) -> Any:
    """A request field by its JSON name or its proto name: the service's JSON parser takes both
    (``thinkingBudget`` / ``thinking_budget``), and SDK versions differ in which they send."""
    snake = re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), camel)
    return data.get(camel, data.get(snake))


def _generate(path: str, body: dict[str, Any], step: Step) -> tuple[int, dict[str, Any]]:
    model = path.split("/models/", 1)[-1].split(":", 1)[0]
    generation = field_of(body, "generationConfig") or {}
    limit = field_of(generation, "maxOutputTokens")
    budget = field_of(field_of(generation, "thinkingConfig") or {}, "thinkingBudget")
    family = next((f for f in _GEMINI_THINKING if model.startswith(f[0])), None)
    if family is None:
        return 200, {
            "candidates": [{"content": {"role": "model", "parts": [{"text": step.text}]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": PROMPT_TOKENS, "candidatesTokenCount": PLAIN_ANSWER_TOKENS, "totalTokenCount": PROMPT_TOKENS + PLAIN_ANSWER_TOKENS},
            "modelVersion": model,
        }
    _, low, high, can_turn_off = family
    if budget == 0 and not can_turn_off:
        return _gemini_error("Budget 0 is invalid. This model only works in thinking mode.")
    if budget is not None and budget not in (-1, 0) and not low <= budget <= high:
        return _gemini_error(f"The thinking budget {budget} is invalid. Please choose a value between {low} and {high}.")
    wanted = step.thoughts if step.thoughts is not None else DEFAULT_THOUGHTS
    thoughts = 0 if budget == 0 else wanted if budget in (None, -1) else min(wanted, budget)
    if limit is not None:
        thoughts = min(thoughts, limit)
    text, answer, cut = _spend(step.text, thoughts, limit)
    content: dict[str, Any] = {"role": "model"}
    if text:
        content["parts"] = [{"text": text}]
    usage: dict[str, Any] = {"promptTokenCount": PROMPT_TOKENS, "totalTokenCount": PROMPT_TOKENS + thoughts + answer}
    if answer:
        usage["candidatesTokenCount"] = answer
    if thoughts:
        usage["thoughtsTokenCount"] = thoughts
    return 200, {
        "candidates": [{"content": content, "finishReason": "MAX_TOKENS" if cut else "STOP", "index": 0}],
        "usageMetadata": usage,
        "modelVersion": model,
    }


# ----------------------------------------------------------------------------- the server


@dataclass
class FakeLLMServer:
    script: list[Step] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        server = self
        lock = threading.Lock()

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except ValueError:
                    body = {"_raw": raw.decode("utf-8", "replace")}
                with lock:  # concurrent policy calls each take their own step
                    index = len(server.requests)
                    server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                step = server.script[min(index, len(server.script) - 1)] if server.script else Step("")
                if step.delay:
                    time.sleep(step.delay)
                if step.status != 200:
                    status = step.status
                    payload: dict[str, Any] = {"error": {"code": step.status, "message": f"scripted {step.status}", "status": "UNAVAILABLE" if step.status >= 500 else "RESOURCE_EXHAUSTED"}}
                elif ":generateContent" in self.path:
                    status, payload = _generate(self.path, body, step)
                else:
                    status, payload = _chat(body, step, index)
                data = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    if status == 429:
                        self.send_header("Retry-After", "0")
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}"

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
