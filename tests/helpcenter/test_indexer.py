"""Indexing across processes (helpcenter/indexer.py): each passage claimed by
one worker with a lease, embedded once in all, taken again from a worker
that died; a web process that leaves the bulk to the workers; the commands'
worker processes and their progress. The embeddings endpoint is scripted at
the wire (tests/embeddings_server.py); the workers are real processes
(`manage.py run_indexer`) where it matters."""

import io
import os
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from contextlib import closing, contextmanager
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.db import connections
from django.utils import timezone

from helpcenter import embeddings, index, indexer
from helpcenter.management import embedding
from helpcenter.models import Article, PassageClaim, PassageVector
from helpcenter.passages import digest
from tests.embeddings_server import EmbeddingsServer, Fault
from tests.servers import ROOT, free_port

MODEL = "scripted-embed"
DEAD = "gone-host:4242:0000"


@pytest.fixture
def server(settings):
    with EmbeddingsServer() as found:
        settings.KOOKEE_EMBEDDINGS = "provider"
        settings.KOOKEE_EMBEDDINGS_MODEL = MODEL
        settings.KOOKEE_EMBEDDINGS_BASE_URL = found.base_url
        settings.KOOKEE_EMBEDDINGS_API_KEY = "embed-key"
        settings.KOOKEE_EMBEDDINGS_BATCH = 4
        settings.KOOKEE_INDEXER_PROCESSES = 0
        embeddings._queries.clear()
        yield found


@pytest.fixture
def help_center(db, settings):
    kind, settings.KOOKEE_EMBEDDINGS = settings.KOOKEE_EMBEDDINGS, "off"
    call_command("load_demo_help_center", stdout=io.StringIO())
    settings.KOOKEE_EMBEDDINGS = kind
    return wanted()


def wanted() -> list[str]:
    """Every published passage's digest, once."""
    return list(dict.fromkeys(p.digest for found in index.published_passages().values() for p in found))


def requested(server: EmbeddingsServer) -> Counter:
    """How many times each passage's text was sent, by digest (a search's
    query too)."""
    return Counter(digest(text) for texts in server.inputs() for text in texts)


def claim(digests, holder=DEAD, seconds=-1.0):
    """Claims as another worker would: live for `seconds`, or run out (a dead one's)."""
    expires = timezone.now() + timedelta(seconds=seconds)
    PassageClaim.objects.bulk_create(
        [PassageClaim(model=MODEL, digest=d, holder=holder, expires_at=expires) for d in digests]
    )


# --- claims, in one process -----------------------------------------------------------------------


def test_each_batch_is_claimed_embedded_and_released_and_a_second_run_asks_nothing(server, help_center):
    assert indexer.embed_missing() == len(help_center)
    assert set(requested(server).values()) == {1}
    assert set(requested(server)) == set(help_center)
    assert not PassageClaim.objects.exists()
    server.requests.clear()
    assert indexer.embed_missing() == 0
    assert server.requests == []


def test_passages_another_worker_holds_are_left_to_it(server, help_center):
    held = help_center[:6]
    claim(held, holder="other-host:1:live", seconds=60)
    assert indexer.embed_missing(wait=False) == len(help_center) - 6
    assert not set(held) & set(requested(server))
    assert set(PassageVector.objects.values_list("digest", flat=True)) == set(help_center) - set(held)
    assert set(PassageClaim.objects.values_list("digest", flat=True)) == set(held)  # still theirs


def test_a_dead_workers_claims_are_taken_again(server, help_center):
    claim(help_center[:6])  # its lease ran out: it stopped renewing
    assert indexer.embed_missing(wait=False) == len(help_center)
    assert requested(server) == Counter(dict.fromkeys(help_center, 1))
    assert not PassageClaim.objects.exists()


def test_a_foreground_run_waits_for_another_workers_claims_and_takes_them_when_they_run_out(server, help_center):
    claim(help_center[:2], holder="other-host:1:live", seconds=1.0)
    started = time.monotonic()
    assert indexer.embed_missing(wait=True) == len(help_center)
    assert time.monotonic() - started >= 0.9  # not before the lease ran out
    assert PassageVector.objects.count() == len(help_center)
    assert set(requested(server).values()) == {1}


def test_a_passage_stored_by_another_meanwhile_is_not_embedded_again(server, help_center):
    first = help_center[0]
    PassageVector.objects.create(model=MODEL, digest=first, dimensions=2, vector=b"\0" * 8)
    assert indexer.embed_missing() == len(help_center) - 1
    assert first not in requested(server)


