"""Finance's pages in Chromium, on the seeded week: every number in one
format, the page's (1.234,57 and 3,4% in Portuguese; 1,234.57 and 3.4% in
English), and the ledger whole on a 1,366 px laptop."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.e2e.test_admin_pages import seeded  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow

PAGES = [
    "/admin/billing/ledgerentry/",
    "/admin/billing/ledgerentry/monthly/",
    "/admin/billing/ledgerentry/conversations/",
    "/admin/billing/price/",
    "/admin/billing/calibration/",
    "/admin/billing/embeddingentry/",
]
# A number in the other locale's shape, standing alone (not in "gpt-4.1",
# a time or a date): a decimal point or comma with one, two, or four or
# more digits after it (three is a thousands separator in either locale).
ENGLISH_DECIMAL = re.compile(r"(?<![\w.,:/-])\d+\.(?:\d{1,2}|\d{4,})(?![\d.,])")
PORTUGUESE_DECIMAL = re.compile(r"(?<![\w.,:/-])\d+,(?:\d{1,2}|\d{4,})(?![\d.,])")


def log_in(page, app, username: str, password: str) -> None:
    """By the fields' ids: their labels are in the page's language."""
    page.goto(f"{app.url}/admin/login/")
    page.locator("#id_username").fill(username)
    page.locator("#id_password").fill(password)
    page.locator("#login-form [type=submit]").click()
    expect(page.locator("#site-name")).to_be_visible()


def visible_numbers(page) -> str:
    return page.locator("#content-main").inner_text()


@pytest.mark.parametrize(
    ("locale", "foreign"), [("pt-BR", ENGLISH_DECIMAL), ("en-US", PORTUGUESE_DECIMAL)], ids=["pt-BR", "en"]
)
def test_every_finance_page_shows_numbers_in_one_format(seeded, browser, locale, foreign):  # noqa: F811
    context = browser.new_context(viewport={"width": 1400, "height": 900}, locale=locale)
    page = context.new_page()
    log_in(page, seeded, "root", "kookee-admin")
    mixed = {}
    for url in PAGES:
        page.goto(seeded.url + url)
        expect(page.locator("#content-main")).to_be_visible()
        text = visible_numbers(page)
        if found := foreign.findall(text):
            mixed[url] = found[:5]
    context.close()
    assert mixed == {}


def test_the_ledger_fits_a_1366_px_laptop(seeded, browser):  # noqa: F811
    context = browser.new_context(viewport={"width": 1366, "height": 768})
    page = context.new_page()
    log_in(page, seeded, "root", "kookee-admin")
    page.goto(seeded.url + "/admin/billing/ledgerentry/")
    expect(page.locator("#result_list")).to_be_visible()
    table, box = page.evaluate(
        """() => { const results = document.querySelector('.results');
                   return [results.scrollWidth, results.clientWidth]; }"""
    )
    context.close()
    assert table <= box, f"the ledger is {table} px wide in a {box} px box: its last columns scroll away"
