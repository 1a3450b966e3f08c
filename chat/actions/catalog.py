"""The actions as stored: a document imported (and imported again: a sync),
the credentials set, and what a turn may offer its visitor.

An import is all or nothing: every operation is checked first, and the
rows change in one transaction. A re-import updates what changed, leaves
staff's own texts alone, and disables (never deletes) what the document
no longer has: past calls keep their action.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urljoin, urlsplit

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from base.sealed import Unreadable, seal, unseal
from chat.actions import openapi
from chat.models import Action, ActionCall, ActionScheme
from chat.visitors.verified import Person

logger = logging.getLogger("kookee.actions")

SECRET_PURPOSE = "kookee.action-secret"
LOOPBACK_NAMES = {"localhost", "127.0.0.1", "::1", "[::1]"}


class ImportRefused(Exception):
    """The document cannot be imported as it is: nothing changed."""


@dataclass(frozen=True)
class Report:
    added: list[str]
    updated: list[str]
    unchanged: list[str]
    disabled: list[str]
    skipped: tuple[str, ...]
    schemes: list[str]

    def summary(self) -> str:
        return (
            f"{len(self.added)} added, {len(self.updated)} updated, {len(self.unchanged)} unchanged, "
            f"{len(self.disabled)} disabled (no longer in the document)"
        )


@dataclass(frozen=True)
class Offer:
    """An action as a turn offers it to the model."""

    id: int
    name: str
    title: str
    description: str
    operation: openapi.Operation


@dataclass
class CallRecord:
    """What chat.ActionCall keeps of a call."""

    action_id: int
    call_id: str
    arguments: dict[str, Any]
    started_at: datetime
    outcome: str = ""
    http_status: int | None = None
    detail: str = ""
    duration_ms: int | None = None
    response_bytes: int | None = None


def own_hosts(request_host: str = "") -> frozenset[tuple[str, int | None]]:
    """The names this app answers to, which no action may call: its
    ALLOWED_HOSTS and KOOKEE_SITE_URL (any port), and the host:port a
    visitor reached it at. Loopback names are left to the address rule
    (refused unless KOOKEE_ACTIONS_ALLOW_PRIVATE), except at the very port
    the visitor used."""
    hosts: set[tuple[str, int | None]] = set()
    for entry in settings.ALLOWED_HOSTS:
        name = entry.lstrip(".").lower()
        if name and name != "*" and name not in LOOPBACK_NAMES:
            hosts.add((name, None))
    if settings.KOOKEE_SITE_URL:
        site = urlsplit(settings.KOOKEE_SITE_URL)
        if site.hostname and site.hostname not in LOOPBACK_NAMES:
            hosts.add((site.hostname.lower(), None))
    if request_host:
        parts = urlsplit(f"//{request_host}")
        try:
            port = parts.port
        except ValueError:
            port = None
        if parts.hostname:
            # Without a port, the scheme's default, which the Host header
            # cannot tell (behind a proxy, neither can the socket): both.
            for each in (port,) if port else (80, 443):
                hosts.add((parts.hostname.lower(), each))
    return frozenset(hosts)


def is_own_host(url: str, hosts: frozenset[tuple[str, int | None]]) -> bool:
    parts = urlsplit(url)
    host = (parts.hostname or "").lower()
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return (host, None) in hosts or (host, port) in hosts


def _base_url(operation: openapi.Operation, base_url: str) -> str:
    """The operation's API address: --base-url replaces the document's
    servers; a relative server URL ("/api") is read against it."""
    server = operation.base_url
    if base_url:
        server = urljoin(base_url.rstrip("/") + "/", server.lstrip("/")) if server.startswith("/") else base_url
    parts = urlsplit(server)
    try:
        parts.port  # noqa: B018 (a port that is not one raises here, not later)
    except ValueError as bad:
        raise ImportRefused(f"{operation.name}: the API address {server}: {bad}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        where = f"{operation.name}: " if operation.name else ""
        raise ImportRefused(
            f"{where}no absolute http(s) API address ({server or 'no servers'}): give one with --base-url"
        )
    if parts.username or parts.password:
        raise ImportRefused(f"{operation.name}: the API address may not carry credentials; use securitySchemes")
    if is_own_host(server, own_hosts()):
        raise ImportRefused(f"{operation.name}: {parts.hostname} is this app's own host: an action may not call it")
    return server.rstrip("/")


def spec_of(operation: openapi.Operation) -> dict[str, Any]:
    return dataclasses.asdict(operation)


def operation_of(spec: dict[str, Any]) -> openapi.Operation:
    """The stored spec back as the Operation it was made from."""
    values = dict(spec)
    values["params"] = tuple(openapi.Param(**param) for param in spec.get("params", ()))
    values["security"] = tuple(tuple(names) for names in spec.get("security", ()))
    values["fields"] = tuple(spec.get("fields", ()))
    return openapi.Operation(**values)


def import_document(document: openapi.Document, *, enabled: bool = True, base_url: str = "") -> Report:
    """Imports (or syncs) a parsed document. Raises ImportRefused, changing nothing."""
    operations = [dataclasses.replace(op, base_url=_base_url(op, base_url)) for op in document.operations]
    added: list[str] = []
    updated: list[str] = []
    unchanged: list[str] = []
    with transaction.atomic():
        existing = {action.name: action for action in Action.objects.select_for_update()}
        for operation in operations:
            action = existing.pop(operation.name, None)
            fingerprint = operation.fingerprint()
            if action is None:
                Action.objects.create(
                    name=operation.name,
                    enabled=enabled,
                    **_columns(operation),
                    title=_title(operation),
                    description=operation.description,
                    spec=spec_of(operation),
                    fingerprint=fingerprint,
                )
                added.append(operation.name)
                continue
            if action.fingerprint == fingerprint and action.in_document:
                unchanged.append(operation.name)
                continue
            for column, value in _columns(operation).items():
                setattr(action, column, value)
            if not action.texts_edited:
                action.title, action.description = _title(operation), operation.description
            if not action.in_document:
                # Back in the document: as an import of a new one would have it.
                action.in_document, action.enabled = True, enabled
            action.spec, action.fingerprint = spec_of(operation), fingerprint
            action.save()
            updated.append(operation.name)
        disabled = sorted(name for name, action in existing.items() if action.in_document)
        Action.objects.filter(name__in=disabled).update(enabled=False, in_document=False, updated_at=timezone.now())
        schemes = []
        for scheme in document.schemes:
            ActionScheme.objects.update_or_create(
                name=scheme.name, defaults={"kind": scheme.kind, "param": scheme.param}
            )
            schemes.append(scheme.name)
    logger.info("actions imported: %d added, %d updated, %d disabled", len(added), len(updated), len(disabled))
    return Report(added, updated, unchanged, disabled, document.skipped, schemes)


def _columns(operation: openapi.Operation) -> dict[str, Any]:
    return {"method": operation.method, "path": operation.path, "base_url": operation.base_url}


def _title(operation: openapi.Operation) -> str:
    return (operation.summary or operation.name)[:200]


def set_secret(name: str, secret: str) -> None:
    """Seals a scheme's credential. Raises ActionScheme.DoesNotExist."""
    scheme = ActionScheme.objects.get(name=name)
    scheme.secret_sealed = seal(SECRET_PURPOSE, secret)
    scheme.secret_set_at = timezone.now() if secret else None
    scheme.save(update_fields=["secret_sealed", "secret_set_at"])