def test_a_failed_batch_gives_its_claims_back_at_once(server, help_center):
    server.always = Fault(status=500)
    with pytest.raises(embeddings.EmbeddingError):
        indexer.embed_missing()
    assert not PassageClaim.objects.exists()  # another worker need not wait for the lease
    server.always = None
    assert indexer.embed_missing() == len(help_center)


# --- the web process's indexer ----------------------------------------------------------------------


def test_the_web_indexer_stays_out_while_another_worker_is_indexing(server, help_center, monkeypatch):
    monkeypatch.setattr(indexer, "ENABLED", True)
    claim(help_center[:1], holder="import-host:7:live", seconds=60)
    deferred = indexer.state["deferred"]
    indexer._index_in_background()
    assert server.requests == []
    assert indexer.state["deferred"] == deferred + 1
    PassageClaim.objects.all().delete()
    # Nobody is: it has them embedded (here in this process: a child could
    # not see this test's rows; test_with_the_local_model_... has the child).
    monkeypatch.setattr(indexer, "worker_environment", lambda: None)
    indexer._index_in_background()
    assert PassageVector.objects.count() == len(help_center)


def test_with_the_web_indexer_off_a_process_starts_no_indexer(server, help_center, settings, monkeypatch):
    monkeypatch.setattr(indexer, "ENABLED", True)
    monkeypatch.setattr(indexer, "_thread", None)
    settings.KOOKEE_WEB_INDEXER = False
    indexer.kick()
    assert indexer._thread is None
    indexer._index_in_background()
    assert server.requests == []


def test_a_worker_process_reaches_this_processs_database_and_settings(settings, db):
    connection = connections["default"]
    if connection.vendor == "sqlite":
        assert indexer.worker_environment() is None  # a test's database in memory: in this process
        return
    environment = indexer.worker_environment()
    assert environment["DATABASE_URL"].endswith("/" + connection.settings_dict["NAME"])
    assert environment["KOOKEE_EMBEDDINGS"] == settings.KOOKEE_EMBEDDINGS


# --- the commands: workers and progress ---------------------------------------------------------------


def test_worker_processes_are_one_per_core_with_the_local_model_and_one_with_a_provider(settings):
    settings.KOOKEE_EMBEDDINGS_BATCH = 4
    settings.KOOKEE_INDEXER_PROCESSES = 0
    settings.KOOKEE_EMBEDDINGS = "local"
    assert embedding.workers(10_000) == len(os.sched_getaffinity(0))
    assert embedding.workers(150) == 1  # not worth a process's start
    assert embedding.workers(3) == 1
    settings.KOOKEE_EMBEDDINGS = "provider"
    assert embedding.workers(1000) == 1
    settings.KOOKEE_INDEXER_PROCESSES = 3
    assert embedding.workers(1000) == 3
    assert embedding.workers(9) == 3
    assert embedding.workers(5) == 2


@pytest.mark.parametrize(
    ("done", "total", "seconds", "since", "line"),
    [
        (0, 2396, 0.0, 5.0, "sections embedded 0/2,396"),
        (50, 100, 10.0, 0.0, "sections embedded 50/100, ~10 s left"),
        (50, 100, 10.0, 4.0, "sections embedded 50/100, ~6 s left"),  # counting down until the next batch
        (50, 100, 10.0, 30.0, "sections embedded 50/100, ~1 s left"),
        (120, 2396, 10.0, 0.0, "sections embedded 120/2,396, ~4 min left"),
        (100, 100, 31.0, 0.0, "sections embedded 100/100"),
    ],
)
def test_progress_says_how_far_and_how_long_is_left(done, total, seconds, since, line):
    assert str(embedding.Progress(done, total, seconds, since)) == line


def test_reindex_shows_its_progress_and_a_second_run_embeds_nothing(server, help_center):
    out = io.StringIO()
    call_command("reindex_help_center", stdout=out)
    lines = out.getvalue().splitlines()
    count = len(help_center)
    assert lines[0] == f"  sections embedded 0/{count:,}"
    assert lines[-2] == f"  sections embedded {count:,}/{count:,}"
    assert lines[-1].startswith(f"{count} passage(s) embedded with {MODEL} in ")
    server.requests.clear()
    out = io.StringIO()
    call_command("reindex_help_center", stdout=out)
    assert out.getvalue().startswith(f"0 passage(s) embedded with {MODEL}")
    assert server.requests == []


