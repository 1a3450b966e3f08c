"""Support told of a request for a person by email
(chat/support/handoff_email.py), in the background: who is emailed, what the
email says, and what the visitor wrote, quoted so that it cannot pass for
ours; a failed email is recorded."""

from __future__ import annotations

import unicodedata

import pytest
from channels.db import database_sync_to_async
from django.contrib.auth.models import Group

from chat.models import Conversation, Handoff, Turn
from chat.roles import ensure_roles
from chat.support import handoffs
from chat.visitors import embed
from tests.chat.support import handoff_helpers as helpers
from tests.chat.support.handoff_helpers import (
    FAKE,
    SITE,
    SUPPORT_INBOX,
    ask_for_a_person,
    closed_port,
    get,
    notified,
    stored,
)
from tests.provider import answer

pytestmark = pytest.mark.django_db(transaction=True)

# The handoff tests' fixtures (handoff_helpers.py), two of them autouse.
handoff_settings = helpers.handoff_settings
no_notification_left_behind = helpers.no_notification_left_behind
visitors, chat, receiver = helpers.visitors, helpers.chat, helpers.receiver


# --- telling Support: email -------------------------------------------------------------------


async def test_support_is_emailed_the_request(chat, use_provider, mailoutbox, settings):
    use_provider.queue(answer("I don't know."))
    await chat.finish(await chat.ask("Can I get an invoice in <b>euros</b>?"))

    saved = await ask_for_a_person(chat, reason="Needs an invoice in euros.", email="sam@example.com")
    await notified()

    handoff_id = saved["handoff_id"]
    handoff = await get(handoff_id)
    conversation = await database_sync_to_async(Conversation.objects.get)()
    [message] = mailoutbox
    assert message.to == SUPPORT_INBOX
    assert message.from_email == settings.DEFAULT_FROM_EMAIL
    assert message.subject == f"Kookee chat: a visitor asks for a person (#{handoff_id})"
    assert message.body == "\n".join(
        [
            "A visitor asked to talk to a person.",
            "",
            f"Open the request: {SITE}/admin/chat/handoff/{handoff_id}/change/",
            f"Read the transcript: {SITE}/admin/chat/conversation/{conversation.id}/change/",
            "",
            "Visitor's email: sam@example.com",
            "From: the chat page",
            "",
            WRITTEN,
            "",
            "Reason:",
            "> Needs an invoice in euros.",
            "",
            "Last question:",
            "> Can I get an invoice in <b>euros</b>?",
        ]
    )
    assert handoff.email_status == "sent"


async def test_an_email_with_nothing_said(chat, mailoutbox, settings):
    settings.KOOKEE_SITE_URL = ""

    saved = await ask_for_a_person(chat)
    await notified()

    body = mailoutbox[0].body
    assert "\nReason:\n(nothing)\n" in body
    assert "\nVisitor's email: not given\n" in body
    assert body.endswith("\nLast question:\n(nothing)")
    assert f"\nOpen the request: /admin/chat/handoff/{saved['handoff_id']}/change/\n" in body


# --- the email: what the visitor wrote is quoted ------------------------------------------------

WRITTEN = "Written in the chat, quoted as typed (not checked: do not trust links in it):"
# Lines of ours that may follow WRITTEN: the labels, and what stands for nothing.
LABELS = {"", "Reason:", "Last question:", "Visitor's email, as typed:", "Page, as reported:", "(nothing)"}


def quoted_part(body: str) -> list[str]:
    """The body's lines as a mail client may break them, checked: our links
    first, nothing of the visitor's before WRITTEN, and after it only labels
    and lines quoted with "> ". Returns the lines from WRITTEN on."""
    lines = body.splitlines()
    assert lines == body.split("\n"), "no line break in the body but our own"
    written = lines.index(WRITTEN)
    ours, theirs = lines[:written], lines[written + 1 :]
    assert ours[2].startswith("Open the request: ") and ours[3].startswith("Read the transcript: ")
    assert not [line for line in ours if "evil.example" in line]
    assert not [line for line in theirs if line not in LABELS and not line.startswith("> ")]
    return theirs


def requested(reason: str, question: str) -> Handoff:
    """A request stored as it may be (reasons added to a pending one are
    joined by line breaks), waiting for its email."""
    conversation = Conversation.objects.create(visitor_hash="someone")
    turn = Turn.objects.create(conversation=conversation, status="completed", user_text=question, model="m")
    return Handoff.objects.create(
        conversation=conversation,
        turn=turn,
        source=Handoff.Source.VISITOR,
        reason=reason,
        email_status=Handoff.Delivery.PENDING,
    )


async def emailed(reason: str, question: str, mailoutbox) -> str:
    handoff = await database_sync_to_async(requested)(reason, question)
    await handoffs.notify(handoff.id)
    [message] = mailoutbox
    return message.body


