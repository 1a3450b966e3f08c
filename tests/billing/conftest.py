import importlib
from decimal import Decimal

import pytest

from billing.models import Price


@pytest.fixture(autouse=True)
def prices():
    """The prices the data migration seeds (a transactional test elsewhere
    may have flushed them)."""
    seeded = importlib.import_module("billing.migrations.0003_initial_prices")
    for model, (input_price, output_price) in seeded.PRICES.items():
        Price.objects.get_or_create(
            model=model,
            effective_from=seeded.START,
            defaults={"input_per_million": Decimal(input_price), "output_per_million": Decimal(output_price)},
        )
