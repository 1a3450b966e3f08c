"""The prices Kookee started with (USD per million tokens); finance edits them in the admin."""

from datetime import UTC, datetime
from decimal import Decimal

from django.db import migrations

START = datetime(2024, 1, 1, tzinfo=UTC)
PRICES = {
    "kookee-offline": ("0", "0"),
    "gpt-4o-mini": ("0.15", "0.60"),
    "gpt-4o": ("2.50", "10.00"),
    "gpt-4.1-nano": ("0.10", "0.40"),
    "gpt-4.1-mini": ("0.40", "1.60"),
    "gpt-4.1": ("2.00", "8.00"),
}


def add_prices(apps, schema_editor):
    Price = apps.get_model("billing", "Price")
    for model, (input_price, output_price) in PRICES.items():
        Price.objects.get_or_create(
            model=model,
            effective_from=START,
            defaults={"input_per_million": Decimal(input_price), "output_per_million": Decimal(output_price)},
        )


class Migration(migrations.Migration):
    dependencies = [("billing", "0002_price")]
    operations = [migrations.RunPython(add_prices, migrations.RunPython.noop)]
