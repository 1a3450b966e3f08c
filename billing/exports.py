"""The ledger as CSV, streamed: rows are read from the database a chunk at a
time and written out as they come, so memory stays flat on any size."""

from __future__ import annotations

import csv
from collections.abc import AsyncIterator, Generator, Iterable, Iterator
from itertools import islice

from asgiref.sync import sync_to_async
from django.db.models import QuerySet

# The header row, and what each column is read from.
COLUMNS = ["created_at", "turn_id", "model", "input_tokens", "output_tokens", "estimated", "cost", "turn_status"]
CHUNK_ROWS = 2000
# A spreadsheet runs a cell that starts with one of these as a formula.
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


class _Echo:
    """A file that hands back what is written, so csv.writer formats one row at a time."""

    def write(self, value: str) -> str:
        return value


def _text(value: str) -> str:
    return "'" + value if value.startswith(FORMULA_STARTS) else value


def _lines(rows: Iterable[tuple]) -> Iterator[str]:
    writer = csv.writer(_Echo())
    yield writer.writerow(COLUMNS)
    for created_at, turn_id, model, input_tokens, output_tokens, estimated, cost, status in rows:
        yield writer.writerow(
            [
                created_at.isoformat(),
                turn_id,
                _text(model),
                input_tokens,
                output_tokens,
                "true" if estimated else "false",
                cost,
                _text(status),
            ]
        )


def csv_chunks(entries: QuerySet) -> Generator[str, None, None]:
    """The entries as CSV text, CHUNK_ROWS rows per chunk. `entries` must
    have the turn's status annotated as `turn_status`."""
    rows = entries.values_list(*COLUMNS).iterator(chunk_size=CHUNK_ROWS)
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
