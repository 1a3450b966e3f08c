"""Concurrency: N visitors asking help questions back to back, served by the
app and, in the same server process, by the bare relay (bench/relay.py).

For each level: the first delta's p50 and p99, the server's CPU and its CPU
per answer character, memory per connection, the load client's own CPU,
errors, and Stop latency (the Stop frame to the provider seeing its request
closed) for the turns the client stopped.

    .venv/bin/python bench/concurrency.py [visitors ...] [--seconds S] [--server daphne|uvicorn]
        [--processes P] [--database postgres] [--stop-fraction F] [--name NAME] [--bare]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import (
    QUESTIONS,
    cpu_seconds,
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
        "rampSeconds": min(10, max(2, visitors / 100)),
        "warmupSeconds": 5,
        "seconds": seconds,
        "stopFraction": stop_fraction,
    }
    result = run_client(config, on_window)
    if "profiler" in readings:
        readings["profiler"].wait()
    elapsed = readings["end"][0] - readings["start"][0]
    server_cpu = readings["end"][1] - readings["start"][1]
    first = result["firstDelta"]
    return {
        "path": path,
        "visitors": visitors,
        "processes": len(pids),
        "seconds": round(elapsed, 1),
        "turns": result["turns"],
        "stopped": result["stopped"],
        "errors": sum(result["errors"].values()),
        "error_kinds": result["errors"],
        "first_delta_p50_ms": _round(percentile(first, 0.5)),
        "first_delta_p99_ms": _round(percentile(first, 0.99)),
        "server_cpu_percent": round(100 * server_cpu / elapsed, 1),
        "chars": result["chars"],
        "frames": result["frames"],
        "cpu_us_per_char": round(1e6 * server_cpu / result["chars"], 2) if result["chars"] else None,
        "cpu_ms_per_turn": round(1e3 * server_cpu / result["turns"], 2) if result["turns"] else None,
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
    extra_args: tuple[str, ...] = (),
    env_extra: dict[str, str] | None = None,
    profile: str = "",
) -> list[dict]:
    rows = []
    with tempfile.TemporaryDirectory() as tmp, provider(TTFT_MS, TOKENS_PER_SECOND) as (provider_url, _):
        database_url = database if database != "sqlite" else f"sqlite:///{Path(tmp) / 'db.sqlite3'}"
        scripts = Path(tmp) / "scripts.json"
        env = server_env(database_url, provider_url, BENCH_RELAY_SCRIPTS=str(scripts), **(env_extra or {}))
        migrate(env)
        with servers(env, 1) as (addresses, _):
            record_scripts(addresses[0], scripts)
        for visitors in levels:
            with servers(env, processes, server, extra_args) as (addresses, procs):
                paths = ["/ws/chat/", "/ws/bare/"] if bare else ["/ws/chat/"]
                for path in paths:
                    row = measure(
                        addresses,
                        procs,
                        provider_url,
                        path=path,
                        visitors=visitors,
                        seconds=seconds,
                        stop_fraction=stop_fraction if path == "/ws/chat/" else 0,
                        profile=f"{profile}-{visitors}{path.replace('/', '-')}raw" if profile else "",
                    )
                    row["server"] = server
                    rows.append(row)
                    print(_line(row), flush=True)
    return rows


def _line(row: dict[str, Any]) -> str:
    stops = row["stop_ms"]
    stop = f" stop p50/p99 {statistics.median(stops):.1f}/{percentile(stops, 0.99):.1f} ms" if stops else ""
    return (
        f"{row['server']} x{row['processes']} {row['path']:10} {row['visitors']:5} visitors: {row['turns']} turns,"
        f" first delta p50/p99 {row['first_delta_p50_ms']}/{row['first_delta_p99_ms']} ms,"
        f" server CPU {row['server_cpu_percent']}%, {row['cpu_us_per_char']} us/char,"
        f" {row['cpu_ms_per_turn']} ms/turn, client CPU {row['client_cpu_percent']}%,"
        f" {row['kb_per_connection']} KB/conn, errors {row['errors']} {row['error_kinds'] or ''}{stop}"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("levels", type=int, nargs="*", default=[50, 100, 200, 500, 1000])
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--server", default="daphne")
    parser.add_argument("--processes", type=int, default=1)
    parser.add_argument("--database", default="sqlite")
    parser.add_argument("--stop-fraction", type=float, default=0.0)
    parser.add_argument("--bare", action="store_true", help="also serve the same visitors from the bare relay")
    parser.add_argument("--name", default="")
    parser.add_argument("--profile", default="", help="py-spy the (first) server into PREFIX-*.raw")
    args = parser.parse_args()
    rows = run(
        args.levels,
        seconds=args.seconds,
        server=args.server,
        processes=args.processes,
        database=args.database,
        stop_fraction=args.stop_fraction,
        bare=args.bare,
        profile=args.profile,
    )
    if args.name:
        save(args.name, rows)


if __name__ == "__main__":
    main()
