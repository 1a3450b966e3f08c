import shutil
import subprocess
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.conf import settings as django_settings
from django.db import connections

from tests.provider import ScriptedProvider

# The helpers that several test modules share keep pytest's detailed
# assertion messages, as the test modules they came from had.
pytest.register_assert_rewrite("tests.billing.admin_helpers", "tests.chat.support.handoff_helpers")
pytest.register_assert_rewrite("tests.multiprocess.stack")

# Connections held open between tests would keep PostgreSQL from dropping
# the test database at the end of the run.
django_settings.DATABASES["default"]["CONN_MAX_AGE"] = 0


SLOW = ("tests/e2e/", "tests/test_daphne.py", "tests/test_hostile_clients.py")
LOCALE = Path(__file__).resolve().parent.parent / "locale"


def pytest_configure(config):
    """The translations Django reads (.mo) are built from the .po files by
    `make compilemessages`; a quick `pytest` rebuilds any older than its .po
    (when gettext is there), so the Portuguese tests see the latest."""
    if shutil.which("msgfmt") is None:
        return  # the committed .mo; tests/test_translations.py says what is missing
    for po in LOCALE.glob("*/LC_MESSAGES/*.po"):
        mo = po.with_suffix(".mo")
        if not mo.exists() or mo.stat().st_mtime < po.stat().st_mtime:
            subprocess.run(["msgfmt", "--check-format", "-o", str(mo), str(po)], check=True)


def pytest_collection_modifyitems(items):
    """Real server processes and Chromium are slow: `pytest -m "not slow"`
    is the quick loop, CI runs everything."""
    for item in items:
        if item.nodeid.startswith(SLOW):
            item.add_marker(pytest.mark.slow)


@pytest.fixture(autouse=True)
async def close_worker_thread_connections():
    """Async code reaches the database through asgiref's worker thread; its
    connection must close before the test database can be dropped."""
    yield
    await sync_to_async(connections.close_all, thread_sensitive=True)()


@pytest.fixture(autouse=True)
def fresh_caches():
    """Prices, calibrations and the help-center index cached by a test's
    process are not the next test's (its database rolled back)."""
    from billing import calibration
    from billing.services import forget_prices
    from helpcenter import index as help_center

    forget_prices()
    calibration.forget()
    help_center.forget()


@pytest.fixture(autouse=True)
def no_background_indexer(monkeypatch):
    """Tests embed the help center in the foreground (indexer.embed_missing):
    a thread behind them would write to the next test's database."""
    from helpcenter import indexer

    monkeypatch.setattr(indexer, "ENABLED", False)


@pytest.fixture(autouse=True)
def no_background_sweeper(settings):
    """Tests that need the stale-turn sweeper call it; none runs behind them."""
    settings.KOOKEE_SWEEP_SECONDS = 0


@pytest.fixture
async def provider():
    """A scripted OpenAI-compatible server on a loopback port."""
    server = ScriptedProvider()
    server.url = await server.start()
    yield server
    await server.stop()


@pytest.fixture
def open_stream(use_provider, settings):
    """Opens streams as the app does (the real openai client, the app's own
    SSE reading), against the scripted provider, without retries."""
    from chat.engine import provider

    settings.KOOKEE_PROVIDER_RETRIES = 0
    return provider.open_stream


@pytest.fixture
def use_provider(provider, settings):
    """Points the app at the scripted provider instead of the offline model."""
    settings.OPENAI_BASE_URL = provider.url
    settings.OPENAI_API_KEY = "test-key"
    settings.OPENAI_MODEL = "gpt-4o-mini"
    return provider
