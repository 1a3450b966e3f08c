"""The Preview page (an admin URL of the assistant's page,
chat/admin/assistant.py): staff who may shape the assistant chat with its
draft (chat/assistant/), on the chat page itself (the same script and
frames, streaming, Stop, sources), as a visitor of their own
(chat/visitors/preview.py). Beside it, what the draft changes from the
published version. Its turns are billed as preview and left out of
Support's reports."""

from django.core.exceptions import PermissionDenied
from django.shortcuts import render
from django.utils.translation import gettext_lazy as _

from base.pages import private, with_policy
from chat.assistant import versions
from chat.engine import history
from chat.visitors import access, preview
from chat.visitors.identity import hash_key

LABELS = {
    "guidance": _("guidance"),
    "name_en": _("name (English)"),
    "name_pt_br": _("name (Brazilian Portuguese)"),
    "greeting_en": _("greeting (English)"),
    "greeting_pt_br": _("greeting (Brazilian Portuguese)"),
    "starters_en": _("starter questions (English)"),
    "starters_pt_br": _("starter questions (Brazilian Portuguese)"),
}


def preview_page(request):
    if not preview.may_preview(request.user):
        raise PermissionDenied
    key = preview.key_for(request.session)
    draft = versions.draft()
    shown = versions.previewed()
    changes = [
        (LABELS.get(name, name), _shown(before), _shown(after))
        for name, before, after in versions.changes(versions.live_version(), draft)
    ]
    context = {
        "preview": True,
        "draft": draft,
        "changes": changes,
        "face": shown.face(request.LANGUAGE_CODE),
        "history": history.history_of(access.conversation_of(hash_key(key))),
    }
    return private(with_policy(request, render(request, "chat/preview.html", context)))


def _shown(value) -> str:
    if isinstance(value, list):
        return "\n".join(str(item) for item in value)
    return str(value or "")
