"""The raw keys go: only their keyed hashes remain (0004)."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0004_hash_visitor_keys"),
    ]

    operations = [
        migrations.RemoveField(model_name="conversation", name="session_key"),
    ]
