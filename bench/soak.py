"""Memory over time: does the server's memory level off, or does it leak?

One daphne process serves 60 visitors (by default) asking help questions back
to back for ten minutes, on SQLite or (`--postgres`) a fresh PostgreSQL
database, against the bench provider at 300 ms to first token and 40
tokens/s, with one turn in ten stopped by its visitor. Every few seconds
the server's RSS and CPU time and the number of turns stored so far (read
from the database) are sampled. Reported: RSS before any load, RSS at
each 1,000 turns, and the least-squares growth in MB per 1,000 turns after the
warm-up (the first 1,000 turns) and over the last half of the run; a leak
keeps growing over the last half, a warming cache does not. And whether
anything was lost: once the visitors are gone, no turn is left streaming and
every stored turn has exactly one ledger entry.

    .venv/bin/python bench/soak.py [--minutes 10] [--visitors 60] [--interval 5] [--postgres]
"""

from __future__ import annotations

import argparse
import contextlib
import sqlite3
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from harness import (
    QUESTIONS,
    cpu_seconds,
    fresh_postgres,
    migrate,
    provider,
    rss_mb,
    run_client,
    save,
    server_env,
    servers,
)

TTFT_MS = 300
TOKENS_PER_SECOND = 40
STOP_FRACTION = 0.1
WARMUP_TURNS = 1000
# Below this many MB per 1,000 turns over the last half, memory has levelled off.
LEVEL_MB_PER_1000 = 0.5


def query(database: str, sql: str) -> tuple:
    """One row from the database the server uses, beside its own connections."""
    if database.startswith("postgres"):
        import psycopg

        with psycopg.connect(database) as connection:
            return connection.execute(sql).fetchone()
    # Read-only: the database is in WAL mode.
    connection = sqlite3.connect(f"file:{database.removeprefix('sqlite:///')}?mode=ro", uri=True, timeout=5)
    try:
        return connection.execute(sql).fetchone()
    finally:
        connection.close()


def stored_turns(database: str) -> int:
    return query(database, "select count(*) from chat_turn")[0]


def lost(database: str) -> dict[str, int]:
    """What a run lost: turns left streaming, turns not billed exactly once."""
    streaming, unbilled = query(
        database,
        "select count(case when status = 'streaming' then 1 end),"
        " count(case when (select count(*) from billing_ledgerentry l where l.turn_id = t.id) <> 1 then 1 end)"
        " from chat_turn t",
    )
    return {"left_streaming": streaming, "not_billed_once": unbilled}


def run(*, minutes: float, visitors: int, interval: float, postgres: bool = False) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory())
        database = stack.enter_context(fresh_postgres("kookee_soak")) if postgres else f"sqlite:///{tmp}/db.sqlite3"
        return _run(database, minutes=minutes, visitors=visitors, interval=interval)


