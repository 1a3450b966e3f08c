"""The customer's own API for the actions' end-to-end tests: the shop of
tests/shop_api.py on a loopback port (in a thread: these tests are
synchronous), its OpenAPI document imported as actions into a served app's
database, and the customer's backend signing who its visitor is."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import jwt

from tests.servers import ROOT
from tests.shop_api import ShopAPI

DOCUMENT = ROOT / "tests" / "chat" / "actions" / "shop.yaml"
# The key the customer's backend and Kookee share (KOOKEE_IDENTITY_SECRET).
IDENTITY_SECRET = "e2e-actions-identity-secret-of-32-bytes+"
# The shop's bearer token, which only Kookee's server holds.
API_SECRET = "shop-api-secret-e2e-5d1c"
# What the app needs to call the shop: a key to verify visitors, and the
# shop on loopback allowed.
ENV = {"KOOKEE_IDENTITY_SECRET": IDENTITY_SECRET, "KOOKEE_ACTIONS_ALLOW_PRIVATE": "true"}


def token_for(sub: str, name: str = "") -> str:
    """What the customer's backend would sign for its signed-in user."""
    return jwt.encode({"sub": sub, "name": name, "exp": int(time.time()) + 600}, IDENTITY_SECRET, algorithm="HS256")


@contextmanager
def running_shop(slow_seconds: float = 30) -> Iterator[ShopAPI]:
    """The shop, served from an event loop of its own in a thread (as the
    e2e tests' scripted provider is), closed afterwards."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    shop = ShopAPI(slow_seconds=slow_seconds)
    try:
        asyncio.run_coroutine_threadsafe(shop.start(), loop).result(10)
        yield shop
    finally:
        asyncio.run_coroutine_threadsafe(shop.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()


def import_shop(database: Path, shop_url: str) -> None:
    """The shop's document imported as actions, and its secret set, in the
    served app's database, as the e2e tests seed one (`manage.py shell`)."""
    code = (
        "import os; from chat.actions import catalog, openapi; "
        "catalog.import_document(openapi.load(os.environ['SHOP_DOCUMENT']), base_url=os.environ['SHOP_URL']); "
        "catalog.set_secret('shopKey', os.environ['SHOP_SECRET'])"
    )
    environment = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{database}",
        "SHOP_DOCUMENT": str(DOCUMENT),
        "SHOP_URL": shop_url,
        "SHOP_SECRET": API_SECRET,  # in the environment, not on a command line
    }
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", code], cwd=ROOT, env=environment, check=True, capture_output=True
    )


def wait_for(predicate: Callable[[], object], timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def tool_result(request) -> dict:
    """What the model read of the (first) tool call, in a provider request."""
    return json.loads(next(m for m in request.body["messages"] if m["role"] == "tool")["content"])
