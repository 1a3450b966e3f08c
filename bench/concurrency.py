"""Concurrency: N visitors asking help questions back to back, served by the
app and, in the same server process, by the bare relay and the pass-through
(bench/relay.py).

For each level: the first delta's p50 and p99, the server's CPU and its CPU
per answer character, memory per connection, the load client's own CPU,
errors, and Stop latency (the Stop frame to the provider seeing its request
closed) for the turns the client stopped.

    .venv/bin/python bench/concurrency.py [visitors ...] [--seconds S] [--server daphne|uvicorn]
        [--processes P] [--database postgres] [--stop-fraction F] [--name NAME] [--bare]
        [--pass-through] [--words W] [--profile PREFIX]
    .venv/bin/python bench/concurrency.py --stretch    # only 1,000 visitors on two processes
"""

from __future__ import annotations

import argparse
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import (
    QUESTIONS,
    REDIS_URL,
    RESULTS,
    cpu_seconds,
    fresh_postgres,
    migrate,
    percentile,
    provider,
    provider_stats,
    record_scripts,
    reset_provider,
    rss_mb,
    run_client,
    save,
    server_env,
    servers,
)

TTFT_MS = 300
TOKENS_PER_SECOND = 40
# The level of the goals: the one profiled (report.py reads its profile).
PROFILED_VISITORS = 200


def measure(
    addresses: list[str],
    processes: list[subprocess.Popen],
    provider_url: str,
    *,
    path: str,
    visitors: int,
    seconds: float,
    stop_fraction: float = 0.0,
    profile: str = "",
    pause_seconds: float = 0.0,
) -> dict[str, Any]:
    pids = [p.pid for p in processes]
    idle_rss = sum(rss_mb(pid) for pid in pids)
    readings: dict[str, Any] = {}

    def on_window(edge: str) -> None:
        readings[edge] = (time.perf_counter(), sum(cpu_seconds(pid) for pid in pids))
        if profile and edge == "start":
            # py-spy samples the running server from outside, without changing it.
            command = [
                str(Path(sys.executable).parent / "py-spy"),
                "record",
                "-p",
                str(pids[0]),
                "-d",
                str(int(seconds)),
                "-f",
                "raw",
                # Only the thread holding the interpreter's lock: where the CPU
                # goes, not which threads wait for it.
                "--gil",
                # Without pausing the server for each sample (py-spy's default
                # stops it 100 times a second, and the latency measured with it).
                "--nonblocking",
                "-o",
                profile,
            ]
            readings["profiler"] = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        if edge == "end":
            readings["rss"] = sum(rss_mb(pid) for pid in pids)

    reset_provider(provider_url)
    config = {
        "addresses": addresses,
        "path": path,
        "visitors": visitors,
        "questions": QUESTIONS,
        # Visitors who pause between questions come in over two pauses, and
        # the window opens a pause later: their first questions all at once
        # would be a burst that the window measures the tail of.
        "rampSeconds": max(min(10, max(2, visitors / 100)), 2 * pause_seconds),
        "warmupSeconds": 5 + pause_seconds,
        "seconds": seconds,
        "stopFraction": stop_fraction,
        "pauseSeconds": pause_seconds,
    }
    result = run_client(config, on_window)
    if "profiler" in readings:
        readings["profiler"].wait()
    elapsed = readings["end"][0] - readings["start"][0]
    server_cpu = readings["end"][1] - readings["start"][1]
    first = result["firstDelta"]
    per_char = server_cpu / result["windowChars"] if result["windowChars"] else None
    return {
        "path": path,
        "visitors": visitors,
        "pause_seconds": pause_seconds,
        "processes": len(pids),
        "seconds": round(elapsed, 1),
        "turns": result["turns"],
        "stopped": result["stopped"],
        "errors": sum(result["errors"].values()),
        "refused": result.get("refused", 0),
        "error_kinds": result["errors"],
        "first_delta_p50_ms": _round(percentile(first, 0.5)),
        "first_delta_p99_ms": _round(percentile(first, 0.99)),
        # The running turns' pace: the provider sends a chunk every 25 ms.
        "gap_p50_ms": _round(percentile(result["gaps"], 0.5)),
        "gap_p99_ms": _round(percentile(result["gaps"], 0.99)),
        "after_search_p50_ms": _round(percentile(result["afterTool"], 0.5)),
        "after_search_p99_ms": _round(percentile(result["afterTool"], 0.99)),
        "server_cpu_percent": round(100 * server_cpu / elapsed, 1),
        "chars": result["chars"],
        "frames": result["frames"],
        # The CPU of the window over the characters that arrived in it; a
        # turn's share is that, times the characters of a turn counted.
        "cpu_us_per_char": round(1e6 * per_char, 2) if per_char else None,
        "cpu_ms_per_turn": round(1e3 * per_char * result["chars"] / result["turns"], 2) if result["turns"] else None,
        "client_cpu_percent": round(100 * result["clientCpuSeconds"] / elapsed, 1),
        "rss_mb": round(readings["rss"], 1),
        "kb_per_connection": round(1024 * (readings["rss"] - idle_rss) / visitors, 1),
        "stop_ms": _stop_latencies(result["stops"], provider_stats(provider_url)),
    }


