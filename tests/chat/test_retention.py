"""Retention: what is kept no longer than it must be."""

import io
from datetime import timedelta

import pytest
from django.contrib.sessions.backends.db import SessionStore
from django.contrib.sessions.models import Session
from django.core.management import call_command
from django.utils import timezone

from chat.models import Conversation, RevokedKey, Turn

pytestmark = pytest.mark.django_db


def turn_started(days_ago: float, address: str) -> Turn:
    conversation = Conversation.objects.create(visitor_hash="h")
    turn = Turn.objects.create(
        conversation=conversation,
        user_text="q",
        model="m",
        status="completed",
        client_address=address,
        client_network=f"{address}/32",
    )
    Turn.objects.filter(pk=turn.pk).update(started_at=timezone.now() - timedelta(days=days_ago))
    return turn


def purge() -> str:
    out = io.StringIO()
    call_command("purge_expired", stdout=out)
    return out.getvalue()


def test_addresses_are_dropped_after_the_retention_period(settings):
    settings.KOOKEE_ADDRESS_RETENTION_DAYS = 30
    old = turn_started(31, "203.0.113.7")
    recent = turn_started(29, "198.51.100.9")

    output = purge()

    old.refresh_from_db()
    recent.refresh_from_db()
    assert (old.client_address, old.client_network) == (None, "")
    assert (recent.client_address, recent.client_network) == ("198.51.100.9", "198.51.100.9/32")
    # Only the address goes: the turn and its text stay.
    assert old.user_text == "q"
    assert "1 turn(s)" in output


def test_expired_sessions_are_cleared():
    live, expired = SessionStore(), SessionStore()
    live.create()
    expired.create()
    Session.objects.filter(pk=expired.session_key).update(expire_date=timezone.now() - timedelta(seconds=1))

    purge()

    assert list(Session.objects.values_list("session_key", flat=True)) == [live.session_key]


def test_revoked_keys_are_kept_while_their_key_could_still_be_used(settings):
    settings.KOOKEE_WIDGET_IDLE_DAYS = 30
    settings.SESSION_COOKIE_AGE = 14 * 86400
    recent = RevokedKey.objects.create(visitor_hash="recent")
    old = RevokedKey.objects.create(visitor_hash="old")
    RevokedKey.objects.filter(pk=old.pk).update(revoked_at=timezone.now() - timedelta(days=31))

    purge()

    assert list(RevokedKey.objects.values_list("visitor_hash", flat=True)) == [recent.visitor_hash]
