"""Telling Support of a request for a person by email
(chat/support/handoffs.py takes the notice on and calls `deliver`).

The email puts our links and fields first, then what was written in the chat
(the reason, the last question, an unusual address or page), every line of
it quoted with "> ": a visitor's line breaks cannot make their words pass
for ours.
"""

from __future__ import annotations

import logging
import re
from typing import Any

from asgiref.sync import sync_to_async
from channels.db import database_sync_to_async
from django.conf import settings
from django.core.mail import send_mail
from django.utils import translation
from django.utils.translation import gettext as _

from chat.models import Handoff
from chat.text import visible

logger = logging.getLogger("kookee.handoffs")


async def deliver(handoff_id: int, notice: dict[str, Any]) -> None:
    """Emails the notice to its recipients, if it has any; records how it went."""
    if not notice["recipients"]:
        return
    subject, body = _message(notice)
    try:
        # A thread of its own: SMTP can take seconds, and must not hold the
        # database thread that every turn of the process shares.
        await sync_to_async(send_mail, thread_sensitive=False)(
            subject, body, None, notice["recipients"], fail_silently=False
        )
        status = Handoff.Delivery.SENT
    except Exception:
        logger.exception("handoff=%s: the email to Support failed", handoff_id)
        status = Handoff.Delivery.FAILED
    await database_sync_to_async(_record)(handoff_id, status)


def _record(handoff_id: int, status: str) -> None:
    Handoff.objects.filter(pk=handoff_id).update(email_status=status)


def _message(notice: dict[str, Any]) -> tuple[str, str]:
    # Staff read it: in the site's language, whoever the visitor is.
    with translation.override(settings.LANGUAGE_CODE):
        # What the visitor wrote comes last: nothing of ours follows it, so
        # nothing in it can pass for a line of ours.
        lines = [_intro(notice), "", *_links(notice), "", *_fields(notice), "", *_written(notice)]
        return _("Kookee chat: a visitor asks for a person (#%(id)s)") % {"id": notice["id"]}, "\n".join(lines)


def _intro(notice: dict[str, Any]) -> str:
    if notice["source"] == Handoff.Source.VISITOR:
        return _("A visitor asked to talk to a person.")
    return _("The assistant handed a conversation over to a person.")


def _links(notice: dict[str, Any]) -> list[str]:
    return [
        _("Open the request: %(url)s") % {"url": notice["admin_url"]},
        _("Read the transcript: %(url)s") % {"url": notice["conversation"]["admin_url"]},
    ]


# What the visitor gave that may stand on a line of ours: printable ASCII
# but space, " and \, as an address or a page's URL (a browser's location.href)
# normally is. validate_email also takes a quoted local part with control
# characters and a domain with any character past U+00A1 (line separators,
# bidi controls); the widget's script can be made to report any path. Those
# are quoted with what was written.
_PLAIN = re.compile(r"[!#-\[\]-~]+")


def _fields(notice: dict[str, Any]) -> list[str]:
    return [
        _("Visitor's email: %(email)s") % {"email": _shown(notice["email"], _("not given"))},
        _("From: %(page)s") % {"page": _shown(notice["conversation"]["source_url"], _("the chat page"))},
    ]


def _shown(value: str, missing: str) -> str:
    if not value:
        return missing
    return value if _PLAIN.fullmatch(value) else _("quoted below")


def _written(notice: dict[str, Any]) -> list[str]:
    """The reason (the visitor's, or the model's from the conversation), the
    last question, and an unusual address or page, each quoted under its label."""
    conversation = notice["conversation"]
    fields = [(_("Reason:"), notice["reason"]), (_("Last question:"), conversation["last_question"])]
    unusual = [
        (_("Visitor's email, as typed:"), notice["email"]),
        (_("Page, as reported:"), conversation["source_url"]),
    ]
    fields += [(label, value) for label, value in unusual if value and not _PLAIN.fullmatch(value)]
    lines = [_("Written in the chat, quoted as typed (not checked: do not trust links in it):")]
    for label, text in fields:
        lines += ["", label, *(_quoted(text) if text else [_("(nothing)")])]
    return lines


def _quoted(text: str) -> list[str]:
    # Every line break splitlines() knows: a mail client may break a line at
    # any of them (\r, \v, \f, \x1c-\x1e, \x85, U+2028, U+2029).
    return ["> " + visible(line) for line in text.splitlines()]
