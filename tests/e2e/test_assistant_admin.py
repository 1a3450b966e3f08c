"""The Assistant page in Chromium, as Support uses it on a 1,366 x 768
laptop: the guidance's length and cost follow the typing, as the server
counts them; Save draft, then Publish; and the page passes axe-core and
fits the window, in English and in Brazilian Portuguese (the admin follows
the browser's language)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

from tests.e2e.conftest import OFFLINE, TIMEOUT_MS, App
from tests.e2e.test_finance_pages import log_in
from tests.servers import ROOT, daphne

pytestmark = pytest.mark.slow

LAPTOP = {"width": 1366, "height": 768}
PAGE = "/admin/chat/assistantversion/"
PASSWORD = "kookee-support"
SUPPORT = f"""
from django.contrib.auth.models import Group, User
from chat.roles import ensure_roles
ensure_roles()
User.objects.create_user("sam", "sam@example.com", {PASSWORD!r}, is_staff=True).groups.add(
    Group.objects.get(name="Support")
)
"""
# A published version and a draft over it: the changes table and the versions list shown.
VERSIONS = """
from chat.assistant import versions
live = versions.publish(versions.save_draft({"guidance": "Be brief.", "name_en": "Ana"}, "seed"), "seed")
versions.save_draft({"guidance": "Be brief and warm.", "name_en": "Ana", "starters_pt_br": ["Oi?"]}, "seed")
"""


def manage_shell(app: App, code: str) -> None:
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": f"sqlite:///{app.database}"},
        check=True,
        capture_output=True,
    )


@pytest.fixture(scope="module")
def app(tmp_path_factory) -> Iterator[App]:
    with daphne(tmp_path_factory.mktemp("assistant"), **OFFLINE) as (address, database, process):
        served = App(f"http://{address}", database, process)
        manage_shell(served, SUPPORT)
        yield served


@pytest.fixture(scope="module")
def sessions() -> dict:
    """Sam's session cookies by locale: the admin's login form is filled
    once per language in the module; the other tests' browsers start with them."""
    return {}


@pytest.fixture
def laptop(browser, sessions):
    """Support's page at 1,366 x 768 in a language, Sam signed in; no script error on it."""
    contexts, errors = [], []

    def open_in(locale: str, app: App):
        context = browser.new_context(viewport=LAPTOP, locale=locale)
        context.set_default_timeout(TIMEOUT_MS)
        contexts.append(context)
        page = context.new_page()
        page.on("pageerror", lambda error: errors.append(error))
        key = (app.url, locale)
        if key in sessions:
            context.add_cookies(sessions[key])
        else:
            log_in(page, app, "sam", PASSWORD)
            sessions[key] = context.cookies()
        return page

    yield open_in
    for context in contexts:
        context.close()
    assert errors == []


def figures(page) -> tuple[str, str]:
    return page.locator("#kk-guidance-count").inner_text(), page.locator("#kk-guidance-cost").inner_text()


def test_the_count_and_the_cost_follow_the_typing(app, laptop):
    page = laptop("en-US", app)
    page.goto(app.url + PAGE)
    count, cost = page.locator("#kk-guidance-count"), page.locator("#kk-guidance-cost")
    guidance = page.get_by_role("textbox", name="Guidance:")
    expect(count).to_have_text("0 / 4,000 characters")
    expect(cost).to_have_text("No guidance: it adds nothing to model calls.")

    guidance.fill("x" * 1234)
    expect(count).to_have_text("1,234 / 4,000 characters")
    expect(cost).to_have_text("≈ 309 input tokens per model call (a help question makes two)")  # 1234 / 4
    guidance.press("End")
    guidance.press_sequentially("abc")  # key by key
    expect(count).to_have_text("1,237 / 4,000 characters")
    expect(cost).to_have_text("≈ 310 input tokens per model call (a help question makes two)")

    guidance.fill("Hi")
    expect(cost).to_have_text("≈ 1 input token per model call (a help question makes two)")
    guidance.fill("  \n😀😀 é\n\n ")  # counted as the server stores it: trimmed, by character
    expect(count).to_have_text("4 / 4,000 characters")
    guidance.fill("y" * 4001)
    expect(count).to_have_text("4,001 / 4,000 characters: too long to save")
    guidance.fill("")
    expect(cost).to_have_text("No guidance: it adds nothing to model calls.")

    # What the script counts is what the server counts, on the next load.
    text = "Call paid plans memberships.\nNever promise a refund: offer a person.\n😀"
    guidance.fill(text)
    typed = figures(page)
    page.get_by_role("button", name="Save draft").click()
    expect(page.locator(".messagelist")).to_contain_text("Draft saved.")
    assert figures(page) == typed
    page.locator("#id_guidance").press("End")
    page.locator("#id_guidance").press_sequentially("!")
    expect(count).not_to_have_text(typed[0])