def _run(database: str, *, minutes: float, visitors: int, interval: float) -> dict[str, Any]:
    samples: list[list[float]] = []
    with provider(TTFT_MS, TOKENS_PER_SECOND) as (provider_url, _):
        env = server_env(database, provider_url)
        migrate(env)
        with servers(env, 1) as (addresses, processes):
            pid = processes[0].pid
            # Let the freshly started process settle before the reading that counts as "before load".
            time.sleep(2)
            baseline = stored_turns(database)
            start_rss = rss_mb(pid)
            start_cpu = cpu_seconds(pid)
            config = {
                "addresses": addresses,
                "path": "/ws/chat/",
                "visitors": visitors,
                "questions": QUESTIONS,
                "rampSeconds": 5,
                "warmupSeconds": 0,
                "seconds": minutes * 60,
                "stopFraction": STOP_FRACTION,
            }
            outcome: dict[str, Any] = {}

            def client() -> None:
                try:
                    outcome["result"] = run_client(config)
                except Exception as error:  # reported after the soak, not lost in the thread
                    outcome["error"] = error

            started = time.perf_counter()
            thread = threading.Thread(target=client, daemon=True)
            thread.start()
            samples.append([0.0, 0, round(start_rss, 2), 0.0])
            next_at = started + interval
            while thread.is_alive():
                thread.join(max(0.0, next_at - time.perf_counter()))
                next_at += interval
                samples.append(
                    [
                        round(time.perf_counter() - started, 2),
                        stored_turns(database) - baseline,
                        round(rss_mb(pid), 2),
                        round(cpu_seconds(pid) - start_cpu, 2),
                    ]
                )
            if "error" in outcome:
                raise outcome["error"]
            result = outcome["result"]
            # With the visitors gone: what stays allocated once nothing is in flight.
            time.sleep(3)
            idle_rss = rss_mb(pid)
            losses = lost(database)
    return {
        "visitors": visitors,
        "minutes": minutes,
        "server": "daphne",
        "processes": 1,
        "database": "postgresql" if database.startswith("postgres") else "sqlite",
        "provider": {"ttft_ms": TTFT_MS, "tokens_per_second": TOKENS_PER_SECOND},
        "stop_fraction": STOP_FRACTION,
        "interval_s": interval,
        "samples": samples,
        "client_turns": result["turns"],
        "client_stopped": result["stopped"],
        "errors": sum(result["errors"].values()),
        "error_kinds": result["errors"],
        "rss_idle_after_mb": round(idle_rss, 2),
        "lost": losses,
        **derive(samples),
    }


def derive(samples: list[list[float]]) -> dict[str, Any]:
    """RSS at each 1,000 turns and the growth rates; from the samples alone."""
    turns = [s[1] for s in samples]
    rss = [s[2] for s in samples]
    total = max(turns)
    at_thousands = []
    for mark in range(WARMUP_TURNS, int(total) + 1, 1000):
        value = _interpolate(turns, rss, mark)
        if value is not None:
            at_thousands.append([mark, round(value, 1)])
    after = [(t, r) for t, r in zip(turns, rss, strict=True) if t >= WARMUP_TURNS]
    half = [(t, r) for t, r in after if t >= total / 2]
    elapsed = samples[-1][0]
    return {
        "turns": int(total),
        "turns_per_minute": round(60 * total / elapsed, 1) if elapsed else None,
        "rss_start_mb": rss[0],
        "rss_end_mb": rss[-1],
        "rss_max_mb": max(rss),
        "rss_at_thousands": at_thousands,
        "mb_per_1000_after_warmup": _slope(after),
        "mb_per_1000_last_half": _slope(half),
        "cpu_seconds": samples[-1][3],
    }


def _interpolate(xs: list[float], ys: list[float], x: float) -> float | None:
    for (x0, y0), (x1, y1) in zip(zip(xs, ys, strict=True), zip(xs[1:], ys[1:], strict=True), strict=True):
        if x0 <= x <= x1:
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return None


def _slope(points: list[tuple[float, float]]) -> float | None:
    """Least-squares MB per 1,000 turns; None with too few points to mean anything."""
    if len(points) < 3:
        return None
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if not spread:
        return None
    return round(1000 * sum((x - mean_x) * (y - mean_y) for x, y in points) / spread, 2)


def verdict(results: dict[str, Any]) -> str:
    last = results["mb_per_1000_last_half"]
    if last is None:
        return "The run is too short to tell whether memory levels off."
    if last < LEVEL_MB_PER_1000:
        return f"Memory levels off: over the last half it grows by less than {LEVEL_MB_PER_1000} MB per 1,000 turns."
    return f"Memory still grows by {last:.2f} MB per 1,000 turns over the last half of the run."