def test_on_a_terminal_the_progress_is_one_line_updated_in_place(server, help_center):
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    out = Terminal()
    call_command("reindex_help_center", stdout=out)
    text = out.getvalue()
    count = len(help_center)
    assert text.startswith(f"\r  sections embedded 0/{count:,}\033[K\r")
    assert f"\r  sections embedded {count:,}/{count:,}\033[K\n{count} passage(s) embedded" in text


def test_an_endpoint_that_fails_leaves_it_to_the_indexers(server, help_center):
    server.always = Fault(status=500)
    out, err = io.StringIO(), io.StringIO()
    call_command("sync_help_center", stdout=out, stderr=err)  # nothing due; embeds what is missing
    assert "Not embedded yet" in err.getvalue()
    assert not PassageClaim.objects.exists()


# --- real processes -----------------------------------------------------------------------------------


@pytest.fixture
def shared_database(transactional_db, tmp_path, settings):
    """The test's database where a worker process can open it too: in a file
    (SQLite), or the server's (PostgreSQL, through DATABASE_URL)."""
    connection = connections["default"]
    if connection.vendor == "postgresql":
        if not os.environ.get("DATABASE_URL"):
            pytest.skip("a worker finds PostgreSQL through DATABASE_URL")
        yield None
        return
    connection.ensure_connection()
    memory, name = connection.connection, connection.settings_dict["NAME"]
    path = tmp_path / "db.sqlite3"
    with closing(sqlite3.connect(path)) as copy:
        memory.backup(copy)
    # Put aside, open: closing the last connection to an in-memory database drops it.
    connection.connection = None
    connection.settings_dict["NAME"] = str(path)
    yield path
    connection.close()
    connection.settings_dict["NAME"] = name
    connection.connection = memory


@pytest.fixture
def shared_help_center(shared_database, server, settings):
    settings.KOOKEE_EMBEDDINGS = "off"
    call_command("load_demo_help_center", stdout=io.StringIO())
    settings.KOOKEE_EMBEDDINGS = "provider"
    return wanted()


