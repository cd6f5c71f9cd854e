"""A local OpenAI-compatible chat server with scripted replies, over real HTTP on 127.0.0.1.

Each POST to .../chat/completions takes the next scripted Reply: text (good code, broken
code, cheating code, a JSON plan), an HTTP error status (429, 500), or a delay longer than
the client's timeout. Requests are recorded so tests can assert what the client sent.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HOST = "127.0.0.1"  # the only address it listens on


@dataclass(frozen=True)
class Reply:
    content: str = ""
    status: int = 200
    delay_s: float = 0.0  # longer than the client's timeout = a timeout
    prompt_tokens: int = 120
    completion_tokens: int = 80


class FakeLLMServer:
    def __init__(self, replies: list[Reply]) -> None:
        self.replies = list(replies)
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
                length = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(length) or b"{}")
                reply = server._next(body, self.path)
                if reply.delay_s:
                    time.sleep(reply.delay_s)
                payload: dict[str, Any]
                if reply.status != 200:
                    payload = {
                        "error": {"message": f"scripted status {reply.status}", "type": "fake"}
                    }
                else:
                    payload = {
                        "id": f"fake-{len(server.requests)}",
                        "object": "chat.completion",
                        "created": int(time.time()),
                        "model": body.get("model", "fake"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": reply.content},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {
                            "prompt_tokens": reply.prompt_tokens,
                            "completion_tokens": reply.completion_tokens,
                            "total_tokens": reply.prompt_tokens + reply.completion_tokens,
                        },
                    }
                data = json.dumps(payload).encode()
                try:
                    self.send_response(reply.status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a scripted timeout)

            def log_message(self, *args: Any) -> None:
                return None

        self._server = ThreadingHTTPServer((HOST, 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _next(self, body: dict[str, Any], path: str) -> Reply:
        with self._lock:
            self.requests.append({"path": path, **body})
            if not self.replies:
                return Reply(status=500, content="script exhausted")
            return self.replies.pop(0)

    @property
    def api_base(self) -> str:
        port = self._server.server_address[1]
        return f"http://{HOST}:{port}/v1"

    def __enter__(self) -> FakeLLMServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
