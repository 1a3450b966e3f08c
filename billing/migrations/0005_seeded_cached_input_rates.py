"""OpenAI's cached-input rates for the models Kookee started with (USD per
million tokens). A seeded price that no entry used yet gets its rate; one
already used is superseded from now on by the same price with the rate, as
finance would do it. A price finance has changed is left alone. And gpt-4o's
first snapshot gets its own, higher price."""

from decimal import Decimal

from django.db import migrations
from django.utils import timezone

CACHED = {
    "gpt-4o-mini": "0.075",
    "gpt-4o": "1.25",
    "gpt-4.1-nano": "0.025",
    "gpt-4.1-mini": "0.10",
    "gpt-4.1": "0.50",
}


def add_cached_rates(apps, schema_editor):
    Price = apps.get_model("billing", "Price")
    LedgerEntry = apps.get_model("billing", "LedgerEntry")
    seeded = __import__("billing.migrations.0003_initial_prices", fromlist=["PRICES"])
    for model, cached in CACHED.items():
        latest = Price.objects.filter(model=model).order_by("-effective_from").first()
        input_price, output_price = (Decimal(p) for p in seeded.PRICES[model])
        if latest is None or latest.cached_input_per_million is not None:
            continue
        if (latest.input_per_million, latest.output_per_million) != (input_price, output_price):
            continue  # finance's own price
        if not LedgerEntry.objects.filter(price=latest).exists():
            latest.cached_input_per_million = Decimal(cached)
            latest.save(update_fields=["cached_input_per_million"])
        else:
            Price.objects.create(
                model=model,
                input_per_million=input_price,
                cached_input_per_million=Decimal(cached),
                output_per_million=output_price,
                effective_from=timezone.now(),
            )


def add_gpt_4o_first_snapshot(apps, schema_editor):
    # Its first snapshot kept gpt-4o's launch price; without its own row it
    # would be priced as gpt-4o.
    Price = apps.get_model("billing", "Price")
    seeded = __import__("billing.migrations.0003_initial_prices", fromlist=["START"])
    if not Price.objects.filter(model__iexact="gpt-4o-2024-05-13").exists():
        Price.objects.create(
            model="gpt-4o-2024-05-13",
            input_per_million=Decimal("5.00"),
            output_per_million=Decimal("15.00"),
            effective_from=seeded.START,
        )


class Migration(migrations.Migration):
    dependencies = [("billing", "0004_usage_details_price_record_calibration")]
    operations = [
        migrations.RunPython(add_cached_rates, migrations.RunPython.noop),
        migrations.RunPython(add_gpt_4o_first_snapshot, migrations.RunPython.noop),
    ]
