"""Embeds the passages that have no vector under the configured model, each
once across every process, in batches, retried, never on a visitor's turn.

- **Claims.** A worker embeds a passage only while it holds its claim: a
  `PassageClaim` row (model, digest) that it inserted (an insert that
  ignores conflicts, the same on SQLite and PostgreSQL). It renews its
  claims while it embeds, and deletes them in the transaction that stores
  the vectors; a claim not renewed for KOOKEE_INDEXER_LEASE_SECONDS is a
  worker that died, and is taken again. So two processes never ask the
  model (or pay a provider) for the same passage.
- **Who does the bulk.** The commands (`import_help_center`,
  `sync_help_center`, `reindex_help_center`, `load_demo_help_center`) embed
  in the foreground, a large job with a worker process per core for the
  local model (helpcenter/management/embedding.py), and `manage.py run_indexer` runs as a
  service where it is deployed. A web process never embeds itself: its
  indexer thread, woken (kick) when an article is saved or a search finds
  passages without vectors, does nothing while another worker holds live
  claims, and otherwise starts `run_indexer --once` as a low-priority child
  and waits for it. KOOKEE_WEB_INDEXER off leaves all of it to run_indexer.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import quote, urlsplit

import numpy as np
from django.conf import settings
from django.db import close_old_connections, connections, transaction
from django.db.models.signals import post_save
from django.dispatch import Signal, receiver
from django.utils import timezone

from helpcenter import embeddings, index
from helpcenter.models import Article, PassageClaim, PassageVector
from helpcenter.passages import Passage

if TYPE_CHECKING:
    from django.db.backends.sqlite3.base import DatabaseWrapper as SQLiteDatabaseWrapper

logger = logging.getLogger("kookee.helpcenter")

# Characters per token of a typical tokenizer, for a server that reports no usage.
CHARS_PER_TOKEN = 4.0

# Sent after each batch a billed model embedded: model (str), tokens (int),
# passages (int). Billing records it (chat connects it to the ledger: this
# app knows nothing of billing).
embedded = Signal()

BACKOFF_SECONDS = (1, 2, 5, 15, 60)
# How often a worker that waits for another's claims looks again.
POLL_SECONDS = 0.5
CHUNK = 500  # digests per IN (...) query
# Worker processes yield the CPU to the web processes' visitors (nice).
WORKER_NICENESS = 10
# Off in tests, which embed in the foreground (embed_missing) unless a test
# is about the background.
ENABLED = True
# The settings a worker process is given as this process has them (a test's
# or a command's), with the database this process uses.
WORKER_SETTINGS = (
    "KOOKEE_EMBEDDINGS",
    "KOOKEE_EMBEDDINGS_MODEL",
    "KOOKEE_EMBEDDINGS_BASE_URL",
    "KOOKEE_EMBEDDINGS_API_KEY",
    "KOOKEE_EMBEDDINGS_BATCH",
    "KOOKEE_EMBEDDINGS_THREADS",
    "KOOKEE_EMBEDDINGS_PASSAGE_TOKENS",
    "KOOKEE_INDEXER_LEASE_SECONDS",
)


def missing(model: str) -> list[Passage]:
    """The published passages with no vector under the model, each text once."""
    stored = set(PassageVector.objects.filter(model=model).values_list("digest", flat=True))
    found: dict[str, Passage] = {}
    for article in index.published_passages().values():
        for passage in article:
            if passage.digest not in stored:
                found.setdefault(passage.digest, passage)
    return list(found.values())


def embed_missing(wait: bool = True) -> int:
    """Embeds, in this process, every passage missing a vector that no other
    worker is embedding; returns how many. With wait, also waits for the
    others' claims (taking those of a worker that died) until every passage
    has its vector. Raises EmbeddingError on the first batch that fails
    (what was stored before it stays)."""
    embedder = embeddings.embedder()
    if embedder is None:
        return 0
    done = work(embedder, missing(embedder.model), wait=wait)
    if done:
        index.forget()
    return done


def work(
    embedder: embeddings.Embedder,
    pending: list[Passage],
    wait: bool = True,
    on_batch: Callable[[int], None] | None = None,
) -> int:
    """Claims, embeds and stores the pending passages a batch at a time;
    returns how many this worker embedded. Those another worker holds are
    left to it (without wait) or waited for."""
    holder = _holder()
    left = {p.digest: p for p in pending}
    size = max(1, settings.KOOKEE_EMBEDDINGS_BATCH)
    done = 0
    with _renewing(holder):
        try:
            while left:
                mine, busy = _claim(embedder.model, left, holder, size)
                if mine:
                    _store(embedder, [left.pop(digest) for digest in mine], holder)
                    done += len(mine)
                    if on_batch is not None:
                        on_batch(done)
                elif not (busy and wait):
                    break
                else:
                    time.sleep(POLL_SECONDS)
        finally:
            # A batch that failed, or a worker stopped (SIGTERM): its claims
            # are free at once, not after the lease.
            PassageClaim.objects.filter(holder=holder).delete()
    return done


def _holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@contextmanager
def at_work(model: str) -> Iterator[None]:
    """Says that an indexer is at work under the model for as long as it is,
    with a claim on no passage (renewed): the web processes' indexers stay
    out of its way, even while its worker processes start."""
    holder = _holder()
    expires = timezone.now() + timedelta(seconds=settings.KOOKEE_INDEXER_LEASE_SECONDS)
    PassageClaim.objects.create(model=model, digest=f"~{uuid.uuid4().hex}", holder=holder, expires_at=expires)
    try:
        with _renewing(holder):
            yield
    finally:
        PassageClaim.objects.filter(holder=holder).delete()


def _claim(model: str, left: dict[str, Passage], holder: str, size: int) -> tuple[list[str], bool]:
    """Up to `size` of the passages left, claimed for the holder (and those
    embedded since dropped from left); and whether another worker holds
    some of the rest."""
    now = timezone.now()
    PassageClaim.objects.filter(model=model, expires_at__lt=now).delete()  # dead workers'
    free: list[str] = []
    busy = False
    digests = list(left)
    for start in range(0, len(digests), CHUNK):
        chunk = digests[start : start + CHUNK]
        # The claims first, then the vectors: a passage stored and released
        # between the two reads is seen stored, never free.
        held = set(PassageClaim.objects.filter(model=model, digest__in=chunk).values_list("digest", flat=True))
        for digest in _stored(model, chunk):
            del left[digest]
        busy = busy or any(digest in left for digest in held)
        free += [digest for digest in chunk if digest in left and digest not in held]
        if len(free) >= size:
            break
    if not free:
        return [], busy
    wanted = free[:size]
    expires = now + timedelta(seconds=settings.KOOKEE_INDEXER_LEASE_SECONDS)
    PassageClaim.objects.bulk_create(
        [PassageClaim(model=model, digest=digest, holder=holder, expires_at=expires) for digest in wanted],
        ignore_conflicts=True,
    )
    claimed = set(
        PassageClaim.objects.filter(model=model, holder=holder, digest__in=wanted).values_list("digest", flat=True)
    )
    busy = busy or len(claimed) < len(wanted)  # another worker was quicker
    # Stored by a worker that claimed, embedded and released it since the
    # reads above: now that this one holds it, no other can be embedding it.
    stored = _stored(model, list(claimed))
    if stored:
        PassageClaim.objects.filter(model=model, holder=holder, digest__in=stored).delete()
        for digest in stored:
            del left[digest]
    return [digest for digest in wanted if digest in claimed and digest not in stored], busy


def _stored(model: str, digests: list[str]) -> set[str]:
    return set(PassageVector.objects.filter(model=model, digest__in=digests).values_list("digest", flat=True))


@contextmanager
def _renewing(holder: str) -> Iterator[None]:
    """Renews the holder's claims every third of their lease while it works
    (a batch may take longer than a lease: a slow endpoint, its retries)."""
    stop = threading.Event()
    lease = settings.KOOKEE_INDEXER_LEASE_SECONDS

    def renew() -> None:
        try:
            while not stop.wait(lease / 3):
                expires = timezone.now() + timedelta(seconds=lease)
                PassageClaim.objects.filter(holder=holder).update(expires_at=expires)
        except Exception:  # the database away a moment: the next renewal, or the lease, says
            logger.exception("renewing the indexer's claims failed")
        finally:
            connections.close_all()  # this thread's own

    thread = threading.Thread(target=renew, name="kookee-indexer-lease", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def _store(embedder: embeddings.Embedder, batch: list[Passage], holder: str) -> None:
    done = embedder.passages([p.embedded for p in batch])
    try:
        size = done.vectors.shape[1]
        with transaction.atomic():
            # A model that now answers in another size (a new version under
            # the same name, or a `dimensions` change) makes every stored
            # vector stale.
            PassageVector.objects.filter(model=embedder.model).exclude(dimensions=size).delete()
            PassageVector.objects.bulk_create(
                [
                    PassageVector(model=embedder.model, digest=p.digest, dimensions=size, vector=_bytes(v))
                    for p, v in zip(batch, done.vectors, strict=True)
                ],
                ignore_conflicts=True,
            )
            PassageClaim.objects.filter(holder=holder, digest__in=[p.digest for p in batch]).delete()
    finally:
        if embedder.billed:
            # Billed as made, stored or not. A server that reports no usage
            # is billed an estimate, never nothing.
            tokens = done.tokens or estimated_tokens([p.embedded for p in batch])
            embedded.send(sender=PassageVector, model=embedder.model, tokens=tokens, passages=len(batch))


def estimated_tokens(texts: list[str]) -> int:
    return max(1, round(sum(len(t) for t in texts) / CHARS_PER_TOKEN))


def _bytes(vector: np.ndarray) -> bytes:
    return vector.astype("<f4").tobytes()


def others_indexing(model: str) -> bool:
    """Whether a worker holds live claims under the model (an import, a
    run_indexer, another server's child)."""
    return PassageClaim.objects.filter(model=model, expires_at__gte=timezone.now()).exists()


def prune() -> int:
    """Deletes the vectors that no published passage uses under the current
    model, and every other model's; returns how many."""
    embedder = embeddings.embedder()
    used = {p.digest for found in index.published_passages().values() for p in found}
    stale = PassageVector.objects.exclude(model=embedder.model) if embedder else PassageVector.objects.all()
    deleted = stale.delete()[0]
    if embedder is not None:
        unused = [
            pk
            for pk, digest in PassageVector.objects.filter(model=embedder.model).values_list("pk", "digest")
            if digest not in used
        ]
        for start in range(0, len(unused), CHUNK):
            deleted += PassageVector.objects.filter(pk__in=unused[start : start + CHUNK]).delete()[0]
    index.forget()
    return deleted


# --- worker processes -----------------------------------------------------------------------------


def worker_command(*args: str) -> list[str]:
    return [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "run_indexer", *args]


def worker_environment() -> dict[str, str] | None:
    """The environment of a worker process on this process's database and
    embedding settings; None when another process cannot reach that database
    (SQLite in memory: a test's)."""
    url = _database_url()
    if url is None:
        return None
    return {
        **os.environ,
        **{name: str(getattr(settings, name)) for name in WORKER_SETTINGS if hasattr(settings, name)},
        "DATABASE_URL": url,
    }


def _database_url() -> str | None:
    connection = connections["default"]
    name = str(connection.settings_dict["NAME"])
    if connection.vendor == "sqlite":
        sqlite = cast("SQLiteDatabaseWrapper", connection)
        return None if sqlite.is_in_memory_db() else f"sqlite:///{Path(name).resolve()}"
    url = os.environ.get("DATABASE_URL", "")  # the settings put .env's there too
    if not url:
        return None
    # The database this process uses, under the URL's options: a test run's
    # is not the one the URL names.
    return urlsplit(url)._replace(path="/" + quote(name)).geturl()


# --- the web process's indexer thread ---------------------------------------------------------------


@receiver(post_save, sender=Article)
def _article_saved(**kwargs: Any) -> None:
    transaction.on_commit(kick)


_wake = threading.Event()
_thread: threading.Thread | None = None
_thread_lock = threading.Lock()
state: dict[str, int | str] = {"runs": 0, "failures": 0, "deferred": 0, "last_error": ""}


def kick() -> None:
    """Asks this process's indexer to have what is missing embedded, soon."""
    global _thread
    if not ENABLED or not settings.KOOKEE_WEB_INDEXER or embeddings.embedder() is None:
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
            _index_in_background()
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


def _index_in_background() -> None:
    embedder = embeddings.embedder()
    if embedder is None or not settings.KOOKEE_WEB_INDEXER or not index.current_sync().missing:
        return
    if others_indexing(embedder.model):
        # An import, run_indexer or another server's child is at it: what
        # it leaves is seen by a later search, or this process's sweeper.
        state["deferred"] = int(state["deferred"]) + 1
        return
    environment = worker_environment()
    if environment is None:
        embed_missing(wait=False)  # a database no other process can open (a test's, in memory)
        return
    # Never here: the local model computes for seconds a batch, and even a
    # provider's answers are parsed under this process's GIL. In a process
    # of its own, below this one's visitors.
    child = subprocess.run(
        worker_command("--once", "--nice", str(WORKER_NICENESS)),
        cwd=settings.BASE_DIR,
        env=environment,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        check=False,
    )
    index.forget()
    if child.returncode != 0:
        said = [line for line in child.stderr.splitlines() if line.strip()]
        why = said[-1] if said else f"exit code {child.returncode}"
        raise embeddings.EmbeddingError(f"manage.py run_indexer --once: {why}")
