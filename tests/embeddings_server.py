"""A scripted OpenAI-compatible /v1/embeddings server, faked at the wire.

A real HTTP/1.1 server on a loopback port, in a thread of the test's
process (the indexer calls it from a thread, a search from the event loop).
By default it answers every request with vectors that mean something: a
hashed bag of the text's words, so that a query is closest to the passages
that share its words. A test can queue faults for the next requests (an
HTTP error, a stall past the client's timeout, vectors of the wrong size or
number) and read every request it got.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

DIMENSIONS = 64


def vector(text: str, dimensions: int = DIMENSIONS) -> list[float]:
    found = np.zeros(dimensions, dtype=np.float32)
    for word in re.findall(r"\w+", text.lower()):
        found[int(hashlib.md5(word.encode()).hexdigest(), 16) % dimensions] += 1.0
    found[0] += 0.01  # never the zero vector
    return (found / np.linalg.norm(found)).tolist()


@dataclass
class Fault:
    status: int = 200  # an HTTP error when not 200
    stall: float = 0.0  # seconds to wait before answering
    dimensions: int | None = None  # vectors of another size
    drop: int = 0  # vectors left out of the answer
    usage: bool = True  # report usage


class EmbeddingsServer:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.faults: deque[Fault] = deque()
        self.always: Fault | None = None
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            close_connection = True

            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
                server.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
                fault = server.faults.popleft() if server.faults else (server.always or Fault())
                if fault.stall:
                    time.sleep(fault.stall)
                if fault.status != 200:
                    return self._send(fault.status, {"error": {"message": "scripted failure", "type": "server_error"}})
                texts = body["input"] if isinstance(body["input"], list) else [body["input"]]
                size = fault.dimensions or DIMENSIONS
                data = [
                    {"object": "embedding", "index": i, "embedding": vector(t, size)}
                    for i, t in enumerate(texts[: len(texts) - fault.drop])
                ]
                tokens = sum(len(t.split()) for t in texts)
                answer: dict[str, Any] = {"object": "list", "data": data, "model": body.get("model")}
                if fault.usage:
                    answer["usage"] = {"prompt_tokens": tokens, "total_tokens": tokens}
                self._send(200, answer)

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                raw = json.dumps(payload).encode()
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(raw)))
                    # No connection kept in a client's pool past its test's event loop.
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(raw)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (its timeout)

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        # A short poll: shutdown() waits for it, at the end of every test.
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def __enter__(self) -> EmbeddingsServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def inputs(self) -> list[list[str]]:
        """The texts of each request, in order."""
        return [r["body"]["input"] for r in self.requests]
