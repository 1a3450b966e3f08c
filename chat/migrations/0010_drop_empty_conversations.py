"""Conversations begun at a full conversation's limit and never written to
(before a conversation was created only with its first message or request
for a person) held nothing: they go. Those of the last day stay, in case a
process of the previous release is about to write the first message."""

from datetime import timedelta

from django.db import migrations
from django.utils import timezone


def drop_empty_conversations(apps, schema_editor):
    Conversation = apps.get_model("chat", "Conversation")
    cutoff = timezone.now() - timedelta(days=1)
    Conversation.objects.filter(created_at__lt=cutoff, turns__isnull=True, handoffs__isnull=True).delete()


class Migration(migrations.Migration):
    dependencies = [("chat", "0009_support_loop")]

    operations = [migrations.RunPython(drop_empty_conversations, migrations.RunPython.noop)]
