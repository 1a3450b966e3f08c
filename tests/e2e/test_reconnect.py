"""A dropped connection: the page says so, reconnects with backoff, and shows
the answer that was in flight as the server saved it."""

from __future__ import annotations

import time

from playwright.sync_api import expect

from tests.e2e.conftest import App
from tests.e2e.test_chat_page import ask, last_answer, turn_id
from tests.provider import answer, text
from tests.servers import daphne, free_port

SLOW = 20_000  # ms: the server takes a few seconds to come back


def wait_for(predicate, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_the_server_dies_mid_answer_and_the_page_comes_back_truthfully(tmp_path, provider, page):
    env = {
        "OPENAI_BASE_URL": provider.url,
        "OPENAI_API_KEY": "test-key",
        "KOOKEE_CHECKPOINT_SECONDS": "0.1",
        "KOOKEE_STALE_TURN_SECONDS": "1",
        "KOOKEE_SWEEP_SECONDS": "0.5",
    }
    port = free_port()
    hold, _ = provider.gate()
    provider.queue([text("Half of"), text(" an answer"), hold])
    with daphne(tmp_path, port=port, **env) as (address, database, process):
        app = App(f"http://{address}", database, process)
        page.goto(app.url)
        ask(page, "Tell me a long story")
        expect(last_answer(page).locator(".message__text")).to_have_text("Half of an answer")
        turn = turn_id(page)
        wait_for(lambda: app.turn(turn)[2] == "Half of an answer")  # checkpointed
        process.kill()  # no goodbye: the socket just drops
        process.wait()

        expect(page.locator("#connection")).to_have_text("Connection lost. Reconnecting…")
        expect(last_answer(page).locator(".message__note")).to_have_text("Connection lost. Checking what was saved…")
        expect(page.locator("#send")).to_be_disabled()
        assert last_answer(page).get_attribute("aria-busy") is None

    with daphne(tmp_path, port=port, **env):
        # The new process closes the turn the dead one left; the page,
        # reconnected, learns that from the server.
        expect(last_answer(page)).to_have_attribute("data-status", "interrupted", timeout=SLOW)
        expect(page.locator("#connection")).to_have_text("")
        expect(last_answer(page).locator(".message__note")).to_have_text(
            "Interrupted: the connection dropped while this answer was being written."
        )
        assert app.turn(turn) == ("interrupted", True, "Half of an answer")
        expect(last_answer(page).locator(".message__text")).to_have_text("Half of an answer")

        provider.queue(answer("Back again."))
        ask(page, "Still there?")
        expect(last_answer(page)).to_have_attribute("data-status", "completed")
        expect(page.locator(".message--assistant")).to_have_count(2)


def test_the_network_drops_mid_answer_and_the_page_reconnects_when_back(scripted_app, provider, context, page):
    hold, _ = provider.gate()
    provider.queue([text("Going"), text(" strong"), hold])
    page.goto(scripted_app.url)
    ask(page, "Tell me more")
    expect(last_answer(page).locator(".message__text")).to_have_text("Going strong")
    turn = turn_id(page)

    context.set_offline(True)
    expect(page.locator("#connection")).to_have_text("Connection lost. Reconnecting…")
    # The server saw the socket go, and stopped, saved and billed the turn.
    wait_for(lambda: scripted_app.turn(turn)[0] != "streaming")
    assert scripted_app.turn(turn) == ("interrupted", True, "Going strong")
    assert provider.requests[-1].hung_up_early

    context.set_offline(False)  # the page reconnects at once, not after its backoff
    expect(page.locator("#connection")).to_have_text("")
    expect(last_answer(page)).to_have_attribute("data-status", "interrupted")
    expect(last_answer(page).locator(".message__note")).to_contain_text("the connection dropped")
    expect(page.locator("#send")).to_be_enabled()
