"""The admin's "Sync now": the sync runs in a child process under its
budget (helpcenter/importers/budget.py), never in the server's own. Real
processes: the test's process plays the web server (the admin through the
test client, the thread that waits for the child), the child is
`manage.py sync_help_center --source ID --run-id RUN`, and the source is a
local server in the test's process.

The test database is in memory, which a child cannot open: `shared_database`
puts it in a file for the test, and the child finds it in DATABASE_URL, as a
server's child finds the server's database.
"""

import os
import resource
import signal
import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path

import pytest
from django.db import connections
from django.urls import reverse

from helpcenter.models import Article, Source

pytestmark = pytest.mark.slow  # each sync starts a Python process (about 1.5 s)

REAPERS = "kookee-sync-"  # the threads that wait for the children
# An article whose 2 MB of HTML a parser turns into 250,000 elements: about
# 320 MB more than the child holds, within every bound on a fetch.
BOMB = "<b>x</b>" * 250_000


@pytest.fixture
def shared_database(transactional_db, tmp_path, monkeypatch):
    connection = connections["default"]
    monkeypatch.setenv("KOOKEE_IMPORT_ALLOW_PRIVATE", "true")  # the sources are local servers
    if connection.vendor == "postgresql":
        # The test database is a server's: the child connects to it as is.
        db = connection.settings_dict
        monkeypatch.setenv("DATABASE_URL", f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}")
        yield None
        _join_reapers()
        return
    connection.ensure_connection()
    memory, name = connection.connection, connection.settings_dict["NAME"]
    path = tmp_path / "db.sqlite3"
    with closing(sqlite3.connect(path)) as copy:
        memory.backup(copy)
    # Put aside, open: closing the last connection to an in-memory database drops it.
    connection.connection = None
    connection.settings_dict["NAME"] = str(path)  # the settings' dict: every thread's connection
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{path}")
    yield path
    try:
        _join_reapers()
    finally:
        connection.close()
        connection.settings_dict["NAME"] = name
        connection.connection = memory


def _join_reapers() -> None:
    for reaper in [t for t in threading.enumerate() if t.name.startswith(REAPERS)]:
        reaper.join(timeout=60)  # nothing of a test's sync outlives it
        assert not reaper.is_alive(), "a sync's child did not end"


@pytest.fixture
def admin_client(client, django_user_model, shared_database):
    client.force_login(django_user_model.objects.create_superuser(username="root", password="pw"))
    return client


def sync_now(client, *sources):
    return client.post(
        reverse("admin:helpcenter_source_changelist"),
        {"action": "sync_now", "_selected_action": [s.pk for s in sources]},
        follow=True,
    ).content.decode()


