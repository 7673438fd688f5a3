"""A scripted HTTP server on 127.0.0.1 that speaks the OpenAI chat-completions and Gemini
generateContent wire formats, for testing the real SDK clients with faults.

Each request takes the next step of the script (the last step repeats): a status code,
a reply text, an optional delay. Every request is recorded (path, headers, JSON body).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Step:
    text: str = ""
    status: int = 200
    delay: float = 0.0


@dataclass
class FakeLLMServer:
    script: list[Step] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        server = self

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
                index = len(server.requests)
                server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                step = server.script[min(index, len(server.script) - 1)] if server.script else Step("")
                if step.delay:
                    time.sleep(step.delay)
                if step.status != 200:
                    payload = {"error": {"code": step.status, "message": f"scripted {step.status}", "status": "UNAVAILABLE" if step.status >= 500 else "RESOURCE_EXHAUSTED"}}
                elif ":generateContent" in self.path:
                    payload = {
                        "candidates": [{"content": {"role": "model", "parts": [{"text": step.text}]}, "finishReason": "STOP", "index": 0}],
                        "usageMetadata": {"promptTokenCount": 11, "candidatesTokenCount": 7, "totalTokenCount": 18},
                        "modelVersion": "fake",
                    }
                else:
                    payload = {
                        "id": f"chatcmpl-{index}", "object": "chat.completion", "created": 0, "model": body.get("model", "fake"),
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": step.text}, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
                    }
                data = json.dumps(payload).encode()
                try:
                    self.send_response(step.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    if step.status == 429:
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
