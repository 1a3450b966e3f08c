"""The ledger as CSV, streamed: rows are read from the database a chunk at a
time and written out as they come, so memory stays flat on any size."""

from __future__ import annotations

import csv
from collections.abc import AsyncIterator, Generator, Iterable, Iterator
from decimal import Decimal
from itertools import islice

from asgiref.sync import sync_to_async
from django.db.models import QuerySet
from django.utils import timezone

from billing import days

# The header row, and what each column is read from. The first eight are
# the original export's, in its order; the rest came later.
COLUMNS = [
    "created_at",
    "turn_id",
    "model",
    "input_tokens",
    "output_tokens",
    "estimated",
    "cost",
    "turn_status",
    "cached_input_tokens",
    "reasoning_tokens",
    "conversation",
    "price_id",
    "input_per_million",
    "cached_input_per_million",
    "output_per_million",
]
SOURCES = {"conversation": "turn__conversation__public_id"}
CHUNK_ROWS = 2000
# A spreadsheet runs a cell that starts with one of these as a formula.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


class _Echo:
    """A file that hands back what is written, so csv.writer formats one row at a time."""

    def write(self, value: str) -> str:
        return value


def _text(value: str) -> str:
    return "'" + value if value.startswith(FORMULA_STARTS) else value


def _decimal(value: Decimal | None) -> str:
    """A plain decimal, never an exponent (0E-8) and no trailing zeros; empty
    for none (an unpriced entry's cost)."""
    if value is None:
        return ""
    text = f"{value:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def _lines(rows: Iterable[tuple]) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(COLUMNS)
    zone = days.zone()
    for row in rows:
        entry = dict(zip(COLUMNS, row, strict=True))
        yield writer.writerow(
            [
                # In the site's time zone, with its offset: the admin's days.
                timezone.localtime(entry["created_at"], zone).isoformat(),
                entry["turn_id"],
                _text(entry["model"]),
                entry["input_tokens"],
                entry["output_tokens"],
                "true" if entry["estimated"] else "false",
                _decimal(entry["cost"]),
                _text(entry["turn_status"] or ""),
                entry["cached_input_tokens"],
                entry["reasoning_tokens"],
                entry["conversation"] or "",
                entry["price_id"] or "",
                _decimal(entry["input_per_million"]),
                _decimal(entry["cached_input_per_million"]),
                _decimal(entry["output_per_million"]),
            ]
        )


def csv_chunks(entries: QuerySet) -> Generator[str, None, None]:
    """The entries as CSV text, CHUNK_ROWS rows per chunk. `entries` must
    have the turn's status annotated as `turn_status`."""
    rows = entries.values_list(*(SOURCES.get(c, c) for c in COLUMNS)).iterator(chunk_size=CHUNK_ROWS)
    lines = _lines(rows)
    while chunk := "".join(islice(lines, CHUNK_ROWS)):
        yield chunk


async def in_sync_thread(chunks: Generator[str, None, None]) -> AsyncIterator[str]:
    """`chunks` for an ASGI server. Given a plain iterator, Django's ASGI handler
    reads it to the end into a list before sending anything; this pulls one
    chunk at a time instead, in the request's thread, where its database
    connection lives."""
    next_chunk = sync_to_async(lambda: next(chunks, None), thread_sensitive=True)
    try:
        while (chunk := await next_chunk()) is not None:
            yield chunk
    finally:
        await sync_to_async(chunks.close, thread_sensitive=True)()
