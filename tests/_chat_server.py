"""A tiny OpenAI-compatible chat server on loopback, for tests of the real HTTP client."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ChatServer:
    """A tiny OpenAI-compatible chat server: canned answers, requests recorded."""

    def __init__(self) -> None:
        self.answers: list[tuple[int, dict[str, Any] | str]] = []
        self.requests: list[dict[str, Any]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.requests.append(
                    {"path": self.path, "body": body, "auth": self.headers.get("Authorization")}
                )
                status, payload = server.answers.pop(0)
                data = payload if isinstance(payload, str) else json.dumps(payload)
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(data.encode())

            def log_message(self, *args: Any) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def completion(self, text: str, prompt: int = 40, completion: int = 9) -> None:
        self.answers.append(
            (
                200,
                {
                    "id": "c1",
                    "object": "chat.completion",
                    "model": "tiny-1",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": text},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": prompt,
                        "completion_tokens": completion,
                        "total_tokens": prompt + completion,
                    },
                },
            )
        )

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def serve() -> Iterator[ChatServer]:
    """A server, closed after use: ``chat = pytest.fixture(serve)`` makes it a fixture."""
    server = ChatServer()
    yield server
    server.close()