def ended(source, seconds=60):
    """The source once its sync is over (its lease given back), polled with a bound."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        source.refresh_from_db()
        if source.running_since is None:
            return source
        time.sleep(0.1)
    raise AssertionError(f"{source.name} still syncing after {seconds} s: {source.progress_done} read")


def reaped():
    """The waiting threads are done, and no child is left a zombie."""
    for reaper in [t for t in threading.enumerate() if t.name.startswith(REAPERS)]:
        reaper.join(timeout=30)
        assert not reaper.is_alive()
    return [pid for pid, state in children() if state == "Z"] == []


def children():
    me = str(os.getpid())
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, parent = stat.read_text().rsplit(")", 1)[1].split()[:2]
        except (OSError, IndexError):
            continue
        if parent == me:
            yield int(stat.parent.name), state


def bomb(number=1):
    return {
        "id": 90_000 + number,
        "html_url": f"https://acme.zendesk.com/hc/en-us/articles/{90_000 + number}",
        "section_id": 1,
        "draft": False,
        "locale": "en-us",
        "user_segment_id": None,
        "updated_at": "2026-11-30T10:00:00Z",
        "title": "Innocent",
        "body": BOMB,
    }


def test_the_sync_runs_in_a_child_and_the_page_shows_its_progress_and_result(admin_client, zendesk):
    source = Source.objects.create(kind="zendesk", name="Acme", location=zendesk.url)
    original = zendesk.answer
    release = threading.Event()

    def slow(*args):
        release.wait(20)  # the first page waits until the test has seen the sync running
        return original(*args)

    zendesk.answer = slow
    try:
        assert "Syncing Acme: this page shows how far it is." in sync_now(admin_client, source)

        page = admin_client.get(reverse("admin:helpcenter_source_changelist")).content.decode()
        assert "Syncing: 0 read" in page
        assert '<meta http-equiv="refresh"' in page  # it refreshes itself while it runs
        # The lease is taken by the server before the child starts: a second click is told at once.
        assert "Acme is already syncing." in sync_now(admin_client, source)
    finally:
        release.set()

    assert ended(source).last_error == ""
    assert reaped()
    page = admin_client.get(reverse("admin:helpcenter_source_change", args=[source.pk])).content.decode()
    assert "23 added, 0 updated, 0 unchanged, 0 unpublished" in page
    assert '<meta http-equiv="refresh"' not in page
    assert Article.objects.filter(source=source).count() == 23
    assert source.run_id == "" and source.synced_at is not None  # the child gave its lease back


def test_a_child_over_its_memory_budget_is_stopped_and_the_server_is_not(admin_client, zendesk, settings):
    settings.KOOKEE_SYNC_MEMORY_MB = 300  # 5,000 Zendesk articles fit in 236 (24 in 202)
    zendesk.articles = {"en-us": [bomb()], "pt-br": []}
    source = Source.objects.create(kind="zendesk", name="Hostile", location=zendesk.url)
    limits = resource.getrlimit(resource.RLIMIT_AS)
    resident = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    sync_now(admin_client, source)

    assert ended(source).last_error == "stopped: over its memory budget (KOOKEE_SYNC_MEMORY_MB, 300 MB)"
    assert source.run_id == ""  # the lease is free: the next sync may start at once
    assert reaped()
    assert not Article.objects.filter(source=source).exists()
    # The server's process: its limits as they were, its memory too, and it serves the source's page.
    assert resource.getrlimit(resource.RLIMIT_AS) == limits
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - resident < 50_000  # KB
    page = admin_client.get(reverse("admin:helpcenter_source_changelist")).content.decode()
    assert "Failed: stopped: over its memory budget" in page


def test_a_child_over_its_cpu_budget_is_stopped(admin_client, zendesk, settings):
    settings.KOOKEE_SYNC_CPU_SECONDS = 3  # its start takes about 1; a bomb about 8
    settings.KOOKEE_SYNC_MEMORY_MB = 4096
    zendesk.articles = {"en-us": [bomb(n) for n in range(3)], "pt-br": []}
    zendesk.per_page = 1
    source = Source.objects.create(kind="zendesk", name="Hostile", location=zendesk.url)

    sync_now(admin_client, source)

    assert ended(source).last_error == "stopped: over its CPU budget (KOOKEE_SYNC_CPU_SECONDS, 3 s)"
    assert reaped()


def test_a_child_over_its_time_budget_is_stopped(admin_client, zendesk, settings):
    settings.KOOKEE_SYNC_SECONDS = 3
    release = threading.Event()
    original = zendesk.answer

    def stalled(*args):
        release.wait(30)  # a source that never answers, under every fetch's own timeout
        return original(*args)

    zendesk.answer = stalled
    source = Source.objects.create(kind="zendesk", name="Stalled", location=zendesk.url)
    try:
        sync_now(admin_client, source)
        assert ended(source).last_error == "stopped: over its time budget (KOOKEE_SYNC_SECONDS, 3 s)"
    finally:
        release.set()
    assert reaped()


def test_a_child_killed_outright_leaves_no_lease_behind(admin_client, zendesk):
    # SIGKILL (the kernel's OOM killer, an operator): the child writes nothing, the server does.
    release = threading.Event()
    original = zendesk.answer

    def stalled(*args):
        release.wait(30)
        return original(*args)

    zendesk.answer = stalled
    source = Source.objects.create(kind="zendesk", name="Acme", location=zendesk.url)
    try:
        sync_now(admin_client, source)
        deadline = time.monotonic() + 30
        while not zendesk.requests and time.monotonic() < deadline:
            time.sleep(0.05)  # the child is reading
        (child,) = [pid for pid, _ in children() if b"--run-id" in Path(f"/proc/{pid}/cmdline").read_bytes()]
        os.kill(child, signal.SIGKILL)

        assert ended(source).last_error == "stopped: killed (over its CPU budget, or the server was out of memory)"
    finally:
        release.set()
    assert source.run_id == ""  # not held for LEASE_SECONDS: the next sync may start at once
    assert reaped()


def test_a_token_in_a_server_secret_saved_before_the_rule_is_sent_nowhere(admin_client, zendesk, monkeypatch):
    # The audit: a source at the attacker's host, saved when any variable was taken.
    monkeypatch.setenv("KOOKEE_HANDOFF_WEBHOOK_SECRET", "whsec-the-servers-own")
    source = Source.objects.create(
        kind="zendesk", name="Attacker", location=zendesk.url, token_env="KOOKEE_HANDOFF_WEBHOOK_SECRET"
    )

    sync_now(admin_client, source)

    error = ended(source).last_error
    assert "KOOKEE_HANDOFF_WEBHOOK_SECRET cannot hold a source's token" in error
    assert "whsec-the-servers-own" not in error
    assert zendesk.requests == []  # nothing at all reached its host
    assert reaped()


def test_a_folder_is_read_from_the_admin_only_under_the_import_root(admin_client, tmp_path, settings):
    root = tmp_path / "imports"
    (root / "docs").mkdir(parents=True)
    (root / "docs" / "refunds.md").write_text("# Refunds\n\nWithin 14 days.\n")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "secret.md").write_text("# Not for the help center\n")
    settings.KOOKEE_IMPORT_ROOT = str(root)  # the child's as the server's
    inside = Source.objects.create(kind="markdown", name="Inside", location=str(root / "docs"))
    # Saved before the rule (or by the command), or a link in the root that points out since.
    earlier = Source.objects.create(kind="markdown", name="Earlier", location=str(outside))
    (root / "link").symlink_to(outside)
    linked = Source.objects.create(kind="markdown", name="Linked", location=str(root / "link"))

    sync_now(admin_client, inside, earlier, linked)

    assert ended(inside).last_error == "" and inside.last_result["added"] == 1
    assert f"is not under KOOKEE_IMPORT_ROOT ({root})" in ended(earlier).last_error
    assert f"is not under KOOKEE_IMPORT_ROOT ({root})" in ended(linked).last_error
    assert list(Article.objects.values_list("title", flat=True)) == ["Refunds"]
    assert reaped()


def test_the_child_embeds_what_it_wrote_and_the_page_shows_it(admin_client, zendesk, monkeypatch, settings):
    from helpcenter import index
    from helpcenter.models import PassageVector
    from tests.embeddings_server import EmbeddingsServer

    with EmbeddingsServer() as server:
        embedding = {
            "KOOKEE_EMBEDDINGS": "provider",
            "KOOKEE_EMBEDDINGS_MODEL": "scripted-embedder",
            "KOOKEE_EMBEDDINGS_BASE_URL": server.base_url,
            "KOOKEE_EMBEDDINGS_API_KEY": "embed-key",
            "KOOKEE_WEB_INDEXER": "false",  # this process plays the server: the child alone embeds
        }
        for name, value in embedding.items():
            monkeypatch.setenv(name, value)
        settings.KOOKEE_EMBEDDINGS, settings.KOOKEE_EMBEDDINGS_MODEL = "provider", "scripted-embedder"
        settings.KOOKEE_WEB_INDEXER = False
        source = Source.objects.create(kind="zendesk", name="Acme", location=zendesk.url)
        sync_now(admin_client, source)
        assert ended(source, seconds=120).last_error == ""
        assert reaped()

        sections = sum(len(found) for found in index.published_passages().values())
        assert PassageVector.objects.filter(model="scripted-embedder").count() == sections > 0
        # Each section asked for once, by the child, before it gave the lease back.
        assert sorted(text for batch in server.inputs() for text in batch) == sorted(
            {p.embedded for found in index.published_passages().values() for p in found}
        )
        assert (source.progress_done, source.progress_total, source.progress_embedding) == (sections, sections, False)


def test_a_child_of_a_server_larger_than_the_budget_is_measured_by_its_own_memory(admin_client, zendesk, settings):
    # Linux carries a process's peak resident memory across exec: a child
    # measured by it was over the budget of a server that had grown past it.
    settings.KOOKEE_SYNC_MEMORY_MB = 300
    grown = bytearray(400 * 2**20)
    grown[:: resource.getpagesize()] = b"x" * len(grown[:: resource.getpagesize()])  # resident, not only mapped
    source = Source.objects.create(kind="zendesk", name="Acme", location=zendesk.url)

    sync_now(admin_client, source)

    assert ended(source).last_error == ""
    assert Article.objects.filter(source=source).count() == 23
    del grown