def test_save_then_publish(app, laptop):
    page = laptop("en-US", app)
    page.goto(app.url + PAGE)
    page.locator("#id_guidance").fill("Ask for the order number before looking an order up.")
    page.locator("#id_name_en").fill("Ana")
    page.locator("#id_starters_en").fill("Where is my order?\nHow do I cancel?")

    page.get_by_role("button", name="Save draft").click()

    expect(page.locator(".messagelist")).to_contain_text("Draft saved.")
    changes = page.locator("#kk-changes")
    expect(changes).to_contain_text("Ask for the order number before looking an order up.")
    expect(changes).to_contain_text("Where is my order?")
    [(draft, published)] = app.rows(
        "select id, published_at from chat_assistantversion where guidance like 'Ask for the order%'"
    )
    assert published is None
    expect(page.locator(f"#kk-version-{draft}")).to_contain_text("draft")

    page.get_by_role("button", name="Publish").click()

    expect(page.locator(".messagelist")).to_contain_text("Published: visitors meet it from their next message.")
    expect(page.locator("#kk-changes")).to_have_count(0)  # no draft now
    expect(page.locator(f"#kk-version-{draft}")).to_contain_text("live")
    [(published_by,)] = app.rows("select published_by_name from chat_assistantversion where id = ?", draft)
    assert published_by == "sam"
    expect(page.locator("#id_name_en")).to_have_value("Ana")


@pytest.fixture(scope="module")
def versions(app) -> None:
    """A published version and a draft over it, seeded once for the languages' tests."""
    manage_shell(app, VERSIONS)


@pytest.mark.parametrize(("locale", "lang"), [("en-US", "en"), ("pt-BR", "pt-br")])
def test_the_page_passes_axe_and_fits_a_laptop(app, versions, laptop, locale, lang):
    page = laptop(locale, app)
    page.goto(app.url + PAGE)
    expect(page.locator("html")).to_have_attribute("lang", lang)
    expect(page.locator("#kk-changes table")).to_be_visible()
    expect(page.locator("#kk-versions table")).to_be_visible()
    page.locator("#id_guidance").fill("x" * 1234)
    # Grouped as the page's language groups: 1.234 in Portuguese.
    expect(page.locator("#kk-guidance-count")).to_contain_text("1.234" if locale == "pt-BR" else "1,234")

    results = Axe().run(page)
    assert results.violations_count == 0, results.generate_report()

    # Nothing wider than the window; the guidance and its figures on the first screen.
    scroll = page.evaluate("() => [document.documentElement.scrollWidth, innerWidth]")
    assert scroll[0] <= scroll[1], scroll
    for selector in ("#id_guidance", "#kk-guidance-figures"):
        box = page.locator(selector).bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= LAPTOP["width"], selector
    assert page.locator("#kk-guidance-figures").bounding_box()["y"] < LAPTOP["height"], "the figures are below the fold"
    rows = page.locator("#kk-versions tbody tr")
    assert rows.count() >= 2
    for index in range(rows.count()):
        box = rows.nth(index).bounding_box()
        assert box["x"] + box["width"] <= LAPTOP["width"], index
