"""docs/deploy.md's nginx block in front of the two processes: static
files, the health check, /metrics hidden, plain HTTP redirected."""

from __future__ import annotations

import asyncio
import json

import pytest

pytestmark = pytest.mark.slow


async def test_nginx_serves_static_files_and_health_and_hides_metrics(stack_for):
    async with stack_for() as stack:
        status, headers, body = await asyncio.to_thread(stack.request, "/static/chat/chat.js")
        assert status == 200 and body == (stack.static / "chat" / "chat.js").read_bytes()
        assert "max-age=60" in headers["Cache-Control"] and headers["Access-Control-Allow-Origin"] == "*"

        status, headers, body = await asyncio.to_thread(stack.request, "/healthz")
        assert status == 200, body
        assert headers["Content-Type"].startswith("application/json"), headers
        json.loads(body)

        for path in ("/metrics", "/metrics/", "/metrics?x=1"):
            status, _, _ = await asyncio.to_thread(stack.request, path)
            assert status == 403, path

        status, headers, _ = await asyncio.to_thread(stack.request, "/?x=1", tls=False)
        assert status == 301 and headers["Location"] == "https://127.0.0.1/?x=1"
