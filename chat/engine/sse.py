"""The provider's stream, decoded: server-sent events from bytes, and Chat
Completions chunks from their data, whose fields `field` reads leniently.
Apart from the client that reads the bytes (chat/engine/provider.py), and
Django-free."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from chat.engine import fastjson, provider_errors


def chunk(event: str) -> Any:
    """An event's data as a Chat Completions chunk. Raises StreamError for
    data that is not JSON, or an error object in the stream."""
    try:
        chunk = fastjson.loads(event)
    except (ValueError, RecursionError) as exc:
        raise provider_errors.not_json(exc) from None
    if (type(chunk) is dict or isinstance(chunk, Mapping)) and chunk.get("error"):
        raise provider_errors.error_event(chunk["error"])
    return chunk


def field(obj: Any, name: str) -> Any:
    """Reads a field from a parsed chunk part, tolerating absent or null parts."""
    if type(obj) is dict:  # what the JSON decoder gives: checked first, as the ABC check costs more
        return obj.get(name)
    if obj is None:
        return None
    if isinstance(obj, Mapping):
        return obj.get(name)
    value = getattr(obj, name, None)
    if value is None:
        extra = getattr(obj, "model_extra", None) or {}
        value = extra.get(name)
    return value


BOM = b"\xef\xbb\xbf"


class EventParser:
    """Server-sent events, incrementally: feed bytes, get the data of each
    complete event. Lines end in LF, CR or CRLF; comments and other fields
    are skipped; an event cut off by the end of the stream is dropped."""

    def __init__(self) -> None:
        self._partial = b""
        self._after_cr = False  # a line ended in CR: a leading LF next is its CRLF's
        self._started = False
        self._data: list[str] = []

    def feed(self, data: bytes) -> list[str]:
        if not data:
            return []  # an empty read must not use up a pending CR's LF
        if self._after_cr:
            # The stream's last byte was a CR: an LF now completes its CRLF.
            self._after_cr = False
            data = data.removeprefix(b"\n")
        data = self._partial + data
        if not self._started:
            if len(data) < len(BOM) and BOM.startswith(data):
                self._partial = data  # maybe a BOM, cut by the read: wait
                return []
            self._started = True
            data = data.removeprefix(BOM)
        if not data:
            self._partial = b""
            return []
        self._after_cr = data.endswith(b"\r")
        lines = data.splitlines(keepends=True)
        self._partial = b"" if lines[-1].endswith((b"\n", b"\r")) else lines.pop()
        events: list[str] = []
        for raw in lines:
            line = raw.rstrip(b"\r\n").decode()
            if not line:
                if self._data:
                    events.append("\n".join(self._data))
                    self._data = []
                continue
            name, _, value = line.partition(":")
            if name == "data":
                self._data.append(value[1:] if value.startswith(" ") else value)
        return events


def says_something(chunk: Any) -> bool:
    """Whether a chunk carries output (an opening role chunk does not)."""
    if not isinstance(chunk, Mapping):
        return False
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") if isinstance(choice, Mapping) else None
        if isinstance(delta, Mapping) and any(
            delta.get(name) for name in ("content", "tool_calls", "reasoning_content", "reasoning")
        ):
            return True
    return False
