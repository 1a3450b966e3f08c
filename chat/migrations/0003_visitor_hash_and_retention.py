"""Conversations keep a keyed hash of their visitor's key, never the key;
turns keep the budgets' network and can be marked erased; revoked keys.
In three steps (this one adds, 0004 moves the data, 0005 removes): on
PostgreSQL, a table whose rows changed in a transaction cannot be altered in
the same one."""

from django.db import migrations, models


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
