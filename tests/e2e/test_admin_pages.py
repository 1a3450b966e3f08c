"""Support's admin pages in Chromium, on a week of seeded data: every list
fits a 1,400 px screen beside the admin's sidebar and filters; the pages
the README shows are photographed (`make screenshots` keeps them)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from playwright.sync_api import expect

from tests.e2e.conftest import OFFLINE, App
from tests.e2e.test_screenshots import png_size, shots  # noqa: F401 (fixture)
from tests.servers import ROOT, daphne

LISTS = [
    "/admin/chat/conversation/",
    "/admin/chat/turn/",
    "/admin/chat/handoff/",
    "/admin/chat/feedback/",
    "/admin/chat/search/",
    "/admin/chat/unansweredquestion/",
    "/admin/chat/supportreport/",
]


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> Iterator[App]:
    with daphne(tmp_path_factory.mktemp("admin"), **OFFLINE) as (address, database, process):
        subprocess.run(
            [sys.executable, "manage.py", "shell", "-c", "import tests.e2e.support_seed as s; s.seed()"],
            cwd=ROOT,
            env={**os.environ, "DATABASE_URL": f"sqlite:///{database}"},
            check=True,
            capture_output=True,
        )
        yield App(f"http://{address}", database, process)


def log_in(page, app: App, username: str, password: str) -> None:
    page.goto(f"{app.url}/admin/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Log in").click()
    expect(page.locator("#site-name")).to_have_text("Kookee chat")


@pytest.mark.parametrize("user", [("root", "kookee-admin"), ("sam", "kookee-support")], ids=["superuser", "Support"])
def test_every_support_page_fits_a_1400_px_screen(seeded, browser, user):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    log_in(page, seeded, *user)
    overflowing = {}
    for url in LISTS:
        page.goto(seeded.url + url)
        expect(page.locator("#content-main")).to_be_visible()
        widths = page.evaluate(
            """() => [document.documentElement.scrollWidth,
                      ...[...document.querySelectorAll('.results, #content-main')]
                         .map(e => e.scrollWidth - e.clientWidth)]"""
        )
        if widths[0] > 1400 or any(extra > 0 for extra in widths[1:]):
            overflowing[url] = widths
    context.close()
    assert overflowing == {}


def test_support_pages_screenshots(seeded, browser, shots):  # noqa: F811 (fixture)
    context = browser.new_context(viewport={"width": 1400, "height": 900}, device_scale_factor=1)
    page = context.new_page()
    log_in(page, seeded, "sam", "kookee-support")
    pages = {
        "admin-support-report": "/admin/chat/supportreport/?days=7",
        "admin-unanswered": "/admin/chat/unansweredquestion/?days=7",
        "admin-handoffs": "/admin/chat/handoff/",
        "admin-conversations": "/admin/chat/conversation/",
    }
    for name, url in pages.items():
        page.goto(seeded.url + url)
        expect(page.locator("#content-main")).to_be_visible()
        page.screenshot(path=shots / f"{name}.png")
    # A request for a person, answered in the conversation.
    page.goto(seeded.url + "/admin/chat/handoff/?status=claimed")
    page.locator("#result_list tbody tr a").first.click()
    expect(page.locator("#kk-thread")).to_contain_text("Sam Reyes (Support) to the visitor")
    page.screenshot(path=shots / "admin-handoff-reply.png", full_page=True)
    # A transcript: the conversation that asked for bitcoin.
    page.goto(seeded.url + "/admin/chat/conversation/")
    page.get_by_role("link", name="Can I pay with bitcoin?").click()
    expect(page.locator(".kk-transcript")).to_contain_text("Thumbs down")
    page.screenshot(path=shots / "admin-transcript.png", full_page=True)
    context.close()
    for name in pages:
        assert png_size(shots / f"{name}.png") == (1400, 900)
