"""The migration that stops storing visitor keys, run on rows that stored them."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from chat.visitors.identity import hash_key

BEFORE = [("chat", "0002_conversation_updated_at_index")]
AFTER = [("chat", "0005_remove_conversation_session_key")]


@pytest.mark.django_db(transaction=True)
def test_existing_keys_become_keyed_hashes_and_empty_conversations_go():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    old = executor.loader.project_state(BEFORE).apps
    Conversation, Turn = old.get_model("chat", "Conversation"), old.get_model("chat", "Turn")
    key = "abcdefghijklmnopqrstuvwxyz012345"
    talked = Conversation.objects.create(session_key=key)
    widget = Conversation.objects.create(session_key="w-" + "f" * 32)
    Conversation.objects.create(session_key="only-looked")  # GET / made it; nothing was said
    for conversation, address in ((talked, "203.0.113.7"), (widget, "2001:db8:1:2::9")):
        Turn.objects.create(conversation=conversation, user_text="hi", model="m", client_address=address)

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(AFTER)
    new = executor.loader.project_state(AFTER).apps
    Conversation, Turn = new.get_model("chat", "Conversation"), new.get_model("chat", "Turn")

    assert dict(Conversation.objects.values_list("pk", "visitor_hash")) == {
        talked.pk: hash_key(key),
        widget.pk: hash_key("w-" + "f" * 32),
    }
    assert sorted(Turn.objects.values_list("client_network", flat=True)) == ["2001:db8:1:2::/64", "203.0.113.7/32"]
    with connection.cursor() as cursor:
        columns = [c.name for c in connection.introspection.get_table_description(cursor, "chat_conversation")]
    assert "session_key" not in columns
    # Back to the present, for the tests that follow.
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_conversations_nobody_wrote_to_go_but_the_last_days():
    from datetime import timedelta

    from django.utils import timezone

    before, after = [("chat", "0009_support_loop")], [("chat", "0010_drop_empty_conversations")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    Conversation, Turn = old.get_model("chat", "Conversation"), old.get_model("chat", "Turn")
    Handoff = old.get_model("chat", "Handoff")
    long_ago = timezone.now() - timedelta(days=3)
    talked, asked, empty, recent = (Conversation.objects.create(visitor_hash=f"v{n}") for n in range(4))
    Conversation.objects.filter(pk__in=[talked.pk, asked.pk, empty.pk]).update(created_at=long_ago)
    Turn.objects.create(conversation=talked, user_text="hi", model="m")
    Handoff.objects.create(conversation=asked, source="visitor")

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(after)

    Conversation = executor.loader.project_state(after).apps.get_model("chat", "Conversation")
    assert set(Conversation.objects.values_list("pk", flat=True)) == {talked.pk, asked.pk, recent.pk}
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


@pytest.mark.django_db(transaction=True)
def test_helpdesk_ids_become_unique_and_erased_conversations_close_their_requests():
    from django.utils import timezone

    before, after = [("chat", "0014_feedback_review")], [("chat", "0015_replies_bound_and_erasure_closes")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    old = executor.loader.project_state(before).apps
    Conversation, Turn = old.get_model("chat", "Conversation"), old.get_model("chat", "Turn")
    Handoff, Message = old.get_model("chat", "Handoff"), old.get_model("chat", "Message")
    kept, erased = Conversation.objects.create(visitor_hash="v"), Conversation.objects.create(visitor_hash="")
    first = Handoff.objects.create(conversation=kept, source="visitor", status="closed")
    waiting = Handoff.objects.create(conversation=kept, source="visitor")
    left_open = Handoff.objects.create(conversation=erased, source="visitor", status="claimed")
    at = timezone.now()
    Turn.objects.create(conversation=erased, user_text="", model="m", erased_at=at)
    # The same helpdesk id in two requests: a replay, before ids were unique across requests.
    one = Message.objects.create(conversation=kept, handoff=first, kind="agent", text="a", external_id="zd-1")
    two = Message.objects.create(conversation=kept, handoff=waiting, kind="agent", text="a", external_id="zd-1")

    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(after)
    new = executor.loader.project_state(after).apps
    Conversation, Handoff = new.get_model("chat", "Conversation"), new.get_model("chat", "Handoff")
    Message = new.get_model("chat", "Message")

    assert Message.objects.get(pk=one.pk).external_id == "zd-1"
    assert Message.objects.get(pk=two.pk).external_id == f"{waiting.pk}:zd-1"
    assert Conversation.objects.get(pk=erased.pk).erased_at == at
    assert Conversation.objects.get(pk=kept.pk).erased_at is None
    assert Handoff.objects.get(pk=left_open.pk).status == "closed"
    assert Handoff.objects.get(pk=waiting.pk).status == "open"
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())
