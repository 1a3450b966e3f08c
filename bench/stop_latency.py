"""Stop latency, unloaded, over at least 200 stops.

One daphne process of the app (fresh SQLite, served as the other benches
serve it: bench/harness.py) is pointed at a scripted provider on loopback
(tests/provider.py) that streams a token every 20 ms and never finishes. One
visitor asks, waits for a few deltas, sends Stop, and measures:

- stop -> provider: the Stop frame sent -> the provider saw the request
  closed (target: p99 under 20 ms unloaded);
- stop -> turn.ended: the Stop frame sent -> `turn.ended` received.

The scripted provider runs in this process's event loop and stamps hang-ups
with `loop.time()`, the clock the visitor's timings use, so the two are
directly comparable. A few warm-up stops come first and are not counted.

Stop latency under load is measured by bench/concurrency.py (`stop_ms` in its
rows, from the bench provider's /stats); `section()` adds a table of it when
bench/results/concurrency.json exists (target: p99 under 100 ms at 200
visitors).

    .venv/bin/python bench/stop_latency.py [stops] [--warmup N]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from harness import RESULTS, migrate, percentile, save, server_env, servers, session_of

from tests.provider import Pause, ScriptedProvider, text

STOPS = 200
WARMUP = 5
DELTAS_BEFORE_STOP = 3
TOKEN_INTERVAL = 0.02
TARGET_MS = 20  # p99, unloaded
TARGET_LOADED_MS = 100  # p99 at 200 visitors (bench/concurrency.py)
LOADED_VISITORS = 200
FORWARDED_FOR = "10.254.0.1"
# One visitor sends a message and a Stop every ~100 ms: lift its frame budget,
# which would otherwise (rightly) refuse it as a flood.
UNLIMITED_FRAMES = {"KOOKEE_FRAME_BURST": "100000", "KOOKEE_FRAMES_PER_SECOND": "10000"}


def endless_answer() -> list:
    # 10 s of tokens: never reached, a Stop comes after a few of them. Built
    # per turn, as 200 queued scripts of dicts would cost hundreds of MB.
    steps: list = []
    for n in range(500):
        steps += [text(f" word{n}"), Pause(TOKEN_INTERVAL)]
    return steps


def session_cookie(address: str) -> str:
    """GET / as the trusted proxy would forward it: the visitor's session cookie."""
    headers = {"X-Forwarded-Proto": "https", "X-Forwarded-For": FORWARDED_FOR}
    request = urllib.request.Request(f"http://{address}/", headers=headers)
    with urllib.request.urlopen(request) as response:
        return session_of(response.headers.get_all("Set-Cookie"))


async def stops(address: str, scripted: ScriptedProvider, count: int) -> dict[str, Any]:
    import websockets

    loop = asyncio.get_running_loop()
    cookie = await asyncio.to_thread(session_cookie, address)
    headers = {"Cookie": cookie, "X-Forwarded-For": FORWARDED_FOR}
    to_provider, to_ended, statuses = [], [], {}
    async with websockets.connect(
        f"ws://{address}/ws/chat/", origin="https://127.0.0.1", additional_headers=headers, compression=None
    ) as socket:

        async def until(kind: str) -> dict[str, Any]:
            async with asyncio.timeout(20):
                while (frame := json.loads(await socket.recv()))["type"] != kind:
                    pass
            return frame

        for _ in range(count):
            scripted.queue(endless_answer())
            requests_before = len(scripted.requests)
            await socket.send(json.dumps({"type": "message", "text": "Tell me everything about webhooks."}))
            turn_id = (await until("turn.started"))["turn_id"]
            for _ in range(DELTAS_BEFORE_STOP):
                await until("delta")
            request = scripted.requests[requests_before]
            sent = loop.time()
            await socket.send(json.dumps({"type": "stop"}))
            ended = await until("turn.ended")
            ended_at = loop.time()
            assert ended["turn_id"] == turn_id
            statuses[ended["status"]] = statuses.get(ended["status"], 0) + 1
            async with asyncio.timeout(5):
                await request.hung_up.wait()
            to_provider.append(round((request.hung_up_at - sent) * 1000, 3))
            to_ended.append(round((ended_at - sent) * 1000, 3))
    return {"to_provider_ms": to_provider, "to_ended_ms": to_ended, "statuses": statuses}


async def measure(count: int, warmup: int) -> dict[str, Any]:
    scripted = ScriptedProvider()
    url = await scripted.start()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            env = server_env(f"sqlite:///{Path(tmp) / 'db.sqlite3'}", url.removesuffix("/v1"), **UNLIMITED_FRAMES)
            # The provider only answers once the visitor asks, so blocking the loop here is harmless.
            migrate(env)
            with servers(env, 1) as (addresses, _):
                await stops(addresses[0], scripted, warmup)
                start = time.perf_counter()
                result = await stops(addresses[0], scripted, count)
                result["seconds"] = round(time.perf_counter() - start, 1)
    finally:
        await scripted.stop()
    return result


def summary(values: list[float]) -> dict[str, float | int | None]:
    return {
        "n": len(values),
        "p50": percentile(values, 0.5),
        "p95": percentile(values, 0.95),
        "p99": percentile(values, 0.99),
        "max": max(values, default=None),
    }


