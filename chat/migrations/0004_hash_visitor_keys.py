"""Hash the stored visitor keys, fill in the turns' networks, and drop the
conversations that GET / made for visitors who never wrote."""

import ipaddress

from django.db import migrations
from django.utils.crypto import salted_hmac


def _hash(key):
    # As chat.visitors.identity.hash_key, frozen here.
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
        ("chat", "0003_visitor_hash_and_retention"),
    ]

    operations = [
        migrations.RunPython(forward, migrations.RunPython.noop, elidable=False),
    ]
