"""End-to-end: Debian's Chromium, driven by Playwright, against the app
served by daphne; a scripted provider where a test needs a precise stream."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.provider import ScriptedProvider, WaitFor
from tests.servers import daphne

CHROMIUM = "/usr/bin/chromium"
# As root in a sandbox, with no network but loopback: no background traffic.
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 15_000


@pytest.fixture(autouse=True)
def close_worker_thread_connections():
    """Overrides the suite's async fixture: these tests are synchronous (the
    app runs in its own process) and Playwright's sync API runs an event
    loop of its own, beside which pytest-asyncio's cannot run."""
    yield


# Shared by the modules that run one after the other, but never alive while
# any other test runs: while Playwright's sync API runs, its event loop is
# the thread's running loop, and an async test could not run. Chromium is
# closed after the last test of a run of consecutive tests that use it
# (pytest_runtest_teardown below), not per module: launching it again for
# each of the two dozen modules cost a second each.
_shared: dict = {}


def _chromium():
    if "browser" not in _shared:
        from playwright.sync_api import sync_playwright

        playwright = sync_playwright().start()
        try:
            _shared["browser"] = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        except BaseException:
            playwright.stop()
            raise
        _shared["playwright"] = playwright
    return _shared["browser"]


def _close_chromium() -> None:
    browser = _shared.pop("browser", None)
    playwright = _shared.pop("playwright", None)
    try:
        if browser is not None:
            browser.close()
    finally:
        if playwright is not None:
            playwright.stop()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After the test's own fixtures are torn down: Chromium stays up only
    if the next test uses it too."""
    try:
        return (yield)
    finally:
        if nextitem is None or "browser" not in nextitem.fixturenames:
            _close_chromium()


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        if os.environ.get("CI"):
            pytest.fail(f"{CHROMIUM} is missing: .ci/run installs Debian's chromium package")
        pytest.skip(f"{CHROMIUM} is missing (apt-get install chromium; `make test` does it as root)")
    browser = _chromium()
    yield browser
    # Contexts a module opened and left are its own to close, as they were
    # with a browser of its own: the next module starts with none.
    for context in browser.contexts:
        context.close()


@pytest.fixture
def context(browser):
    context = browser.new_context(viewport={"width": 1024, "height": 760})
    context.set_default_timeout(TIMEOUT_MS)
    yield context
    context.close()


@pytest.fixture
def page(context):
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(error))
    yield page
    # No uncaught script error on any page a test visited.
    assert errors == []


class ProviderThread:
    """The scripted provider on an event loop of its own, for browser tests,
    which are synchronous (Playwright's sync API)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = ScriptedProvider()
        self.url = self._call(self.server.start())

    def _call(self, coroutine):
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(10)

    def queue(self, *scripts: list) -> None:
        self.loop.call_soon_threadsafe(self.server.queue, *scripts)

    def gate(self) -> tuple[WaitFor, callable]:
        """A step that holds the stream, and the function that releases it."""
        event = asyncio.Event()
        return WaitFor(event), lambda: self.loop.call_soon_threadsafe(event.set)

    @property
    def requests(self):
        return self.server.requests

    def clear(self) -> None:
        self.loop.call_soon_threadsafe(self.server.scripts.clear)

    def close(self) -> None:
        self._call(self.server.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


@dataclass
class App:
    url: str
    database: Path
    process: object

    def turn(self, turn_id: int) -> tuple[str, bool, str]:
        with sqlite3.connect(self.database) as db:
            status, interrupted, text = db.execute(
                "select status, interrupted, assistant_text from chat_turn where id = ?", [turn_id]
            ).fetchone()
        return status, bool(interrupted), text

    def ledger_entries(self, turn_id: int) -> int:
        with sqlite3.connect(self.database) as db:
            return db.execute("select count(*) from billing_ledgerentry where turn_id = ?", [turn_id]).fetchone()[0]

    def rows(self, sql: str, *params) -> list[tuple]:
        with sqlite3.connect(self.database) as db:
            return db.execute(sql, params).fetchall()

    def conversation_of(self, user_text: str) -> tuple[int, str]:
        """The conversation holding the turn with this question, and its visitor hash."""
        [(conversation, visitor)] = self.rows(
            "select c.id, c.visitor_hash from chat_turn t join chat_conversation c on c.id = t.conversation_id"
            " where t.user_text = ?",
            user_text,
        )
        return conversation, visitor

    def questions(self, conversation: int) -> list[str]:
        found = self.rows("select user_text from chat_turn where conversation_id = ? order by id", conversation)
        return [text for (text,) in found]


def copy_database(source: Path, target: Path) -> None:
    """A consistent copy of a served app's SQLite database (write-ahead log
    and all), for a second server to start from the same seeded state
    instead of seeding it again."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with closing(sqlite3.connect(source)) as original, closing(sqlite3.connect(target)) as copy:
        original.backup(copy)
        copy.execute("PRAGMA journal_mode=DELETE")  # one file, as tests/servers.py's template


@pytest.fixture(scope="module")
def provider_thread() -> Iterator[ProviderThread]:
    provider = ProviderThread()
    yield provider
    provider.close()


@pytest.fixture
def provider(provider_thread):
    provider_thread.clear()
    yield provider_thread
    provider_thread.clear()


@pytest.fixture(scope="module")
def scripted_app(tmp_path_factory, provider_thread) -> Iterator[App]:
    env = {"OPENAI_BASE_URL": provider_thread.url, "OPENAI_API_KEY": "test-key", "KOOKEE_PROVIDER_RETRIES": "0"}
    with daphne(tmp_path_factory.mktemp("scripted"), **env) as (address, database, process):
        yield App(f"http://{address}", database, process)


# The offline model, quick: a test waits a moment for an answer, not seconds.
OFFLINE = {"KOOKEE_OFFLINE_TOKENS_PER_SECOND": "400", "KOOKEE_OFFLINE_FIRST_TOKEN_MS": "20"}


@pytest.fixture(scope="module")
def offline_app(tmp_path_factory) -> Iterator[App]:
    with daphne(tmp_path_factory.mktemp("offline"), **OFFLINE) as (address, database, process):
        yield App(f"http://{address}", database, process)


def chat(root, question: str) -> None:
    """Asks and waits for the whole answer, on the chat page or in the widget's frame."""
    expect(root.locator("#send")).to_have_text("Send")
    expect(root.locator("#send")).to_be_enabled()  # connected, and no answer streaming
    root.locator("#text").fill(question)
    root.locator("#text").press("Enter")
    expect(root.locator(".message--user .message__text").last).to_have_text(question)
    expect(root.locator(".message--assistant").last).to_have_attribute("data-status", "completed")