def run(count: int, warmup: int) -> dict[str, Any]:
    result = asyncio.run(measure(count, warmup))
    p99 = percentile(result["to_provider_ms"], 0.99)
    return {
        "setup": {
            "server": "daphne x1, SQLite",
            "token_interval_ms": TOKEN_INTERVAL * 1000,
            "deltas_before_stop": DELTAS_BEFORE_STOP,
            "warmup_stops": warmup,
        },
        "seconds": result["seconds"],
        "statuses": result["statuses"],
        "target_p99_ms": TARGET_MS,
        "target_met": p99 is not None and p99 < TARGET_MS,
        "to_provider": summary(result["to_provider_ms"]),
        "to_ended": summary(result["to_ended_ms"]),
        "to_provider_ms": result["to_provider_ms"],
        "to_ended_ms": result["to_ended_ms"],
    }


def _line(label: str, s: dict[str, Any]) -> str:
    percentiles = ", ".join(f"{key} {s[key]:.2f} ms" for key in ("p50", "p95", "p99", "max"))
    return f"{label}: n={s['n']} {percentiles}"


def loaded_rows(path: Path) -> list[dict[str, Any]]:
    """Stop latency under load from bench/concurrency.py's saved rows, per visitors level."""
    if not path.exists():
        return []
    by_level: dict[int, list[float]] = {}
    for row in json.loads(path.read_text()):
        if row.get("path") == "/ws/chat/" and row.get("stop_ms"):
            by_level.setdefault(row["visitors"], []).extend(row["stop_ms"])
    return [{"visitors": visitors, **summary(by_level[visitors])} for visitors in sorted(by_level)]


def section(results: dict[str, Any], charts: Path) -> str:
    """The docs/benchmarks.md section for saved results (and concurrency.json, if any); renders only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    setup = results["setup"]
    provider, ended = results["to_provider"], results["to_ended"]
    met = "met" if results["target_met"] else "**not met**"
    lines = [
        "## 3. Stop latency",
        "",
        f"One visitor on one daphne process of the app (SQLite) sends Stop after {setup['deltas_before_stop']}"
        f" deltas of an endless answer (a scripted provider on loopback, a token every"
        f" {setup['token_interval_ms']:g} ms), {provider['n']} times after {setup['warmup_stops']} uncounted"
        " warm-up stops; the provider stamps its hang-up with the visitor's own clock.",
        "",
        "| from the Stop frame sent to | n | p50 (ms) | p95 (ms) | p99 (ms) | max (ms) |",
        "| --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for label, s in (("the provider seeing its request closed", provider), ("`turn.ended` at the visitor", ended)):
        lines.append(f"| {label} | {s['n']} | {s['p50']:.1f} | {s['p95']:.1f} | {s['p99']:.1f} | {s['max']:.1f} |")
    lines += [
        "",
        f"Target: the provider's request closed within {results['target_p99_ms']} ms at p99, unloaded: {met}"
        f" (p99 {provider['p99']:.1f} ms).",
        "",
        "![Stop latency, unloaded](benchmarks/stop_latency.png)",
        "",
    ]
    loaded = loaded_rows(RESULTS / "concurrency.json")
    if loaded:
        lines += [
            "Under load (bench/concurrency.py: visitors asking back to back, some of their turns stopped"
            " mid-answer; the Stop frame sent to the bench provider seeing the request closed):",
            "",
            "| visitors | stops | p50 (ms) | p99 (ms) | max (ms) |",
            "| ---: | ---: | ---: | ---: | ---: |",
        ]
        lines += [f"| {r['visitors']} | {r['n']} | {r['p50']:.1f} | {r['p99']:.1f} | {r['max']:.1f} |" for r in loaded]
        at_target = next((r for r in loaded if r["visitors"] == LOADED_VISITORS), None)
        if at_target:
            verdict = "met" if at_target["p99"] < TARGET_LOADED_MS else "**not met**"
            lines += [
                "",
                f"Target: p99 under {TARGET_LOADED_MS} ms at {LOADED_VISITORS} visitors: {verdict}"
                f" (p99 {at_target['p99']:.1f} ms over {at_target['n']} stops).",
            ]
        else:
            lines += [
                "",
                f"Target: p99 under {TARGET_LOADED_MS} ms at {LOADED_VISITORS} visitors: no run at that level.",
            ]
        lines.append("")

    figure, axis = plt.subplots(figsize=(7, 3.2), dpi=100)
    for label, values in (
        ("Stop -> provider request closed", results["to_provider_ms"]),
        ("Stop -> turn.ended at the visitor", results["to_ended_ms"]),
    ):
        ordered = sorted(values)
        axis.plot(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], label=label)
    axis.axvline(
        results["target_p99_ms"], color="grey", linestyle="--", linewidth=1, label=f"target: p99 < {TARGET_MS} ms"
    )
    axis.axhline(0.99, color="grey", linestyle=":", linewidth=1)
    axis.set_xlabel("ms after the Stop frame was sent")
    axis.set_ylabel("fraction of stops")
    axis.set_xlim(left=0)
    axis.set_ylim(0, 1.01)
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8, frameon=False, loc="lower right")
    figure.tight_layout()
    charts.mkdir(parents=True, exist_ok=True)
    figure.savefig(charts / "stop_latency.png")
    plt.close(figure)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stops", type=int, nargs="?", default=STOPS)
    parser.add_argument("--warmup", type=int, default=WARMUP, help="uncounted stops first")
    args = parser.parse_args()
    results = run(args.stops, args.warmup)
    print(f"{results['to_provider']['n']} stops in {results['seconds']} s")
    print(_line("stop -> provider request closed", results["to_provider"]))
    print(_line("stop -> turn.ended at the visitor", results["to_ended"]))
    print(
        f"statuses {results['statuses']}; target p99 < {TARGET_MS} ms: {'met' if results['target_met'] else 'NOT met'}"
    )
    print(f"saved {save('stop_latency', results)}")


if __name__ == "__main__":
    main()
