"""The site's and the networks' daily budgets move from sums of the ledger
to counters (chat.DayBudget). Today's counters start from what the ledger
billed today, so that the day of the upgrade does not start from nothing."""

import ipaddress
from collections import Counter
from datetime import datetime, time

from django.conf import settings
from django.db import migrations, models
from django.utils import timezone


def _networks(address):
    # As chat.visitors.identity.networks_of, when this migration was written.
    if not address:
        return []
    parsed = ipaddress.ip_address(address)
    parsed = getattr(parsed, "ipv4_mapped", None) or parsed
    if parsed.version == 4:
        return [f"{parsed}/32"]
    return [str(ipaddress.ip_network(f"{parsed}/{prefix}", strict=False)) for prefix in settings.KOOKEE_IPV6_BUDGETS]


def count_today(apps, schema_editor):
    LedgerEntry = apps.get_model("billing", "LedgerEntry")
    DayBudget = apps.get_model("chat", "DayBudget")
    zone = timezone.get_default_timezone()
    today = timezone.localdate(timezone=zone)
    entries = LedgerEntry.objects.filter(created_at__gte=datetime.combine(today, time.min, tzinfo=zone))
    counted = Counter()
    for spent, address in entries.values_list(
        models.F("input_tokens") + models.F("output_tokens"), "turn__client_address"
    ).iterator():
        counted["site"] += spent
        for network in _networks(address):
            counted[f"network:{network}"] += spent
    DayBudget.objects.bulk_create(DayBudget(day=today, key=key, tokens=tokens) for key, tokens in counted.items())


class Migration(migrations.Migration):
    dependencies = [
        ("chat", "0010_drop_empty_conversations"),
        ("billing", "0006_translatable_labels"),
    ]

    operations = [
        migrations.AddField(
            model_name="turn",
            name="budget",
            field=models.JSONField(blank=True, default=dict, editable=False),
        ),
        migrations.CreateModel(
            name="DayBudget",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("day", models.DateField()),
                ("key", models.CharField(max_length=64)),
                ("tokens", models.BigIntegerField(default=0)),
            ],
            options={
                "constraints": [models.UniqueConstraint(fields=("day", "key"), name="chat_daybudget_unique_day_key")],
            },
        ),
        migrations.RunPython(count_today, migrations.RunPython.noop),
    ]
