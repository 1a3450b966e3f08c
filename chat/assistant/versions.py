"""The assistant as the team shapes it (chat.AssistantVersion): the live
version, which every new turn reads (in every process: from the database,
at the turn's start), and the draft, which Support edits, previews and
publishes. Every change is a new version; nothing is edited in place.

A version's guidance goes into the system prompt after the product's own
rules (chat/engine/prompt.py), which it cannot switch off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone
from django.utils.translation import gettext as _

from chat.models import AssistantVersion

# The languages the page speaks, and their columns' suffixes.
SUFFIXES = {"en": "en", "pt-br": "pt_br"}
MAX_STARTERS = 4
STARTER_CHARS = 120
FIELDS = (
    "guidance",
    *(f"{kind}_{suffix}" for suffix in SUFFIXES.values() for kind in ("name", "greeting", "starters")),
)


@dataclass(frozen=True)
class Face:
    """What a visitor meets before they write, in their language."""

    name: str
    greeting: str
    starters: tuple[str, ...]


@dataclass(frozen=True)
class Shape:
    """A version, as plain data: what the turn and the page read."""

    version_id: int | None = None
    guidance: str = ""
    values: dict[str, Any] = field(default_factory=dict)

    def face(self, language: str) -> Face:
        """In the visitor's language; what is blank there, in English."""
        own = SUFFIXES.get((language or "").lower(), "en")

        def pick(kind: str) -> Any:
            return self.values.get(f"{kind}_{own}") or self.values.get(f"{kind}_en") or ""

        return Face(str(pick("name")), str(pick("greeting")), tuple(pick("starters") or ()))


def shape_of(version: AssistantVersion | None) -> Shape:
    if version is None:
        return Shape()
    return Shape(version.pk, version.guidance, {name: getattr(version, name) for name in FIELDS})


def live_version() -> AssistantVersion | None:
    return AssistantVersion.objects.filter(published_at__isnull=False).order_by("-published_at", "-id").first()


def live() -> Shape:
    """What visitors meet now (the product's defaults when nothing was published)."""
    return shape_of(live_version())


def previewed() -> Shape:
    """What the Preview page chats with: the draft, else the live version."""
    return shape_of(draft() or live_version())


def latest() -> AssistantVersion | None:
    return AssistantVersion.objects.order_by("-id").first()


def draft() -> AssistantVersion | None:
    """The version being edited: the latest, unless it is live (no draft then)."""
    version = latest()
    current = live_version()
    if version is None or (current is not None and version.pk == current.pk):
        return None
    if version.published_at is not None:
        return None  # an older published version than the live one cannot be the latest: none
    return version


def values_of(version: AssistantVersion | None) -> dict[str, Any]:
    return {name: getattr(version, name) for name in FIELDS} if version else {name: _empty(name) for name in FIELDS}


def _empty(name: str) -> Any:
    return [] if name.startswith("starters_") else ""


def clean(values: dict[str, Any]) -> dict[str, Any]:
    """The values as stored: trimmed and checked. Raises ValidationError."""
    cleaned = {name: values.get(name, _empty(name)) for name in FIELDS}
    errors: dict[str, str] = {}
    guidance = str(cleaned["guidance"] or "").replace("\r\n", "\n").strip()
    if len(guidance) > settings.KOOKEE_GUIDANCE_CHARS:
        errors["guidance"] = _("The guidance is limited to %(limit)s characters (it has %(count)s).") % {
            "limit": settings.KOOKEE_GUIDANCE_CHARS,
            "count": len(guidance),
        }
    cleaned["guidance"] = guidance
    for suffix in SUFFIXES.values():
        cleaned[f"name_{suffix}"] = str(cleaned[f"name_{suffix}"] or "").strip()[:60]
        cleaned[f"greeting_{suffix}"] = str(cleaned[f"greeting_{suffix}"] or "").strip()[:500]
        starters = cleaned[f"starters_{suffix}"] or []
        if isinstance(starters, str):
            starters = starters.splitlines()
        starters = [str(line).strip() for line in starters if str(line).strip()]
        if len(starters) > MAX_STARTERS:
            errors[f"starters_{suffix}"] = _("At most %(count)s starter questions.") % {"count": MAX_STARTERS}
        if any(len(line) > STARTER_CHARS for line in starters):
            errors[f"starters_{suffix}"] = _("A starter question is at most %(count)s characters.") % {
                "count": STARTER_CHARS
            }
        cleaned[f"starters_{suffix}"] = starters
    if errors:
        raise ValidationError(errors)
    return cleaned


def _who(by: Any) -> tuple[Any, str]:
    """A user, or the name of what acted ("manage.py set_guidance")."""
    if isinstance(by, str):
        return None, by[:150]
    return by, (by.get_username() if by is not None else "")[:150]


@transaction.atomic
def save_draft(values: dict[str, Any], by: Any, restored_from: AssistantVersion | None = None) -> AssistantVersion:
    """A new draft with these values, unless they are the latest version's
    already (then that one). Raises ValidationError, saving nothing."""
    cleaned = clean(values)
    current = AssistantVersion.objects.select_for_update().order_by("-id").first()
    if current is not None and values_of(current) == cleaned and restored_from is None:
        return current
    user, name = _who(by)
    return AssistantVersion.objects.create(
        **cleaned, created_by=user, created_by_name=name, restored_from=restored_from
    )


@transaction.atomic
def publish(version: AssistantVersion, by: Any) -> AssistantVersion:
    """Makes the version live, from the next turn on, in every process."""
    _user, name = _who(by)
    version = AssistantVersion.objects.select_for_update().get(pk=version.pk)
    version.published_at, version.published_by_name = timezone.now(), name
    version.save(update_fields=["published_at", "published_by_name"])
    return version


def restore(version: AssistantVersion, by: Any) -> AssistantVersion:
    """An old version, back as the draft (publish it to make it live)."""
    return save_draft(values_of(version), by, restored_from=version)


@transaction.atomic
def publish_guidance(text: str, by: str) -> AssistantVersion:
    """The guidance from a file (manage.py set_guidance), published at once,
    the rest as it is live. A draft being edited is left as it was, newer."""
    values = {**values_of(live_version()), "guidance": text}
    version = AssistantVersion.objects.create(**clean(values), created_by_name=by)
    return publish(version, by)


def changes(before: AssistantVersion | None, after: AssistantVersion | None) -> list[tuple[str, Any, Any]]:
    """What differs between two versions: (field, before, after)."""
    old, new = values_of(before), values_of(after)
    return [(name, old[name], new[name]) for name in FIELDS if old[name] != new[name]]


def guidance_tokens(text: str, chars_per_token: float) -> int:
    """The input tokens the guidance adds to every model call (a help
    question makes two), at the model's learnt characters per token."""
    return math.ceil(len(text) / chars_per_token) if text else 0
