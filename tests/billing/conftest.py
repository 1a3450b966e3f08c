import importlib
from decimal import Decimal

import pytest
from django.contrib.auth.models import Group
from django.test import Client

from billing.models import Price
from chat.roles import ensure_roles
from tests.billing.admin_helpers import PASSWORD


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


# --- people: finance's and Support's logged-in clients -----------------------------------------


@pytest.fixture
def roles():
    ensure_roles()


def staff_client(django_user_model, username: str, group: str) -> Client:
    user = django_user_model.objects.create_user(username=username, password=PASSWORD, is_staff=True)
    user.groups.add(Group.objects.get(name=group))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def finance(roles, django_user_model) -> Client:
    return staff_client(django_user_model, "fiona", "Finance")


@pytest.fixture
def support(roles, django_user_model) -> Client:
    return staff_client(django_user_model, "sam", "Support")
