"""A scripted OpenAI-compatible /v1/embeddings server, faked at the wire.

A real HTTP/1.1 server on a loopback port (tests/json_server.py). By default
it answers every request with vectors that mean something: a hashed bag of
the text's words, so that a query is closest to the passages that share its
words. A test can queue faults for the next requests (an HTTP error, a stall
past the client's timeout, vectors of the wrong size or number) and read
every request it got."""

from __future__ import annotations

import hashlib
import re
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from tests.json_server import JSONServer

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


class EmbeddingsServer(JSONServer):
    path = "/embeddings"

    def __init__(self) -> None:
        super().__init__()
        self.faults: deque[Fault] = deque()
        self.always: Fault | None = None

    def answer(self, body: Any) -> tuple[int, Any]:
        fault = self.faults.popleft() if self.faults else (self.always or Fault())
        if fault.stall:
            time.sleep(fault.stall)
        if fault.status != 200:
            return fault.status, {"error": {"message": "scripted failure", "type": "server_error"}}
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
        return 200, answer

    def inputs(self) -> list[list[str]]:
        """The texts of each request, in order."""
        return [r["body"]["input"] for r in self.requests]
