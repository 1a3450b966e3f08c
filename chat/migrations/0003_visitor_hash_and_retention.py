"""Conversations keep a keyed hash of their visitor's key, never the key;
turns keep the budgets' network and can be marked erased; revoked keys."""

import ipaddress

from django.db import migrations, models
from django.utils.crypto import salted_hmac


def _hash(key):
    # As chat.visitors.hash_key, frozen here.
    return salted_hmac("kookee.visitor", key, algorithm="sha256").hexdigest()


def _network(address):
    parsed = ipaddress.ip_address(address)
    if parsed.version == 6 and parsed.ipv4_mapped:
        parsed = parsed.ipv4_mapped
    if parsed.version == 4:
        return f"{parsed}/32"
    return str(ipaddress.ip_network(f"{parsed}/64", strict=False))


def forward(apps, schema_editor):
    Conversation = apps.get_model("chat", "Conversation")
    Turn = apps.get_model("chat", "Turn")
    # Rows that GET / made for visitors who never wrote: nothing to keep.
    Conversation.objects.filter(turns__isnull=True).delete()
    for conversation in Conversation.objects.only("id", "session_key").iterator():
        Conversation.objects.filter(pk=conversation.pk).update(visitor_hash=_hash(conversation.session_key))
    for turn in Turn.objects.exclude(client_address=None).only("id", "client_address").iterator():
        Turn.objects.filter(pk=turn.pk).update(client_network=_network(turn.client_address))


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0002_conversation_updated_at_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="conversation",
            name="visitor_hash",
            field=models.CharField(blank=True, db_index=True, editable=False, max_length=64),
        ),
        migrations.AddField(
            model_name="turn",
            name="client_network",
            field=models.CharField(blank=True, max_length=43),
        ),
        migrations.AddField(
            model_name="turn",
            name="erased_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.RunPython(forward, migrations.RunPython.noop, elidable=False),
        migrations.RemoveField(model_name="conversation", name="session_key"),
        migrations.AddIndex(
            model_name="turn",
            index=models.Index(fields=["client_network", "started_at"], name="chat_turn_client__8a7dd1_idx"),
        ),
        migrations.AlterModelOptions(
            name="turn",
            options={
                "ordering": ["started_at", "id"],
                "permissions": [("erase_turn", "Can erase a conversation's text at the visitor's request")],
            },
        ),
        migrations.CreateModel(
            name="RevokedKey",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("visitor_hash", models.CharField(max_length=64, unique=True)),
                ("revoked_at", models.DateTimeField(auto_now_add=True, db_index=True)),
            ],
        ),
    ]
