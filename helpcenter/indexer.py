"""Embeds the passages that have no vector under the configured model: in
the background, in batches, retried, never on a visitor's turn.

Each process has one indexer thread, woken (kick) when an article is saved
and whenever its index finds passages without vectors: after an edit, an
import, a change of model, or a process that died mid-batch. Several
processes may embed the same passage at once; the vector is stored once
(one per model and digest), and each call is billed as it was made.
`manage.py reindex_help_center` does all of it at once, in the foreground.
"""

from __future__ import annotations

import logging
import threading
import time

import numpy as np
from django.conf import settings
from django.db import close_old_connections, transaction
from django.db.models.signals import post_save
from django.dispatch import Signal, receiver

from helpcenter import embeddings, index
from helpcenter.models import Article, PassageVector
from helpcenter.passages import Passage

logger = logging.getLogger("kookee.helpcenter")

# Characters per token of a typical tokenizer, for a server that reports no usage.
CHARS_PER_TOKEN = 4.0

# Sent after each batch a billed model embedded: model (str), tokens (int),
# passages (int). Billing records it (chat connects it to the ledger: this
# app knows nothing of billing).
embedded = Signal()

BACKOFF_SECONDS = (1, 2, 5, 15, 60)
# Off in tests, which embed in the foreground (embed_missing) unless a test
# is about the background.
ENABLED = True


def missing(model: str) -> list[Passage]:
    """The published passages with no vector under the model, each text once."""
    stored = set(PassageVector.objects.filter(model=model).values_list("digest", flat=True))
    found: dict[str, Passage] = {}
    for article in index.published_passages().values():
        for passage in article:
            if passage.digest not in stored:
                found.setdefault(passage.digest, passage)
    return list(found.values())


def embed_missing() -> int:
    """Embeds every passage missing a vector, a batch at a time; returns how
    many. Raises EmbeddingError on the first batch that fails (what was
    stored before it stays)."""
    embedder = embeddings.embedder()
    if embedder is None:
        return 0
    pending = missing(embedder.model)
    batch = max(1, settings.KOOKEE_EMBEDDINGS_BATCH)
    for start in range(0, len(pending), batch):
        _store(embedder, pending[start : start + batch])
    if pending:
        index.forget()
    return len(pending)


def _store(embedder: embeddings.Embedder, batch: list[Passage]) -> None:
    done = embedder.passages([p.embedded for p in batch])
    size = done.vectors.shape[1]
    # A model that now answers in another size (a new version under the
    # same name, or a `dimensions` change) makes every stored vector stale.
    PassageVector.objects.filter(model=embedder.model).exclude(dimensions=size).delete()
    PassageVector.objects.bulk_create(
        [
            PassageVector(model=embedder.model, digest=p.digest, dimensions=size, vector=_bytes(v))
            for p, v in zip(batch, done.vectors, strict=True)
        ],
        ignore_conflicts=True,
    )
    if embedder.billed:
        # A server that reports no usage is billed an estimate, never nothing.
        tokens = done.tokens or estimated_tokens([p.embedded for p in batch])
        embedded.send(sender=PassageVector, model=embedder.model, tokens=tokens, passages=len(batch))


def estimated_tokens(texts: list[str]) -> int:
    return max(1, round(sum(len(t) for t in texts) / CHARS_PER_TOKEN))


def _bytes(vector: np.ndarray) -> bytes:
    return vector.astype("<f4").tobytes()


def reindex(prune: bool = True) -> tuple[int, int]:
    """Embeds what is missing now; with prune, deletes the vectors that no
    published passage uses under the current model, and every other
    model's. Returns (embedded, deleted)."""
    embedder = embeddings.embedder()
    done = embed_missing()
    deleted = 0
    if prune:
        used = {p.digest for found in index.published_passages().values() for p in found}
        stale = PassageVector.objects.exclude(model=embedder.model) if embedder else PassageVector.objects.all()
        deleted = stale.delete()[0]
        if embedder is not None:
            unused = [
                pk
                for pk, digest in PassageVector.objects.filter(model=embedder.model).values_list("pk", "digest")
                if digest not in used
            ]
            for start in range(0, len(unused), 500):
                deleted += PassageVector.objects.filter(pk__in=unused[start : start + 500]).delete()[0]
        index.forget()
    return done, deleted


@receiver(post_save, sender=Article)
def _article_saved(**kwargs) -> None:
    transaction.on_commit(kick)


# The background thread: one per process, started on the first kick.
_wake = threading.Event()
_thread: threading.Thread | None = None
_thread_lock = threading.Lock()
state: dict[str, int | str] = {"runs": 0, "failures": 0, "last_error": ""}


def kick() -> None:
    """Asks this process's indexer to embed what is missing, soon."""
    global _thread
    if not ENABLED or embeddings.embedder() is None:
        return
    _wake.set()
    with _thread_lock:
        if _thread is None or not _thread.is_alive():
            _thread = threading.Thread(target=_run, name="kookee-indexer", daemon=True)
            _thread.start()


def _run() -> None:
    while True:
        _wake.wait()
        _wake.clear()
        if not ENABLED:
            continue
        try:
            embed_missing()
            state["failures"] = 0
            state["runs"] = int(state["runs"]) + 1
        except Exception as e:  # the endpoint down, or the database: try again later
            failures = state["failures"] = int(state["failures"]) + 1
            state["last_error"] = f"{type(e).__name__}: {e}"[:500]
            delay = BACKOFF_SECONDS[min(failures, len(BACKOFF_SECONDS)) - 1]
            logger.warning("embedding the help center failed (%s), retrying in %ss", state["last_error"], delay)
            time.sleep(delay)
            _wake.set()
        finally:
            close_old_connections()
