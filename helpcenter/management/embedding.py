"""The help-center commands' last step: embedding what they changed, in the
foreground, with a worker process per core for the local model (which
computes each call on one thread), and saying how far it is.

Each worker is `manage.py run_indexer --once --wait`: it claims batches as
any indexer does (helpcenter/indexer.py), so the workers, a run_indexer
service and the servers' indexers never embed one passage twice. This
process only counts the vectors as they are stored.
"""

from __future__ import annotations

import math
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.core.management.base import BaseCommand
from django.utils import timezone

from helpcenter import embeddings, index, indexer
from helpcenter.models import PassageVector

PROGRESS_SECONDS = 5.0  # between progress lines when the output is not a terminal
TERMINAL_SECONDS = 0.5  # between updates of the one progress line on a terminal
POLL_SECONDS = 0.5  # between counts of what the worker processes stored
# A worker process spends about 2 s of CPU before its first passage (Django,
# the local model's graph), about 45 passages' worth: one pays for itself
# past a hundred or so.
PASSAGES_PER_WORKER = 100


@dataclass(frozen=True)
class Progress:
    done: int
    total: int
    seconds: float  # from the start of embedding to when `done` were
    since: float = 0.0  # seconds since then

    @property
    def seconds_left(self) -> float | None:
        if not self.done or self.done >= self.total:
            return None
        return max(1.0, self.seconds / self.done * (self.total - self.done) - self.since)

    def __str__(self) -> str:
        text = f"sections embedded {self.done:,}/{self.total:,}"
        left = self.seconds_left
        if left is not None:
            text += f", ~{_duration(left)} left"
        return text


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{math.ceil(seconds)} s"
    return f"{math.ceil(seconds / 60)} min"


def embed_all(on_progress: Callable[[Progress], None] | None = None) -> int:
    """Embeds every published passage without a vector (waiting for those
    another worker is embedding); returns how many this run embedded.
    Raises EmbeddingError when a batch fails (what was stored stays)."""
    embedder = embeddings.embedder()
    if embedder is None:
        return 0
    pending = indexer.missing(embedder.model)
    if not pending:
        return 0
    started = time.monotonic()
    last = [0, started]  # the count, and when it was reached: an estimate counts down between batches

    def report(done: int) -> None:
        now, done = time.monotonic(), min(done, len(pending))
        if done != last[0]:
            last[:] = [done, now]
        if on_progress is not None:
            on_progress(Progress(done, len(pending), last[1] - started, now - last[1]))

    report(0)
    count = workers(len(pending))
    environment = indexer.worker_environment() if count > 1 else None
    with indexer.at_work(embedder.model):
        if environment is None:
            done = indexer.work(embedder, pending, wait=True, on_batch=report)
        else:
            done = _in_processes(embedder.model, count, environment, report)
    report(len(pending))
    index.forget()
    return min(done, len(pending))


def workers(pending: int) -> int:
    """Worker processes for this many passages: KOOKEE_INDEXER_PROCESSES, or
    with the local model one per core and PASSAGES_PER_WORKER (a provider's
    calls wait on the network: one); never more than there are batches."""
    count = settings.KOOKEE_INDEXER_PROCESSES
    if count <= 0:
        if settings.KOOKEE_EMBEDDINGS != embeddings.LOCAL:
            return 1
        count = min(len(os.sched_getaffinity(0)), pending // PASSAGES_PER_WORKER)
    return max(1, min(count, math.ceil(pending / max(1, settings.KOOKEE_EMBEDDINGS_BATCH))))


def _in_processes(model: str, count: int, environment: dict[str, str], report: Callable[[int], None]) -> int:
    since = timezone.now()
    children = [
        subprocess.Popen(
            # At this command's priority (`nice manage.py import_help_center`
            # puts them below a busy site's visitors too).
            indexer.worker_command("--once", "--wait"),
            cwd=settings.BASE_DIR,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,  # what fails is said on stderr, this command's
        )
        for _ in range(count)
    ]
    try:
        while any(child.poll() is None for child in children):
            report(_stored_since(model, since))
            time.sleep(POLL_SECONDS)
    finally:
        for child in children:
            if child.poll() is None:
                child.terminate()  # it gives its claims back (run_indexer)
            child.wait()
    failed = [child.returncode for child in children if child.returncode]
    if failed:
        raise embeddings.EmbeddingError(f"{len(failed)} of {count} worker processes failed (exit {failed[0]})")
    return _stored_since(model, since)


def _stored_since(model: str, since: datetime) -> int:
    # By any worker: the others' count towards this run's sections too.
    return PassageVector.objects.filter(model=model, created_at__gte=since).count()


class Printer:
    """Progress on a command's output: one line updated in place on a
    terminal, a line every PROGRESS_SECONDS in a log."""

    def __init__(self, command: BaseCommand) -> None:
        self.out = command.stdout
        self.terminal = self.out.isatty()
        self.shown = -math.inf
        self.done = -1
        self.open = False  # a terminal's line not ended yet

    def __call__(self, progress: Progress) -> None:
        now = time.monotonic()
        final = progress.done >= progress.total
        if self.shown == math.inf or (not final and now - self.shown < self._every()):
            return
        if not self.terminal and progress.done == self.done:
            return  # a log gets a line when there is news
        self.shown, self.done = (math.inf if final else now), progress.done
        if self.terminal:
            self.out.write(f"\r  {progress}\033[K", ending="")
            self.open = not final
            if final:
                self.out.write("")
            self.out.flush()
        else:
            self.out.write(f"  {progress}")

    def _every(self) -> float:
        return TERMINAL_SECONDS if self.terminal else PROGRESS_SECONDS

    def end(self) -> None:
        """Ends the terminal's line, before a message of its own."""
        if self.open:
            self.out.write("")
            self.open = False


def embed_now(command: BaseCommand) -> None:
    """Embeds every section without a vector, showing how far it is; an
    endpoint that fails leaves it to the indexers (a search by words
    meanwhile)."""
    started = time.monotonic()
    printer = Printer(command)
    try:
        done = embed_all(printer)
    except embeddings.EmbeddingError as e:
        printer.end()
        command.stderr.write(f"Not embedded yet ({e}): the indexers (servers', run_indexer) will retry.")
        return
    if done:
        took = time.monotonic() - started
        command.stdout.write(f"{done} passage(s) embedded with {embeddings.model_name()} in {took:.1f} s.")
