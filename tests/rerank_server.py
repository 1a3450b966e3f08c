"""A scripted rerank endpoint (POST .../rerank), faked at the wire.

A real HTTP/1.1 server on a loopback port (tests/json_server.py). It scores
each document as a cross-encoder would, by a rule the test sets: `prefer` (a
substring) scores 0.9 in the documents that hold it and 0.1 elsewhere. It
answers in the shape a test asks for (Cohere's and Jina's `results` with
`relevance_score`, Voyage's `data`, or a bare list with `score`), and plays
faults: an HTTP error, a stall, an answer that is not a ranking. Every
request's body is kept."""

from __future__ import annotations

import time
from typing import Any

from tests.json_server import JSONServer


class RerankServer(JSONServer):
    path = "/rerank"

    def __init__(self) -> None:
        super().__init__()
        self.prefer = ""
        self.shape = "results"  # "results" (Cohere, Jina, vLLM), "data" (Voyage) or "list"
        self.usage = True
        self.status = 200
        self.stall = 0.0
        self.garbage: Any = None  # answered as it is, instead of a ranking

    def answer(self, body: Any) -> tuple[int, Any]:
        if self.stall:
            time.sleep(self.stall)
        if self.status != 200:
            return self.status, {"error": {"message": "scripted failure"}}
        if self.garbage is not None:
            return 200, self.garbage
        scored = [
            {"index": i, "score": 0.9 if self.prefer and self.prefer in text else 0.1}
            for i, text in enumerate(body["documents"])
        ]
        scored.sort(key=lambda s: -s["score"])  # as rerank endpoints do: best first
        if self.shape == "list":
            return 200, scored
        items = [{"index": s["index"], "relevance_score": s["score"]} for s in scored]
        answer: dict[str, Any] = {self.shape: items, "model": body.get("model")}
        if self.usage:
            tokens = len(body["query"].split()) * len(items) + sum(len(d.split()) for d in body["documents"])
            answer["usage"] = {"total_tokens": tokens}
        return 200, answer
