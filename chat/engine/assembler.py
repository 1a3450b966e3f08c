"""Tool calls rebuilt from the fragments a round streams, whatever the
provider's way of cutting them. The round loop (rounds.py) hands each
fragment on as it comes and runs the calls once the round has ended.
Django-free."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from chat.engine import sse

KNOWN_CALL_FIELDS = frozenset({"index", "id", "type", "function"})


@dataclass
class ToolRequest:
    """A tool call the model asked for, assembled from its fragments; its
    result or error once it ran. (Stored as chat.models.ToolCall.)"""

    call_id: str
    name: str = ""
    arguments: str = ""
    # Fields a provider attaches to a call and expects back with it (Gemini's
    # thought signatures in "extra_content", for one).
    extra: dict[str, Any] = field(default_factory=dict)
    result: Any = None
    error: str = ""


class ToolCallAssembler:
    """Rebuilds tool calls from streamed fragments.

    Fragments are keyed by `index`; `id` and `name` are taken from the first
    fragment that carries them and never concatenated; `arguments` are. Some
    providers omit `index` (fall back on the id), reuse an index for a call
    with another id (a new call), or send empty strings for absent fields.
    """

    def __init__(self) -> None:
        self.calls: list[ToolRequest] = []
        self._by_index: dict[Any, ToolRequest] = {}

    def add(self, fragment: Any) -> None:
        call_id = sse.field(fragment, "id") or ""
        function = sse.field(fragment, "function")
        name = sse.field(function, "name") or ""
        arguments = sse.field(function, "arguments")
        call = self._call_for(sse.field(fragment, "index"), call_id, name, arguments)
        if call_id and not call.call_id:
            call.call_id = call_id
        if name and not call.name:
            call.name = name
        for key, value in _extra_fields(fragment).items():
            call.extra.setdefault(key, value)
        if isinstance(arguments, str):
            call.arguments += arguments
        elif arguments is not None:
            # A few servers send the arguments as an object, whole.
            call.arguments = json.dumps(arguments)

    def _call_for(self, index: Any, call_id: str, name: str, arguments: Any) -> ToolRequest:
        if index is None:
            return self._call_by_id(call_id, name, arguments)
        call = self._by_index.get(index)
        if (
            call is None
            or (call_id and call.call_id and call.call_id != call_id)
            or (not call_id and _starts_another(call, name, arguments))
        ):
            call = self._new_call()
            self._by_index[index] = call
        return call

    def _call_by_id(self, call_id: str, name: str, arguments: Any) -> ToolRequest:
        for call in self.calls:
            if call_id and call.call_id == call_id:
                return call
        if not call_id and self.calls and not _starts_another(self.calls[-1], name, arguments):
            return self.calls[-1]  # a continuation of the latest call
        return self._new_call()

    def _new_call(self) -> ToolRequest:
        call = ToolRequest(call_id="")
        self.calls.append(call)
        return call


def _starts_another(latest: ToolRequest, name: str, arguments: Any) -> bool:
    """A named fragment with arguments but no id of its own, after a call
    that is already complete, is a new call (whole calls, one per chunk)."""
    if not name or not arguments or not latest.name:
        return False
    try:
        json.loads(latest.arguments)
    except ValueError:
        return False
    return True


def _extra_fields(fragment: Any) -> dict[str, Any]:
    if isinstance(fragment, Mapping):
        extra = {k: v for k, v in fragment.items() if k not in KNOWN_CALL_FIELDS}
    else:
        extra = dict(getattr(fragment, "model_extra", None) or {})
    return {k: v for k, v in extra.items() if v is not None}