def _stop_latencies(stops: list[dict[str, Any]], requests: list[dict[str, Any]]) -> list[float]:
    """Stop frame sent -> the provider saw that turn's request closed, in ms."""
    closed = {}
    for request in requests:
        marker = re.search(r"k\d+x\d+$", request["question"])
        if marker and "closed_early" in request:
            closed[marker.group()] = request["closed_early"]
    return sorted(
        round(closed[stop["marker"]] * 1000 - stop["sentAt"], 2) for stop in stops if stop["marker"] in closed
    )


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def run(
    levels: list[int],
    *,
    seconds: float,
    server: str,
    processes: int,
    database: str,
    stop_fraction: float,
    bare: bool,
    passing: bool = False,
    extra_args: tuple[str, ...] = (),
    env_extra: dict[str, str] | None = None,
    profile: str = "",
    label: str = "",
    pause_seconds: float = 0.0,
    words: int = 0,
) -> list[dict]:
    rows = []
    padding = ("--words", str(words)) if words else ()
    with tempfile.TemporaryDirectory() as tmp, provider(TTFT_MS, TOKENS_PER_SECOND, *padding) as (provider_url, _):
        database_url = database if database != "sqlite" else f"sqlite:///{Path(tmp) / 'db.sqlite3'}"
        scripts = Path(tmp) / "scripts.json"
        env = server_env(database_url, provider_url, BENCH_RELAY_SCRIPTS=str(scripts), **(env_extra or {}))
        migrate(env)
        # Recorded with no window: the bare relay passes each of the
        # provider's chunks on as its own frame, as a bare proxy would.
        with servers({**env, "KOOKEE_DELTA_WINDOW_MS": "0"}, 1) as (addresses, _):
            record_scripts(addresses[0], scripts)
        for visitors in levels:
            # A fresh server for each path, so that each one's memory is its own.
            paths = ["/ws/chat/"] + (["/ws/pass/"] if passing else []) + (["/ws/bare/"] if bare else [])
            for path in paths:
                with servers(env, processes, server, extra_args) as (addresses, procs):
                    row = measure(
                        addresses,
                        procs,
                        provider_url,
                        path=path,
                        visitors=visitors,
                        seconds=seconds,
                        stop_fraction=stop_fraction if path == "/ws/chat/" else 0,
                        pause_seconds=pause_seconds,
                        profile=(
                            f"{profile}-{visitors}{path.replace('/', '-')}raw"
                            if profile and visitors == PROFILED_VISITORS
                            else ""
                        ),
                    )
                    row["server"] = server
                    row["label"] = label or server
                    row["words"] = words
                    rows.append(row)
                    print(_line(row), flush=True)
    return rows


