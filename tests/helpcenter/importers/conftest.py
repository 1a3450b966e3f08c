import pytest

from helpcenter.importers import fetch
from tests.helpcenter.import_servers import SiteServer, ZendeskServer


@pytest.fixture(autouse=True)
def local_servers_allowed(settings, monkeypatch):
    """The sources here are local servers: allowed, except where a test is
    about refusing them (SSRF). Retries back off in milliseconds."""
    settings.KOOKEE_IMPORT_ALLOW_PRIVATE = True
    monkeypatch.setattr(fetch, "BACKOFF_SECONDS", (0.01, 0.02, 0.03, 0.04))


@pytest.fixture
def zendesk():
    server = ZendeskServer()
    yield server
    server.close()


@pytest.fixture
def site():
    server = SiteServer()
    yield server
    server.close()
