"""The chat page at a laptop's 1,366 x 768: its way to the help center and
its language switch (English, Português (Brasil)), kept across pages; and
the help center's articles, whose section headings read as headings."""

from __future__ import annotations

import pytest
from axe_playwright_python.sync_playwright import Axe
from playwright.sync_api import expect

LAPTOP = {"width": 1366, "height": 768}


@pytest.fixture
def laptop(browser):
    context = browser.new_context(viewport=LAPTOP, locale="en-US")
    context.set_default_timeout(15_000)
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(error))
    yield page
    context.close()
    assert errors == []


def no_axe_violations(page) -> None:
    results = Axe().run(page)
    assert results.violations_count == 0, results.generate_report()


def fits_the_screen(page) -> None:
    for control in ("#text", "#send", "#person"):
        box = page.locator(control).bounding_box()
        assert box["y"] + box["height"] <= LAPTOP["height"], control
    assert page.evaluate("document.documentElement.scrollHeight") <= LAPTOP["height"]


def test_the_chat_page_links_the_help_center(offline_app, laptop):
    page = laptop
    page.goto(offline_app.url)
    link = page.get_by_role("link", name="Help center")
    expect(link).to_be_visible()
    expect(page.get_by_role("button", name="Send your question")).to_be_enabled()
    fits_the_screen(page)
    link.click()
    expect(page).to_have_url(f"{offline_app.url}/help/")
    expect(page.get_by_role("heading", level=1)).to_have_text("Help center")


def test_the_language_switch_changes_the_page_and_is_kept(offline_app, laptop):
    page = laptop
    page.goto(offline_app.url)
    expect(page.locator("html")).to_have_attribute("lang", "en")
    switch = page.get_by_role("form", name="Language")
    english = switch.get_by_role("button", name="English")
    expect(english).to_have_attribute("aria-current", "true")
    expect(switch.get_by_role("button", name="Português (Brasil)")).to_have_attribute("lang", "pt-br")
    expect(page.get_by_role("button", name="Send your question")).to_be_enabled()
    no_axe_violations(page)

    switch.get_by_role("button", name="Português (Brasil)").click()
    expect(page.locator("html")).to_have_attribute("lang", "pt-br")
    expect(page).to_have_url(f"{offline_app.url}/")
    expect(page.get_by_role("heading", name="Ajuda da Kookee")).to_be_visible()
    expect(page.get_by_role("link", name="Central de ajuda")).to_be_visible()
    # The script's words too (its catalog follows the same choice).
    expect(page.get_by_role("button", name="Enviar sua pergunta")).to_be_enabled()
    expect(page.get_by_role("button", name="Português (Brasil)")).to_have_attribute("aria-current", "true")
    fits_the_screen(page)
    no_axe_violations(page)

    # Kept: after a reload, and on the help center's pages.
    page.reload()
    expect(page.locator("html")).to_have_attribute("lang", "pt-br")
    expect(page.get_by_role("button", name="Falar com uma pessoa")).to_be_visible()
    page.get_by_role("link", name="Central de ajuda").click()
    expect(page.get_by_role("heading", level=1)).to_have_text("Central de ajuda")

    # And back to English.
    page.goto(offline_app.url)
    page.get_by_role("button", name="English").click()
    expect(page.locator("html")).to_have_attribute("lang", "en")
    expect(page.get_by_role("button", name="Talk to a person")).to_be_visible()
    page.reload()
    expect(page.locator("html")).to_have_attribute("lang", "en")


def test_an_articles_section_headings_read_as_headings(offline_app, laptop):
    page = laptop
    page.goto(f"{offline_app.url}/help/install-feedback-widget/")
    body = page.locator("#article-body")
    heading = body.locator("h2").first
    expect(heading).to_be_visible()
    paragraph = body.locator("p").first
    size = heading.evaluate("h => parseFloat(getComputedStyle(h).fontSize)")
    text_size = paragraph.evaluate("p => parseFloat(getComputedStyle(p).fontSize)")
    assert size >= 1.25 * text_size, (size, text_size)
    assert heading.evaluate("h => Number(getComputedStyle(h).fontWeight)") >= 600
    # Under the article's title, in order: no level skipped, no second h1.
    levels = page.locator("main").evaluate("m => [...m.querySelectorAll('h1, h2, h3, h4, h5, h6')].map(h => h.tagName)")
    assert levels[0] == "H1" and "H1" not in levels[1:] and levels[1] == "H2"
    # A link to a section still opens at it.
    anchor = heading.get_attribute("id")
    assert anchor
    no_axe_violations(page)