def _line(row: dict[str, Any]) -> str:
    stops = row["stop_ms"]
    stop = f" stop p50/p99 {statistics.median(stops):.1f}/{percentile(stops, 0.99):.1f} ms" if stops else ""
    return (
        f"{row['server']} x{row['processes']} {row['path']:10} {row['visitors']:5} visitors: {row['turns']} turns,"
        f" first delta p50/p99 {row['first_delta_p50_ms']}/{row['first_delta_p99_ms']} ms,"
        f" between deltas p50/p99 {row.get('gap_p50_ms')}/{row.get('gap_p99_ms')} ms,"
        f" answer after search p50/p99 {row.get('after_search_p50_ms')}/{row.get('after_search_p99_ms')} ms,"
        f" server CPU {row['server_cpu_percent']}%, {row['cpu_us_per_char']} us/char,"
        f" {row['cpu_ms_per_turn']} ms/turn, client CPU {row['client_cpu_percent']}%,"
        f" {row['kb_per_connection']} KB/conn, errors {row['errors']} {row['error_kinds'] or ''},"
        f" refused {row.get('refused', 0)}{stop}"
    )


SWEEP = [50, 100, 200, 500, 1000]


def suite(seconds: float) -> None:
    """What `make bench` runs: the sweep against the bare relay (with some
    turns stopped, for Stop latency under load), the variants at 200
    visitors, and the stretch on two processes."""
    sweep = run(
        SWEEP,
        seconds=seconds,
        server="daphne",
        processes=1,
        database="sqlite",
        stop_fraction=0.1,
        bare=True,
    )
    save("concurrency", sweep)
    _profile(seconds, "sqlite", "profile")
    variants = []
    for label, server, args, env in [
        ("uvicorn, permessage-deflate on", "uvicorn", (), {}),
        ("uvicorn, permessage-deflate off", "uvicorn", ("--ws-per-message-deflate", "false"), {}),
        ("daphne, REDIS_URL set", "daphne", (), {"REDIS_URL": REDIS_URL}),
        ("daphne, lexical search only (KOOKEE_EMBEDDINGS=off)", "daphne", (), {"KOOKEE_EMBEDDINGS": "off"}),
    ]:
        if "REDIS_URL" in env and not _reachable(6379):
            continue
        variants += run(
            [200],
            seconds=seconds,
            server=server,
            processes=1,
            database="sqlite",
            stop_fraction=0,
            bare=server != "daphne",
            extra_args=args,
            env_extra=env,
            label=label,
        )
    save("concurrency_variants", variants)
    postgres: list[dict] = []
    stretch: list[dict] = []
    if _reachable(5432):
        # The goal holds on PostgreSQL (production's database): the same
        # 200 visitors, side by side with the bare relay, then profiled.
        with fresh_postgres("kookee_bench") as database:
            postgres = run(
                [200],
                seconds=seconds,
                server="daphne",
                processes=1,
                database=database,
                stop_fraction=0.1,
                bare=True,
                label="daphne, PostgreSQL",
            )
        with fresh_postgres("kookee_bench") as database:
            _profile(seconds, database, "profile-postgres")
        stretch = stretch_runs(seconds)
    save("concurrency_postgres", postgres)
    save("concurrency_stretch", stretch)


def _profile(seconds: float, database: str, prefix: str) -> None:
    """The app at PROFILED_VISITORS, profiled with py-spy into RESULTS/PREFIX-*,
    in a run that measures nothing else: py-spy shares the machine's cores
    with the server, the load client and the provider, and must not move
    the numbers the goals are judged on."""
    run(
        [PROFILED_VISITORS],
        seconds=seconds,
        server="daphne",
        processes=1,
        database=database,
        stop_fraction=0.1,
        bare=False,
        profile=str(RESULTS / prefix),
    )


