"""Text as the database stores it and a browser shows it."""

from __future__ import annotations


def storable(text: str) -> str:
    """Text any database stores and any browser shows: no NUL, no lone
    surrogate (a provider can send both as JSON escapes)."""
    text = text.replace("\x00", "\ufffd")
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
