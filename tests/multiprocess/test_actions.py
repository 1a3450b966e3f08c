"""An action's question across the two processes: the turn runs on one, a
tab on the other is asked (after its resume) and answers, and only then
does the customer's API see the request, made by the owner with the
verified visitor's id. Actions imported with the real command."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import jwt
import pytest

from tests.multiprocess.stack import POSTGRES, ROOT, other, start_turn
from tests.provider import answer, tool_round
from tests.shop_api import ShopAPI

pytestmark = pytest.mark.slow

SIGNING_KEY = "the customer's signing key, shared with Kookee only"
SHOP = Path(__file__).resolve().parent.parent / "chat" / "actions" / "shop.yaml"


def manage(database: str, *args: str, stdin: str = "") -> str:
    environment = {**os.environ, "DATABASE_URL": f"{POSTGRES}/{database}", "DJANGO_SECRET_KEY": "x" * 50}
    done = subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args],
        env=environment,
        cwd=ROOT,
        input=stdin,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


async def test_a_tab_on_the_other_process_answers_the_question(stack_for):
    shop = ShopAPI()
    await shop.start()
    secret_key = "x" * 50
    try:
        async with stack_for(
            KOOKEE_IDENTITY_SECRET=SIGNING_KEY, KOOKEE_ACTIONS_ALLOW_PRIVATE="true", DJANGO_SECRET_KEY=secret_key
        ) as stack:
            database = await stack.scalar("select current_database()")
            out = manage(database, "import_actions", str(SHOP), "--base-url", shop.url)
            assert "4 added" in out
            manage(database, "set_action_secret", "shopKey", stdin="shop-secret\n")

            cookie = await stack.page_load()
            tab1 = await stack.open_tab(cookie, "tab1")
            signed = jwt.encode({"sub": "user-42", "exp": int(time.time()) + 600}, SIGNING_KEY, "HS256")
            await tab1.send({"type": "identify", "token": signed})
            await tab1.wait_for(lambda frames: [f for f in frames if f["type"] == "identified"], "identified")

            script = tool_round([("c1", "cancelOrder", {"order_id": "A-1001", "reason": "twice"})])
            turn_id, owner, _ = await start_turn(stack, tab1, script, "cancel A-1001", wait_deltas=0)
            stack.providers[owner].queue(answer("Cancelled."))
            asked = await tab1.wait_for(
                lambda frames: [f for f in frames if f["type"] == "action.confirm"], "action.confirm"
            )
            call_id = asked[0]["call_id"]

            tab2 = await stack.open_tab(cookie, "tab2", process=other(owner))
            again = await tab2.wait_for(
                lambda frames: [f for f in frames if f["type"] == "action.confirm"], "action.confirm on tab2"
            )
            assert again[0]["call_id"] == call_id
            assert shop.requests == []
            await tab2.send({"type": "action.answer", "call_id": call_id, "approve": True})

            ended = await tab1.wait_ended(turn_id)
            assert ended["status"] == "completed" and ended["generations"] == 2
            (seen,) = shop.requests
            assert (seen.method, seen.path) == ("POST", "/orders/A-1001/cancel")
            assert seen.body == {"reason": "twice", "customer_id": "user-42"}
            assert seen.headers["authorization"] == "Bearer shop-secret"
            outcome = await stack.scalar("select outcome from chat_actioncall where call_id = %s", [call_id])
            assert outcome == "ok"
    finally:
        await shop.stop()