def credentials(names: set[str]) -> dict[str, tuple[openapi.Scheme, str]]:
    """The schemes named, with their secrets, for the ones set and readable."""
    found = {}
    for scheme in ActionScheme.objects.filter(name__in=names).exclude(secret_sealed=""):
        try:
            secret = unseal(SECRET_PURPOSE, scheme.secret_sealed)
        except Unreadable:
            logger.error("action credential %s cannot be read (SECRET_KEY changed?): set it again", scheme.name)
            continue
        found[scheme.name] = (openapi.Scheme(scheme.name, scheme.kind, scheme.param), secret)
    return found


def offered(person: Person | None) -> list[Offer]:
    """The enabled actions a turn offers: those needing the visitor's
    verified identity only to a verified visitor (never shown to others,
    so the model cannot try them)."""
    offers = []
    for action in Action.objects.filter(enabled=True).only("id", "name", "title", "description", "spec"):
        try:
            operation = operation_of(action.spec)
        except (TypeError, ValueError):
            logger.error("action %s has an unreadable spec: import the document again", action.name)
            continue
        if operation.needs_identity and person is None:
            continue
        offers.append(Offer(action.id, action.name, action.title, action.description, operation))
    return offers


def save_calls(turn_id: int, calls: Sequence[CallRecord]) -> None:
    """Keeps a turn's calls of actions (with its end, in its transaction)."""
    ActionCall.objects.bulk_create(
        ActionCall(
            turn_id=turn_id,
            action_id=call.action_id,
            call_id=call.call_id,
            arguments=call.arguments,
            http_status=call.http_status,
            outcome=call.outcome or ActionCall.Outcome.CANCELLED,
            detail=call.detail[:300],
            duration_ms=call.duration_ms,
            response_bytes=call.response_bytes,
            started_at=call.started_at,
        )
        for call in calls
    )


def schemes_without_secret(names: Sequence[str]) -> list[str]:
    return sorted(ActionScheme.objects.filter(name__in=names, secret_sealed="").values_list("name", flat=True))
