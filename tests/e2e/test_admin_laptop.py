"""The admin on a 1,366 x 768 laptop, in English and in Brazilian Portuguese
(the admin follows the browser's language): the ledger's totals and chart
on the first screen, the lists' columns inside the window, titles and
emails that do not wrap into towers; and the page a user gets for another
role's URL, in the admin's own look."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import App
from tests.e2e.test_admin_pages import seeded  # noqa: F401 (fixture)
from tests.e2e.test_finance_pages import log_in
from tests.servers import ROOT

pytestmark = pytest.mark.slow

LAPTOP = {"width": 1366, "height": 768}
LOCALES = pytest.mark.parametrize("locale", ["en-US", "pt-BR"])

# What a real help center and queue hold beside the seeded week: a long
# title, a source with a long name, a long email address.
LONG_TITLE = (
    "Connecting your single sign-on provider (Okta, Azure AD, Google Workspace) and mapping its groups "
    "to workspace roles, step by step"
)
LONG_EMAIL = "maria.fernanda.albuquerque@empresa-de-exemplo.com.br"
EXTRAS = f"""
from django.utils import timezone
from chat.models import Conversation, Handoff
from helpcenter.models import Article, Source
source = Source.objects.create(kind="markdown", name="Product documentation (docs.acme.example)", location="/srv/docs")
Article.objects.create(title={LONG_TITLE!r}, slug="sso-long", body="Single sign-on.", source=source, external_id="sso",
                       synced_at=timezone.now())
Source.objects.create(
    kind="website",
    name="Acme's knowledge base",
    location="https://docs.acme-corporation.example/en-us/knowledge-base/",
    synced_at=timezone.now(),
    last_result={{"added": 12, "updated": 3, "unchanged": 140, "unpublished": 1, "skipped": 4}},
)
talk = Conversation.objects.create(visitor_hash="long-email")
Handoff.objects.create(conversation=talk, source="visitor", reason="Please call me back", email={LONG_EMAIL!r})
"""


@pytest.fixture(scope="module")
def laptop_app(seeded) -> Iterator[App]:  # noqa: F811 (fixture)
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", EXTRAS],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": f"sqlite:///{seeded.database}"},
        check=True,
        capture_output=True,
    )
    return seeded


@pytest.fixture(scope="module")
def sessions() -> dict:
    """The session cookies of a user signed in, by (locale, username): the
    admin's login form is filled once per language and user in the module,
    and the other tests' browsers start with its cookies."""
    return {}


@pytest.fixture
def laptop(browser, sessions):
    contexts = []

    def open_as(locale: str, username: str = "root", password: str = "kookee-admin"):
        context = browser.new_context(viewport=LAPTOP, locale=locale)
        contexts.append(context)
        page = context.new_page()

        def log_in_to(app: App) -> None:
            key = (app.url, locale, username)
            if key in sessions:
                context.add_cookies(sessions[key])
                return
            log_in(page, app, username, password)
            sessions[key] = context.cookies()

        return page, log_in_to

    yield open_as
    for context in contexts:
        context.close()


def top_of(page, selector: str) -> float:
    return page.locator(selector).first.bounding_box()["y"]


def bottom_of(page, selector: str) -> float:
    box = page.locator(selector).first.bounding_box()
    return box["y"] + box["height"]


@LOCALES
def test_the_ledgers_totals_and_chart_start_on_the_first_screen(laptop_app, laptop, locale):
    page, log_in_to = laptop(locale)
    log_in_to(laptop_app)
    page.goto(laptop_app.url + "/admin/billing/ledgerentry/")
    expect(page.locator("#result_list")).to_be_visible()

    assert bottom_of(page, ".ledger-totals") < LAPTOP["height"], "the totals are below the fold"
    assert top_of(page, ".ledger-chart") < LAPTOP["height"] - 100, "the chart is below the fold"
    # Every filter still shows its choices, and the list keeps its width.
    expect(page.locator("#changelist-filter")).to_contain_text("gpt-4o-mini")
    expect(page.locator("#changelist-filter input[type=date]").first).to_be_visible()
    scroll, box = page.evaluate("() => [document.querySelector('.results').scrollWidth, innerWidth]")
    assert scroll <= box