def stretch_runs(seconds: float) -> list[dict]:
    """1,000 visitors on two processes, PostgreSQL and Redis: back to back,
    as the rest of the suite (the target), then visitors who read each
    answer and type the next question."""
    redis = {"REDIS_URL": REDIS_URL} if _reachable(6379) else {}
    rows: list[dict] = []
    for pause in (0, PAUSE_SECONDS):
        with fresh_postgres("kookee_bench") as database:
            rows += run(
                [1000],
                seconds=seconds,
                server="daphne",
                processes=2,
                database=database,
                stop_fraction=0.1,
                bare=True,
                env_extra=redis,
                label="2 x daphne, PostgreSQL"
                + (", Redis" if redis else "")
                + (f", visitors pausing {pause:.0f} s between questions" if pause else ""),
                pause_seconds=pause,
            )
    return rows


def _reachable(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


BOUND_MS = TTFT_MS + 100  # the target: the model's own time to first token, plus 100 ms


def section(sweep: list[dict[str, Any]], charts: Path) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from cpu_profile import categorize, table

    app = {r["visitors"]: r for r in sweep if r["path"] == "/ws/chat/"}
    bare = {r["visitors"]: r for r in sweep if r["path"] == "/ws/bare/"}
    lines = [
        "## 4. Concurrency",
        "",
        f"N visitors ask help questions back to back (each turn a search, then an answer; 10% stopped after a few"
        f" deltas), against the bench provider at {TTFT_MS} ms to first token and {TOKENS_PER_SECOND} tokens/s,"
        " served by one daphne process on SQLite. In the same process and run, the bare relay sends the same"
        " visitors the frames the app sent for each question, at the same pace, with no model and no database."
        " Each level runs on a fresh server; the Node.js load client reports its own CPU.",
        "",
        "| visitors | first delta p50 / p99, app | bare relay | server CPU, app | bare | CPU per character, app |"
        " bare | ratio | memory per connection, app | bare | client CPU | errors |",
        "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for visitors in sorted(app):
        a, b = app[visitors], bare.get(visitors, {})
        ratio = a["cpu_us_per_char"] / b["cpu_us_per_char"] if b.get("cpu_us_per_char") else None
        lines.append(
            f"| {visitors} | {a['first_delta_p50_ms']:.0f} / {a['first_delta_p99_ms']:.0f} ms |"
            f" {_pair(b, 'first_delta_p50_ms', 'first_delta_p99_ms')} | {a['server_cpu_percent']:.0f}% |"
            f" {_percent(b)} | {a['cpu_us_per_char']:.1f} us | {_value(b, 'cpu_us_per_char', ' us')} |"
            f" {_value({'r': ratio}, 'r', 'x')} | {a['kb_per_connection']:.0f} KB |"
            f" {_value(b, 'kb_per_connection', ' KB')} | {a['client_cpu_percent']:.0f}% |"
            f" {a['errors'] + b.get('errors', 0)} |"
        )
    paced = [v for v in sorted(app) if app[v].get("gap_p99_ms") is not None]
    if paced:
        lines += [
            "",
            "**Where a turn waits.** Once an answer streams, it keeps the provider's pace at every level (a chunk every"
            f" {1000 / TOKENS_PER_SECOND:.0f} ms): the wait is before each round's stream, for the first delta and"
            " again for the answer after the search (the next round's time to first token, 300 ms, plus the"
            " server's work between rounds), where every turn's requests, database work and query embedding queue"
            " for the same CPU.",
            "",
            "| visitors | first delta p50 / p99 | answer after the search p50 / p99 | between two deltas p50 / p99 |",
            "| ---: | ---: | ---: | ---: |",
            *[
                f"| {v} | {_pair(app[v], 'first_delta_p50_ms', 'first_delta_p99_ms')} |"
                f" {_pair(app[v], 'after_search_p50_ms', 'after_search_p99_ms')} |"
                f" {_pair(app[v], 'gap_p50_ms', 'gap_p99_ms')} |"
                for v in paced
            ],
        ]
    if len(app) >= 2:
        low, high = min(app), max(app)
        marginal = 1024 * (app[high]["rss_mb"] - app[low]["rss_mb"]) / (high - low)
        lines += [
            "",
            "Memory per connection is the server's growth over its idle size at start, divided by the visitors,"
            f" so it includes the process's own warm-up; from {low} to {high} visitors the app grew by"
            f" {marginal:.0f} KB per further visitor.",
        ]
    bends = {name: _bend(rows) for name, rows in (("app", app), ("bare relay", bare))}
    lines += [
        "",
        "Where each bends (the first level whose first-delta p99 passes"
        f" {BOUND_MS} ms): " + ", ".join(f"{name} at {bend or 'none measured'}" for name, bend in bends.items()) + ".",
        "",
    ]
    at_200, bare_200 = app.get(200), bare.get(200)
    lines += targets(sweep, _load("concurrency_postgres"), _load("concurrency_stretch"))
    failed = {kind: n for r in sweep for kind, n in r["error_kinds"].items()}
    if failed:
        lines += [
            "Errors, all levels: "
            + ", ".join(f"{n} x {kind}" for kind, n in failed.items())
            + " (visitors whose socket could not open: a saturated server does not finish the WebSocket handshake"
            " in time; `make load` checks every turn's invariants under load).",
            "",
        ]
    lines += ["![First delta p99 and CPU per character against visitors](benchmarks/concurrency.png)", ""]
    variants = _load("concurrency_variants")
    stretch = _load("concurrency_stretch")
    if variants or stretch:
        lines += [
            "Other servers and set-ups, same workload (stretch: two processes behind no balancer, the client"
            " spreads visitors over both):",
            "",
            "| set-up | visitors | path | first delta p50 / p99 | server CPU | CPU per character | ms per turn |"
            " client CPU | errors |",
            "| --- | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        for r in variants + stretch:
            lines.append(
                f"| {r['label']} | {r['visitors']} | {'app' if r['path'] == '/ws/chat/' else 'bare relay'} |"
                f" {r['first_delta_p50_ms']:.0f} / {r['first_delta_p99_ms']:.0f} ms | {r['server_cpu_percent']:.0f}%"
                f" | {r['cpu_us_per_char']:.1f} us | {r['cpu_ms_per_turn']:.1f} | {r['client_cpu_percent']:.0f}% |"
                f" {r['errors']} |"
            )
        lines.append("")
    profiles = [
        (name, RESULTS / raw)
        for name, raw in (("SQLite", "profile-200-ws-chat-raw"), ("PostgreSQL", "profile-postgres-200-ws-chat-raw"))
        if (RESULTS / raw).exists()
    ]
    if profiles:
        shares = {name: dict(categorize(raw)) for name, raw in profiles}
        lines += [
            "**Where the app's CPU goes at 200 visitors** (py-spy, sampling the running server from outside;"
            " only the thread holding the interpreter's lock is sampled, so the shares are of the CPU the process"
            " spends in Python, not of threads waiting for it, nor of the query embeddings' C code, which runs"
            " without it):",
            "",
            *table(profiles),
            "",
        ]
        first = shares[profiles[0][0]]
        database = sum(share for name, share in first.items() if name.startswith("database"))
        client = sum(share for name, share in first.items() if name.startswith("provider"))
        lexical = next((r for r in _load("concurrency_variants") if r["label"].startswith("daphne, lexical")), None)
        if at_200 and bare_200:
            per_second = at_200["turns"] / at_200["seconds"]
            floor = _load_one("floor")
            embedding = (
                f" Of those {at_200['cpu_ms_per_turn']:.1f} ms, the local query embedding takes about"
                f" {floor['query_embedding']['cpu_ms_per_query']:.0f} ms (section 5), outside Python's lock, on a"
                " second core."
                if floor
                else ""
            )
            if lexical:
                embedding += (
                    f" The same run with KOOKEE_EMBEDDINGS=off spent {lexical['cpu_ms_per_turn']:.1f} ms a turn at"
                    f" {lexical['server_cpu_percent']:.0f}% CPU: less than that much below, because it ran one core"
                    " of Python flat out, and a saturated process spends more a turn (as the 500 and 1,000 levels"
                    " show)."
                )
            lines += [
                f"At 200 visitors the app ran {per_second:.0f} turns a second at {at_200['cpu_ms_per_turn']:.1f} ms"
                f" of CPU each, where the bare relay spends {bare_200['cpu_ms_per_turn']:.1f} ms sending the same"
                f" frames.{embedding} In Python, the provider client takes {client:.0%} of the samples (the openai"
                f" client building each request, httpx2 and h11 reading the stream) and the database {database:.0%}"
                " (a turn's 14 statements, on one thread); the rest is frames, the round loop and the event loop."
                " Python runs one thread at a time, so the database thread and the event loop share one core.",
                "",
            ]
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.4), dpi=100)
    for name, rows in (("app", app), ("bare relay", bare)):
        levels = sorted(rows)
        left.plot(levels, [rows[v]["first_delta_p99_ms"] for v in levels], marker="o", label=name)
        right.plot(levels, [rows[v]["cpu_us_per_char"] for v in levels], marker="o", label=name)
    left.axhline(BOUND_MS, color="grey", linestyle="--", label=f"bound, {BOUND_MS} ms")
    levels = sorted(bare)
    right.plot(levels, [3 * bare[v]["cpu_us_per_char"] for v in levels], color="grey", linestyle="--", label="3x bare")
    for axis, title in ((left, "first delta p99 (ms)"), (right, "server CPU per character (us)")):
        axis.set_xscale("log")
        axis.set_yscale("log" if axis is left else "linear")
        axis.set_xlabel("visitors")
        axis.set_title(title, fontsize=10)
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(charts / "concurrency.png")
    plt.close(figure)
    return "\n".join(lines)


STOP_BOUND_MS = 100  # Stop -> the provider's request closed, p99
STRETCH_BOUND_MS = TTFT_MS + 250  # two processes, 1,000 visitors
# A visitor reading an answer of a few hundred characters and typing the next
# question: the stretch's second run pauses this long on average.
PAUSE_SECONDS = 20


def targets(sqlite: list[dict], postgres: list[dict], stretch: list[dict]) -> list[str]:
    """The goals side by side: one process at 200 visitors on SQLite and on
    PostgreSQL, two processes at 1,000; each against the bare relay of the
    same run."""
    setups = [
        ("1 x daphne, SQLite", sqlite, 200, BOUND_MS),
        ("1 x daphne, PostgreSQL", postgres, 200, BOUND_MS),
    ]
    labels = list(dict.fromkeys(r["label"] for r in stretch)) or ["2 x daphne, PostgreSQL"]
    setups += [(label, [r for r in stretch if r["label"] == label], 1000, STRETCH_BOUND_MS) for label in labels]
    lines = [
        "**The goals** (issue 25): first delta p99 within the model's own time to first token plus 100 ms (one"
        f" process, 200 visitors) or 250 ms (two processes, 1,000); Stop to the provider's hang-up p99 under"
        f" {STOP_BOUND_MS} ms; CPU per answer character at most 3x the bare relay's in the same run; every socket"
        " opens.",
        "",
        "| set-up | visitors | first delta p99, app (bound) | bare relay | Stop p99 | CPU per character, app / bare"
        " | every socket opens | running turns' pace: between two deltas p50 / p99 (the provider's: 25 ms) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for label, rows, visitors, bound in setups:
        app = next((r for r in rows if r["path"] == "/ws/chat/" and r["visitors"] == visitors), None)
        bare = next((r for r in rows if r["path"] == "/ws/bare/" and r["visitors"] == visitors), None)
        if app is None:
            lines.append(f"| {label} | {visitors} | not measured (no server for it here) | | | | | |")
            continue
        p99 = app["first_delta_p99_ms"]
        stops = app["stop_ms"]
        stop = percentile(stops, 0.99) if stops else None
        ratio = app["cpu_us_per_char"] / bare["cpu_us_per_char"] if bare and bare.get("cpu_us_per_char") else None
        unopened = app["errors"] + (bare["errors"] if bare else 0)
        lines.append(
            f"| {label} | {visitors} | {p99:.0f} ms ({bound}): {_verdict(p99 <= bound)} |"
            f" {_value(bare or {}, 'first_delta_p99_ms', ' ms')} |"
            f" {'-' if stop is None else f'{stop:.0f} ms: ' + _verdict(stop < STOP_BOUND_MS)} |"
            f" {'-' if ratio is None else f'{ratio:.1f}x: ' + _verdict(ratio <= 3)} |"
            f" {_verdict(not unopened) if not app.get('refused') else 'refused ' + str(app['refused']) + ' (4503)'}"
            f"{'' if not unopened else f', {unopened} errors'} |"
            f" {_pair(app, 'gap_p50_ms', 'gap_p99_ms')} |"
        )
    return [*lines, ""]


def _verdict(met: bool) -> str:
    return "met" if met else "missed"


def _load_one(name: str) -> dict[str, Any] | None:
    import json

    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _load(name: str) -> list[dict[str, Any]]:
    import json

    path = RESULTS / f"{name}.json"
    return json.loads(path.read_text()) if path.exists() else []


def _bend(rows: dict[int, dict[str, Any]]) -> int | None:
    return next((v for v in sorted(rows) if rows[v]["first_delta_p99_ms"] > BOUND_MS), None)


def _pair(row: dict[str, Any], first: str, second: str) -> str:
    return f"{row[first]:.0f} / {row[second]:.0f} ms" if row.get(first) is not None else "-"


def _percent(row: dict[str, Any]) -> str:
    return f"{row['server_cpu_percent']:.0f}%" if row else "-"


def _value(row: dict[str, Any], key: str, unit: str) -> str:
    value = row.get(key)
    return f"{value:.1f}{unit}" if value is not None else "-"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("levels", type=int, nargs="*", help="visitors; none: the whole suite of `make bench`")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--server", default="daphne")
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--database", default="sqlite")
    parser.add_argument("--stop-fraction", type=float, default=0.0)
    parser.add_argument("--bare", action="store_true", help="also serve the same visitors from the bare relay")
    parser.add_argument(
        "--pass-through", action="store_true", help="also from the pass-through: the model's rounds, nothing else"
    )
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE for the server")
    parser.add_argument("--name", default="")
    parser.add_argument("--profile", default="", help="py-spy the (first) server into PREFIX-*.raw")
    parser.add_argument("--stretch", action="store_true", help="only the suite's 1,000 visitors on two processes")
    parser.add_argument("--words", type=int, default=0, help="pad every answer to at least this many words")
    args = parser.parse_args()
    if args.stretch:
        save("concurrency_stretch", stretch_runs(args.seconds))
        return
    if not args.levels:
        suite(args.seconds)
        return
    rows = run(
        args.levels,
        seconds=args.seconds,
        server=args.server,
        processes=args.processes,
        database=args.database,
        stop_fraction=args.stop_fraction,
        bare=args.bare,
        passing=args.pass_through,
        env_extra=dict(item.split("=", 1) for item in args.env),
        profile=args.profile,
        words=args.words,
    )
    if args.name:
        save(args.name, rows)


if __name__ == "__main__":
    main()
