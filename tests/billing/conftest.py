import importlib
from decimal import Decimal

import pytest

from billing.models import Price


@pytest.fixture(autouse=True)
def prices():
    """The prices the data migration seeds (a transactional test elsewhere
    may have flushed them)."""
    seeded = importlib.import_module("billing.migrations.0003_initial_prices")
    cached = importlib.import_module("billing.migrations.0005_seeded_cached_input_rates").CACHED
    for model, (input_price, output_price) in seeded.PRICES.items():
        Price.objects.get_or_create(
            model=model,
            effective_from=seeded.START,
            defaults={
                "input_per_million": Decimal(input_price),
                "cached_input_per_million": Decimal(cached[model]) if model in cached else None,
                "output_per_million": Decimal(output_price),
            },
        )