LISTS = {
    "prices": "/admin/billing/price/",
    "articles": "/admin/helpcenter/article/",
    "requests": "/admin/chat/handoff/",
    "sources": "/admin/helpcenter/source/",
}
HEADERS_OUTSIDE = """() => {
    const results = document.querySelector('.results');
    const edge = Math.min(innerWidth, results.getBoundingClientRect().right);
    return {
        scroll: [results.scrollWidth, results.clientWidth, document.documentElement.scrollWidth, innerWidth],
        outside: [...document.querySelectorAll('#result_list thead th')]
            .filter(th => th.getBoundingClientRect().right > edge + 0.5)
            .map(th => th.innerText.trim()),
    };
}"""
# How many lines a cell's content takes, by its height and its line height.
LINES = """cells => cells.map(cell => {
    const line = parseFloat(getComputedStyle(cell).lineHeight);
    return [cell.innerText.trim(), Math.round(cell.getBoundingClientRect().height / line)];
})"""


@LOCALES
@pytest.mark.parametrize("name", list(LISTS))
def test_every_column_of_the_lists_is_inside_the_window(laptop_app, laptop, locale, name):
    page, log_in_to = laptop(locale)
    log_in_to(laptop_app)
    page.goto(laptop_app.url + LISTS[name])
    expect(page.locator("#result_list")).to_be_visible()

    found = page.evaluate(HEADERS_OUTSIDE)

    assert found["outside"] == [], f"cut off at {LAPTOP['width']} px"
    results_scroll, results_box, page_scroll, window = found["scroll"]
    assert results_scroll <= results_box and page_scroll <= window


@LOCALES
def test_article_titles_take_two_lines_at_most_and_say_the_rest_in_a_tooltip(laptop_app, laptop, locale):
    page, log_in_to = laptop(locale)
    log_in_to(laptop_app)
    page.goto(laptop_app.url + "/admin/helpcenter/article/")
    expect(page.locator("#result_list")).to_be_visible()

    lines = dict(page.locator("#result_list .field-short_title [title]").evaluate_all(LINES))

    assert len(lines) >= 30 and max(lines.values()) <= 2, lines
    long = page.locator(f'#result_list .field-short_title [title="{LONG_TITLE}"]')
    assert long.evaluate_all(LINES) == [[long.inner_text().strip(), 2]]  # clipped to two lines


@LOCALES
def test_an_email_in_the_queue_takes_one_line(laptop_app, laptop, locale):
    page, log_in_to = laptop(locale)
    log_in_to(laptop_app)
    page.goto(laptop_app.url + "/admin/chat/handoff/")
    expect(page.locator("#result_list")).to_be_visible()

    lines = page.locator("#result_list .field-contact .kk-email").evaluate_all(LINES)

    assert {email for email, _ in lines} >= {"ana@example.com"}, lines
    assert {count for _, count in lines} == {1}, lines
    expect(page.locator(f'#result_list .kk-email[title="{LONG_EMAIL}"]')).to_be_visible()


def test_another_roles_page_is_the_admins_own_403(laptop_app, laptop):
    page, log_in_to = laptop("en-US", "sam", "kookee-support")
    log_in_to(laptop_app)

    response = page.goto(laptop_app.url + "/admin/billing/ledgerentry/")

    assert response.status == 403
    expect(page.locator("#content")).to_contain_text("This page is for Finance.")
    expect(page.locator("#site-name")).to_be_visible()  # the admin's header, styled by its stylesheet
    header = page.locator("#header").evaluate("e => getComputedStyle(e).backgroundColor")
    assert header not in ("rgba(0, 0, 0, 0)", "transparent")
    page.locator("#content").get_by_role("link").first.click()
    expect(page).to_have_url(laptop_app.url + "/admin/")
