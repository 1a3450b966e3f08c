"""The screenshots in docs/ (README): the chat idle, streaming and stopped,
and the widget. Taken on every run, so they cannot go stale unnoticed;
`make screenshots` writes them to docs/screenshots/."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
from playwright.sync_api import expect

from tests.e2e.test_chat_page import ask, last_answer
from tests.e2e.test_widget import customer_sites, kookee, open_widget  # noqa: F401 (fixtures)
from tests.provider import answer, text, tool_round

ANSWER = """To add the widget to your site:

1. Open **Settings → Widget** and copy your snippet.
2. Paste it before `</body>` on every page:

```html
<script src="https://widget.kookee.io/v1.js" data-workspace="acme"></script>
```

3. Reload your site: the **Feedback** button appears in the corner.

See [Installing the feedback widget](/help/install-feedback-widget/) for single-page apps."""


@pytest.fixture
def shots(tmp_path) -> Path:
    folder = Path(os.environ.get("KOOKEE_SCREENSHOTS_DIR") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


def test_chat_page_screenshots(scripted_app, provider, browser, shots):
    hold, release = provider.gate()
    stopped_hold, _ = provider.gate()
    provider.queue(
        tool_round([("call_1", "search_help_center", {"query": "install the widget"})]),
        [hold, *answer(ANSWER)],
        [text("Your data is exported as CSV: posts, votes, comments and users. Go to "), stopped_hold],
    )
    context = browser.new_context(viewport={"width": 900, "height": 640}, device_scale_factor=1)
    page = context.new_page()
    page.goto(scripted_app.url)
    expect(page.locator("#send")).to_be_enabled()

    ask(page, "How do I install the widget on my site?")
    expect(last_answer(page).locator(".message__tool")).to_be_visible()
    release()
    expect(last_answer(page)).to_have_attribute("data-status", "completed")
    page.screenshot(path=shots / "chat-idle.png")

    ask(page, "What's in a data export?")
    expect(last_answer(page).locator(".message__text")).to_contain_text("Go to")
    expect(page.locator("#send")).to_have_text("Stop")
    page.screenshot(path=shots / "chat-streaming.png")
    page.locator("#send").click()
    expect(last_answer(page)).to_have_attribute("data-status", "interrupted")
    page.screenshot(path=shots / "chat-stopped.png")
    context.close()

    for name in ("chat-idle", "chat-streaming", "chat-stopped"):
        assert png_size(shots / f"{name}.png") == (900, 640)


def test_widget_screenshots(kookee, customer_sites, browser, shots):  # noqa: F811 (fixtures)
    for name, viewport in (("widget", {"width": 1000, "height": 720}), ("widget-phone", {"width": 390, "height": 720})):
        context = browser.new_context(viewport=viewport, device_scale_factor=1)
        page = context.new_page()
        page.goto(customer_sites[0])
        chat = open_widget(page)
        chat.locator("#text").fill("How do I cancel my subscription?")
        chat.locator("#text").press("Enter")
        expect(chat.locator(".message--assistant").last).to_have_attribute("data-status", "completed")
        page.screenshot(path=shots / f"{name}.png")
        context.close()
        assert png_size(shots / f"{name}.png") == (viewport["width"], viewport["height"])
