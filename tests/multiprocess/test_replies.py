"""A person answers, across the two processes: the visitor's widget on one,
Support's admin on the other, both in Chromium, and a helpdesk's signed
replies through either."""

from __future__ import annotations

import asyncio
import http.client
import json
import os
import re
import shutil
import sys
import threading
import time

import pytest

from tests.multiprocess.stack import BASE_ENV, POSTGRES, PROCESSES, ROOT, Stack, eventually, require, timings
from tests.provider import DONE, finish, text

pytestmark = pytest.mark.slow


SUPPORT_PASSWORD = "a-support-password"


async def _support_user(stack: Stack) -> None:
    """Ana, a member of Support, made as `manage.py` would, in the stack's database."""
    code = (
        "from django.contrib.auth.models import Group, User; "
        f"u = User.objects.create_user('ana', 'ana@example.com', '{SUPPORT_PASSWORD}', is_staff=True, "
        "first_name='Ana', last_name='Souza'); u.groups.add(Group.objects.get(name='Support'))"
    )
    # The servers' own settings (and so their password hasher).
    environment = {**os.environ, **BASE_ENV, "DATABASE_URL": f"{POSTGRES}/{stack.db.info.dbname}"}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "manage.py",
        "shell",
        "-c",
        code,
        cwd=ROOT,
        env=environment,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await process.communicate()
    assert process.returncode == 0, output.decode()


def _signed_reply(stack: Stack, handoff_id: int, body: dict, secret: str, process: str) -> tuple[int, dict]:
    import hashlib
    import hmac

    # Signed as a helpdesk signs it (docs/operations.md): the time, the method, the path as requested, the body.
    raw, path, t = json.dumps(body).encode(), f"/api/handoffs/{handoff_id}/messages", int(time.time())
    signature = f"t={t},v1=" + hmac.new(secret.encode(), f"{t}.POST.{path}.".encode() + raw, hashlib.sha256).hexdigest()
    connection = http.client.HTTPSConnection("127.0.0.1", stack.https_port, context=stack.ssl, timeout=20)
    try:
        headers = {"Content-Type": "application/json", "X-Kookee-Signature": signature, "X-Kookee-Process": process}
        connection.request("POST", path, body=raw, headers=headers)
        response = connection.getresponse()
        return response.status, json.loads(response.read() or b"{}")
    finally:
        connection.close()


async def _open_widget(page, site: str):
    from playwright.async_api import expect

    await page.goto(site)
    await page.get_by_role("button", name="Help", exact=True).click()
    frame = page.frame_locator("iframe[title='Kookee help chat']")
    await expect(frame.locator("#send")).to_be_enabled(timeout=15_000)  # connected
    return frame


async def _say(frame, text: str) -> None:
    await frame.locator("#text").fill(text)
    await frame.locator("#text").press("Enter")