def run_indexer(*args, **env):
    return subprocess.Popen(
        indexer.worker_command(*args),
        cwd=ROOT,
        env={**indexer.worker_environment(), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(process, timeout=60):
    out, err = process.communicate(timeout=timeout)
    assert process.returncode == 0, err
    return out


@pytest.mark.slow
def test_two_indexer_processes_embed_each_section_once_in_all(server, shared_help_center):
    server.always = Fault(stall=0.1)  # each batch takes a moment: the two overlap
    first, second = run_indexer("--once"), run_indexer("--once")
    said = [finished(first), finished(second)]
    assert requested(server) == Counter(dict.fromkeys(shared_help_center, 1))
    assert PassageVector.objects.filter(model=MODEL).count() == len(shared_help_center)
    assert not PassageClaim.objects.exists()
    both = sorted(int(line.split()[0]) for line in said)
    assert sum(both) == len(shared_help_center) and both[0] > 0, said  # both did some
    # A second run embeds nothing.
    server.requests.clear()
    assert indexer.embed_missing() == 0
    assert server.requests == []


@pytest.mark.slow
def test_the_commands_workers_share_the_sections_and_report_them(server, shared_help_center, settings):
    settings.KOOKEE_INDEXER_PROCESSES = 2
    server.always = Fault(stall=0.05)
    out = io.StringIO()
    call_command("reindex_help_center", "--keep", stdout=out)
    count = len(shared_help_center)
    assert f"{count} passage(s) embedded with {MODEL}" in out.getvalue()
    assert f"  sections embedded {count:,}/{count:,}" in out.getvalue()
    assert requested(server) == Counter(dict.fromkeys(shared_help_center, 1))


@pytest.mark.slow
def test_a_killed_worker_keeps_its_sections_while_it_lives_and_loses_them_when_it_dies(server, shared_help_center):
    lease = {"KOOKEE_INDEXER_LEASE_SECONDS": "1"}
    server.faults.append(Fault(stall=60))  # its first batch never comes back
    stuck = run_indexer("--once", **lease)
    try:
        deadline = time.monotonic() + 20
        while not server.requests and time.monotonic() < deadline:
            time.sleep(0.05)
        [held] = server.inputs()
        first = PassageClaim.objects.get(digest=requested(server).most_common(1)[0][0]).expires_at
        # Alive, it renews its claims past their first lease...
        while PassageClaim.objects.filter(expires_at__gt=first).count() < len(held):
            assert time.monotonic() < deadline, "the claims were not renewed"
            time.sleep(0.05)
        # ...so another worker, after that lease, leaves them to it.
        assert int(finished(run_indexer("--once", **lease)).split()[0]) == len(shared_help_center) - len(held)
        assert PassageVector.objects.count() == len(shared_help_center) - len(held)
    finally:
        stuck.send_signal(signal.SIGKILL)  # no chance to give its claims back
        stuck.communicate()
    assert PassageClaim.objects.count() == len(held)
    # Dead, its claims run out and a waiting worker takes them.
    assert int(finished(run_indexer("--once", "--wait", **lease)).split()[0]) == len(held)
    assert PassageVector.objects.count() == len(shared_help_center)
    times = requested(server)
    assert {d for d, n in times.items() if n == 2} == {digest(text) for text in held}
    assert set(times.values()) <= {1, 2}


@contextmanager
def web_process(**env):
    """A daphne on the test's database; yields its pid and the URL of a
    search, once it answers one (and so has woken its indexer)."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "kookee.asgi:application"],
        cwd=ROOT,
        env={**indexer.worker_environment(), "KOOKEE_HELP_CENTER_RECHECK_SECONDS": "0.2", "OPENAI_API_KEY": "", **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        search = f"http://127.0.0.1:{port}/help/?q=refund"
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(search, timeout=5).read()
                break
            except OSError:
                assert process.poll() is None and time.monotonic() < deadline, "daphne did not start"
                time.sleep(0.1)
        yield process.pid, search
    finally:
        process.terminate()
        process.wait(timeout=30)


def cpu_seconds(pid: int) -> tuple[float, float]:
    """A process's own CPU time, and its finished children's."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


@pytest.mark.slow
def test_a_web_process_and_an_import_ask_for_each_section_once(server, shared_help_center, settings):
    """A daphne on the same database, its indexer woken by searches while the
    command embeds with two worker processes."""
    settings.KOOKEE_INDEXER_PROCESSES = 2
    server.always = Fault(stall=0.05)
    with web_process(KOOKEE_EMBEDDINGS_API_KEY="web-key") as (_, search):
        call_command("reindex_help_center", "--keep", stdout=io.StringIO())
        for _ in range(3):
            urllib.request.urlopen(search, timeout=5).read()
    sent = requested(server)
    assert sent.pop(digest("refund"), 0) <= 1  # the search's query, once it could rank by meaning
    assert sent == Counter(dict.fromkeys(shared_help_center, 1))
    assert PassageVector.objects.count() == len(shared_help_center)


@pytest.mark.slow
def test_with_the_local_model_a_web_process_embeds_in_a_child_not_on_its_own_cpu(shared_database, settings):
    Article.objects.create(title="Refunds", slug="refunds", body="Refunds are given within 30 days.")
    Article.objects.create(title="Invoices", slug="invoices", body="## Download\n\nInvoices are under Billing.")
    settings.KOOKEE_EMBEDDINGS, settings.KOOKEE_EMBEDDINGS_MODEL = "local", embeddings.LOCAL_MODEL
    with web_process() as (pid, _):  # its search found sections without vectors
        before = cpu_seconds(pid)
        deadline = time.monotonic() + 60
        while PassageVector.objects.count() < 2 or cpu_seconds(pid)[1] == before[1]:
            assert time.monotonic() < deadline, "not embedded"
            time.sleep(0.1)
        own, children = (after - then for after, then in zip(cpu_seconds(pid), before, strict=True))
    assert children > 0.5  # a Python process that loaded the model and embedded
    assert own < children / 2


@pytest.mark.slow
def test_the_indexer_service_embeds_what_appears_and_gives_its_claims_back_when_stopped(server, shared_help_center):
    service = run_indexer()
    try:
        deadline = time.monotonic() + 30
        while PassageVector.objects.count() < len(shared_help_center):
            assert service.poll() is None and time.monotonic() < deadline, "not embedded"
            time.sleep(0.1)
        Article.objects.create(title="Signed hooks", slug="signed-hooks", body="Signed POSTs, retried for a day.")
        while PassageVector.objects.count() < len(shared_help_center) + 1:
            assert time.monotonic() < deadline + 10, "the new article was not embedded"
            time.sleep(0.1)
        server.always = Fault(stall=60)  # it holds the next article's claim when it is stopped
        Article.objects.create(title="Nightly exports", slug="nightly-exports", body="CSV, every night.")
        while not PassageClaim.objects.exists():
            assert time.monotonic() < deadline + 20, "the next article was not claimed"
            time.sleep(0.05)
    finally:
        service.terminate()
        err = service.communicate(timeout=30)[1]
    assert service.returncode == 0, err
    assert not PassageClaim.objects.exists()
    assert set(requested(server).values()) == {1}
