"""/embed/allowed: the widget's script asks, before it makes its frame,
whether its page's origin may show it (frame-ancestors would refuse the
frame with only a console error on the host page). A refused origin is
logged once per process, for the operator to see which site tried."""

import logging

import pytest
from django.test import Client

from chat.visitors import embed

URL = "/embed/allowed"


@pytest.fixture
def refusals(caplog, monkeypatch):
    """The warnings of kookee.embed, from a process that has refused nobody yet."""
    monkeypatch.setattr(embed, "refused_origins", embed.Remembered(embed.REFUSED_ORIGINS_KEPT))
    caplog.set_level(logging.WARNING, logger="kookee.embed")
    return lambda: [r for r in caplog.records if r.name == "kookee.embed"]


@pytest.fixture
def shop(settings):
    settings.KOOKEE_EMBED_ORIGINS = ["https://shop.example", "https://*.customer.test:8443"]


def ask(origin: str | None = None, query: str | None = None):
    headers = {"HTTP_ORIGIN": origin} if origin is not None else {}
    return Client().get(URL, {"origin": query} if query is not None else {}, **headers)


@pytest.mark.parametrize(
    "origin",
    [
        "https://shop.example",
        "https://shop.example:443",
        "https://www.customer.test:8443",
        "https://a.b.customer.test:8443",
    ],
)
def test_a_site_allowed_to_embed_is_told_yes_and_nothing_is_logged(shop, refusals, origin):
    response = ask(origin)

    assert response.status_code == 200
    assert response.json() == {"allowed": True}
    # Readable by the customer's page (no credentials: none is needed, none is set).
    assert response["Access-Control-Allow-Origin"] == "*"
    assert "Origin" in response["Vary"]
    assert not response.cookies
    assert refusals() == []


@pytest.mark.parametrize(
    "origin",
    [
        "http://shop.example",  # another scheme
        "https://shop.example:8443",  # another port
        "https://customer.test:8443",  # the wildcard's own domain is not below it
        "https://shop.example.evil.test",
        "null",  # a file, or a sandboxed frame
    ],
)
def test_a_site_not_allowed_is_told_no(shop, refusals, origin):
    assert ask(origin).json() == {"allowed": False}
    assert [r.getMessage() for r in refusals()] != []


def test_this_sites_own_pages_may_show_it(settings, refusals):
    # 'self' in frame-ancestors: a same-origin fetch sends no Origin, the script says it.
    settings.KOOKEE_EMBED_ORIGINS = []
    assert ask(query="http://testserver").json() == {"allowed": True}
    assert ask("http://testserver").json() == {"allowed": True}
    assert refusals() == []


def test_the_browsers_origin_wins_over_what_the_query_says(shop, refusals):
    assert ask("https://evil.test", query="https://shop.example").json() == {"allowed": False}


def test_each_refused_origin_is_logged_once_at_warning_with_the_origin(shop, refusals):
    for _ in range(3):
        ask("https://evil.test")
    ask(query="https://other.test")
    ask("https://evil.test")

    logged = refusals()
    assert [r.levelno for r in logged] == [logging.WARNING, logging.WARNING]
    first, second = (r.getMessage() for r in logged)
    assert "https://evil.test" in first and "KOOKEE_EMBED_ORIGINS" in first
    assert "https://other.test" in second


def test_the_refused_origins_remembered_are_bounded(shop, refusals, monkeypatch):
    monkeypatch.setattr(embed, "refused_origins", embed.Remembered(3))
    for n in range(10):
        ask(f"https://site{n}.test")
    assert len(embed.refused_origins) == 3
    ask("https://site0.test")  # forgotten since: said again
    ask("https://site9.test")  # remembered: not
    assert len(refusals()) == 11


def test_a_hostile_origin_is_logged_quoted_and_cut(shop, refusals):
    origin = "https://evil.test/\n2024-01-01 CRITICAL forged line" + "x" * 1000
    assert ask(query=origin).json() == {"allowed": False}
    [record] = refusals()
    message = record.getMessage()
    assert "\n" not in message and "\\n" in message
    assert len(message) < 500


def test_no_origin_at_all_is_no_and_not_a_site_that_tried(shop, refusals):
    assert ask().json() == {"allowed": False}
    assert refusals() == []