async def test_support_answers_the_visitor_across_processes_in_chromium(stack_for):
    """The visitor's widget (on a customer's page) on process A, Support's
    admin on process B, both in Chromium: the claim and the reply reach the
    open widget at once and stay after a reload; the visitor's answer reaches
    the request's page and the helpdesk's webhook, not the model; a
    helpdesk's signed reply, posted to either process, reaches the widget too."""
    from http.server import ThreadingHTTPServer

    from playwright.async_api import async_playwright, expect

    from tests.chat.support.handoff_helpers import Receiver
    from tests.e2e.test_widget import _HostPage

    require(shutil.which("/usr/bin/chromium"), "Debian's Chromium")
    secret = "helpdesk-secret"
    helpdesk = Receiver()
    webhook = await helpdesk.start()
    customer = ThreadingHTTPServer(("127.0.0.1", 0), _HostPage)
    threading.Thread(target=customer.serve_forever, daemon=True).start()
    site = f"http://127.0.0.1:{customer.server_address[1]}"
    env = {"KOOKEE_HANDOFF_WEBHOOK": webhook, "KOOKEE_HANDOFF_WEBHOOK_SECRET": secret, "KOOKEE_EMBED_ORIGINS": site}
    try:
        async with stack_for(**env) as stack, async_playwright() as playwright:
            _HostPage.kookee = stack.origin
            await _support_user(stack)
            browser = await playwright.chromium.launch(
                executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"]
            )
            contexts = {}
            for process in PROCESSES:
                contexts[process] = await browser.new_context(
                    ignore_https_errors=True, extra_http_headers={"X-Kookee-Process": process}
                )
            visitor, support = await contexts["a"].new_page(), await contexts["b"].new_page()

            # The visitor, in the widget on process A, asks, then asks for a person.
            stack.queue_everywhere([text("I am not sure; a person can help."), finish("stop"), DONE])
            widget = await _open_widget(visitor, site)
            await _say(widget, "Why was I charged twice?")
            await expect(widget.get_by_text("a person can help.")).to_be_visible(timeout=15_000)
            await widget.get_by_role("button", name="Talk to a person").click()
            dialog = widget.get_by_role("dialog", name="Talk to a person")
            await dialog.get_by_role("button", name="Ask for a person").click()
            await expect(dialog).to_be_hidden()
            handoff_id = await eventually(
                lambda: stack.scalar("select max(id) from chat_handoff"), timeout=10, what="the request"
            )
            await helpdesk.wait_for(1)  # handoff.requested

            # Support, on process B: log in, open the request, reply.
            await support.goto(f"{stack.origin}/admin/login/")
            await support.get_by_label("Username").fill("ana")
            await support.get_by_label("Password").fill(SUPPORT_PASSWORD)
            await support.get_by_role("button", name="Log in").click()
            await expect(support).not_to_have_url(re.compile("/login/"))
            await support.goto(f"{stack.origin}/admin/chat/handoff/{handoff_id}/change/")
            await support.get_by_label("Reply to the visitor").fill("Hi, I am Ana. I refunded the second charge.")
            await support.get_by_role("button", name="Send to the visitor").click()
            await expect(support.get_by_text("Sent to the visitor.")).to_be_visible()

            # At once in the open widget, with who answers; and after a reload.
            started = time.monotonic()
            await expect(widget.get_by_text("I refunded the second charge.")).to_be_visible(timeout=5_000)
            timings["support reply -> shown in the widget on the other process (ms)"] = (
                time.monotonic() - started
            ) * 1000
            await expect(widget.get_by_text("Ana Souza").first).to_be_visible()
            widget = await _open_widget(visitor, site)
            await expect(widget.get_by_text("I refunded the second charge.")).to_be_visible(timeout=10_000)

            # The visitor answers: to Ana, live on her page, to the helpdesk, not to the model.
            before = {name: len(provider.requests) for name, provider in stack.providers.items()}
            await _say(widget, "Thank you, Ana!")
            await expect(support.get_by_text("Thank you, Ana!")).to_be_visible(timeout=10_000)
            event = await helpdesk.wait_for(2)
            assert event.json["event"] == "handoff.message" and event.json["message"]["text"] == "Thank you, Ana!"
            assert {name: len(provider.requests) for name, provider in stack.providers.items()} == before
            assert await stack.scalar("select count(*) from chat_turn") == 1

            # A helpdesk's signed reply, through either process, reaches the widget at once.
            body = {"text": "Zendesk here: anything else?", "author": "Kim", "message_id": "zd-1"}
            for process in PROCESSES:  # the same message on both (a retry): one message
                status, answered = await asyncio.to_thread(_signed_reply, stack, handoff_id, body, secret, process)
                assert status == 201, answered
            await expect(widget.get_by_text("Zendesk here: anything else?")).to_have_count(1, timeout=5_000)
            assert await stack.scalar("select count(*) from chat_message where kind = 'agent'") == 2
            await browser.close()
    finally:
        customer.shutdown()
        customer.server_close()
        await helpdesk.stop()