def summary(results: dict[str, Any]) -> str:
    marks = ", ".join(f"{mark:,}: {value} MB" for mark, value in results["rss_at_thousands"])
    return (
        f"{results['visitors']} visitors for {results['minutes']:g} min: {results['turns']:,} turns"
        f" ({results['turns_per_minute']}/min), errors {results['errors']} {results['error_kinds'] or ''}\n"
        f"RSS start {results['rss_start_mb']:.1f} MB; at turns {marks}; end {results['rss_end_mb']:.1f} MB,"
        f" idle after {results['rss_idle_after_mb']:.1f} MB\n"
        f"MB per 1,000 turns after warm-up {results['mb_per_1000_after_warmup']},"
        f" over the last half {results['mb_per_1000_last_half']}\n"
        f"{verdict(results)}\n"
        f"Lost: {_losses(results)}"
    )


def _losses(results: dict[str, Any]) -> str:
    lost = results.get("lost")
    if lost is None:
        return "not checked"
    if not any(lost.values()):
        return "nothing (no turn left streaming, every turn billed exactly once)"
    return f"{lost['left_streaming']} turn(s) left streaming, {lost['not_billed_once']} not billed exactly once"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=10)
    parser.add_argument("--visitors", type=int, default=60)
    parser.add_argument("--interval", type=float, default=5, help="seconds between samples")
    parser.add_argument("--name", default="soak")
    parser.add_argument("--postgres", action="store_true", help="on a fresh PostgreSQL database (bench/harness.py)")
    args = parser.parse_args()
    results = run(minutes=args.minutes, visitors=args.visitors, interval=args.interval, postgres=args.postgres)
    path = save(args.name, results)
    print(summary(results))
    print(f"saved {path}")


def _fmt(value: float | None) -> str:
    return "n/a" if value is None else f"{value:+.2f}"


_DATABASES = {"sqlite": "SQLite", "postgresql": "PostgreSQL"}


def section(results: dict[str, Any], charts: Path) -> str:
    """The docs/benchmarks.md section for saved results; renders only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pace = results["provider"]
    lines = [
        "## 7. Memory over time",
        "",
        f"One {results['server']} process on {_DATABASES[results['database']]} served {results['visitors']}"
        f" visitors asking help questions back to back for {results['minutes']:g} minutes"
        f" ({results['turns']:,} turns, about"
        f" {results['turns_per_minute']:,.0f} a minute, one in {round(1 / results['stop_fraction'])} stopped by"
        f" its visitor) against the bench provider at {pace['ttft_ms']:g} ms to first token and"
        f" {pace['tokens_per_second']:g} tokens/s, with {results['errors'] or 'no'} errors; its RSS was sampled every"
        f" {results['interval_s']:g} s.",
        "",
        "| turns | RSS (MB) |",
        "| ---: | ---: |",
        f"| before load | {results['rss_start_mb']:.1f} |",
    ]
    lines += [f"| {mark:,} | {value:.1f} |" for mark, value in results["rss_at_thousands"]]
    lines += [
        "",
        f"After the warm-up (the first {WARMUP_TURNS:,} turns) RSS grows by"
        f" {_fmt(results['mb_per_1000_after_warmup'])} MB per 1,000 turns (least squares), and by"
        f" {_fmt(results['mb_per_1000_last_half'])} MB per 1,000 turns over the last half of the run. "
        + verdict(results),
        "",
        f"Lost: {_losses(results)}.",
        "",
        "![Server RSS against turns served](benchmarks/soak.png)",
        "",
    ]
    samples = results["samples"]
    figure, axis = plt.subplots(figsize=(7, 3.2), dpi=100)
    axis.plot([s[1] for s in samples], [s[2] for s in samples], marker=".", markersize=3, linewidth=1)
    axis.axvline(WARMUP_TURNS, color="grey", linestyle=":", linewidth=1, label="end of warm-up")
    axis.set_xlabel("turns served")
    axis.set_ylabel("server RSS (MB)")
    axis.set_ylim(bottom=0)
    axis.legend(fontsize=8, frameon=False, loc="lower right")
    axis.grid(alpha=0.3)
    figure.tight_layout()
    charts.mkdir(parents=True, exist_ok=True)
    figure.savefig(charts / "soak.png")
    plt.close(figure)
    return "\n".join(lines)


if __name__ == "__main__":
    main()