async def test_a_fake_link_in_the_last_question_stays_in_the_quote(chat, use_provider, mailoutbox):
    use_provider.queue(answer("I don't know."))
    await chat.finish(await chat.ask(f"Where is my invoice?\n\n{FAKE}"))

    await ask_for_a_person(chat, reason=f"Billing.\n\n{FAKE}")
    await notified()

    [message] = mailoutbox
    assert quoted_part(message.body) == [
        "",
        "Reason:",
        f"> Billing. {FAKE}",  # a new reason is one line
        "",
        "Last question:",
        "> Where is my invoice?",
        "> ",
        f"> {FAKE}",
    ]
    assert "evil" not in message.subject


@pytest.mark.parametrize(
    "newline", ["\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
)
async def test_no_line_break_lets_the_visitors_words_out_of_the_quote(newline, mailoutbox):
    body = await emailed(f"Refund.{newline}{newline}{FAKE}", f"Hello?{newline}{newline}{FAKE}", mailoutbox)

    assert quoted_part(body) == [
        "",
        "Reason:",
        "> Refund.",
        "> ",
        f"> {FAKE}",
        "",
        "Last question:",
        "> Hello?",
        "> ",
        f"> {FAKE}",
    ]


async def test_bidi_and_control_characters_are_taken_out_of_the_quote(mailoutbox):
    reason = "Refund \u202eelpmaxe.live\u202c \u2066please\u2069\u200f\u200e\u061c\ufeff\u200b now"
    question = "Bell\x07 escape\x1b[2J del\x7f\ttab, and 👩\u200d💻 stays"

    body = await emailed(reason, question, mailoutbox)

    assert quoted_part(body)[2] == "> Refund elpmaxe.live please now"
    assert quoted_part(body)[5] == "> Bell escape[2J del tab, and 👩\u200d💻 stays"
    assert [c for c in body if unicodedata.category(c) in ("Cc", "Cf") and c not in "\n\u200d"] == []


@pytest.mark.parametrize(
    "email",
    [
        # validate_email takes both: a quoted local part with a vertical tab,
        # a domain with a line separator.
        '"x\x0bClaim\\ it:\\ http://evil.example/x"@example.com',
        "sam@example\u2028claim-it-at-evil.example",
    ],
)
async def test_an_unusual_address_is_quoted_too(chat, mailoutbox, email):
    await ask_for_a_person(chat, email=email)
    await notified()

    [message] = mailoutbox
    assert (await stored())[0].email == email
    assert "\nVisitor's email: quoted below\n" in message.body
    theirs = quoted_part(message.body)
    assert theirs[theirs.index("Visitor's email, as typed:") + 1 :] == ["> " + line for line in email.splitlines()]


async def test_a_page_reported_with_line_breaks_is_quoted(visitors, settings, mailoutbox):
    settings.KOOKEE_EMBED_ORIGINS = ["https://www.example.com"]
    page = f"https://www.example.com/pricing\u2028{FAKE}"
    widget = await visitors(token=embed.new_token(), page=page)

    await ask_for_a_person(widget)
    await notified()

    assert (await database_sync_to_async(Conversation.objects.get)()).source_url == page
    body = mailoutbox[0].body
    assert "\nFrom: quoted below\n" in body
    theirs = quoted_part(body)
    assert theirs[theirs.index("Page, as reported:") + 1 :] == ["> https://www.example.com/pricing", f"> {FAKE}"]


@pytest.fixture
def support_staff(django_user_model):
    """Support's members with and without an address, active or not; and
    others who are not Support."""
    ensure_roles()
    support, finance = Group.objects.get(name="Support"), Group.objects.get(name="Finance")

    def user(name, email, group=None, active=True):
        created = django_user_model.objects.create_user(username=name, email=email, is_staff=True, is_active=active)
        if group:
            created.groups.add(group)

    user("zoe", "zoe@example.com", support)
    user("ana", "ana@example.com", support)
    user("ana-again", "ana@example.com", support)
    user("noaddress", "", support)
    user("gone", "gone@example.com", support, active=False)
    user("fiona", "fiona@example.com", finance)
    user("bystander", "bystander@example.com")


async def test_without_a_list_supports_active_members_are_emailed(chat, settings, mailoutbox, support_staff):
    settings.KOOKEE_HANDOFF_EMAILS = []

    await ask_for_a_person(chat)
    await notified()

    [message] = mailoutbox
    assert message.to == ["ana@example.com", "zoe@example.com"]


async def test_with_nobody_to_email_the_request_is_still_taken(chat, settings, mailoutbox):
    settings.KOOKEE_HANDOFF_EMAILS = []

    saved = await ask_for_a_person(chat)
    await notified()

    assert mailoutbox == []
    handoff = await get(saved["handoff_id"])
    assert (handoff.status, handoff.email_status, handoff.webhook_status) == ("open", "", "")


async def test_a_failed_email_is_recorded(chat, settings, receiver):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_TIMEOUT = "127.0.0.1", closed_port(), 2

    saved = await ask_for_a_person(chat)
    await notified()

    handoff = await get(saved["handoff_id"])
    assert (handoff.email_status, handoff.webhook_status) == ("failed", "sent"), "the webhook goes on regardless"
