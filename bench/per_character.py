"""Cost per character: what streaming an answer costs the server, beside a
bare relay that passes each of the provider's chunks on as its own frame.

The visitors ask help questions back to back (a search round, then the
answer), against the bench provider at 300 ms to first token and 40 chunks a
second, one daphne process; short answers (the offline model's, a sentence
or two) and long ones (padded to 200 words). For each level, database and
length: the first delta's p50 and p99, the server's CPU per answer character
and per help question, errors; the app and the bare relay in the same run,
each on a fresh server. On long answers, the pass-through too (bench/relay.py:
the model's rounds through the app's own round loop and provider, each delta
straight to the socket, nothing stored, billed or searched), which measures
what the goal leaves for the app's own work. The app is then profiled with
py-spy at 200 visitors on long answers (bench/cpu_profile.py), in a run of
its own: py-spy shares the machine's cores with the server, the load client
and the provider, and must not move the numbers the goals are judged on.

    .venv/bin/python bench/per_character.py [--seconds 20] [--levels 50 200 500] [--sqlite-only]
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from concurrency import TTFT_MS, _reachable, run
from cpu_profile import table
from harness import RESULTS, fresh_postgres, save

LEVELS = [50, 200, 500]
DEFAULT_WINDOW_MS = 50  # KOOKEE_DELTA_WINDOW_MS's default
LONG_WORDS = 200
# The goals (issue 39), at 200 visitors on long answers, on both databases.
GOAL_VISITORS = 200
GOAL_RATIO = 2.0
GOAL_FIRST_DELTA_MS = TTFT_MS + 250


def suite(seconds: float, levels: list[int], postgres: bool) -> list[dict[str, Any]]:
    RESULTS.mkdir(parents=True, exist_ok=True)  # py-spy writes its profiles there
    rows: list[dict[str, Any]] = []
    for words in (LONG_WORDS, 0):
        rows += _rows(run(levels, **_options(seconds, words, "sqlite", "SQLite")), "SQLite")
        if postgres:
            with fresh_postgres("kookee_bench") as database:
                rows += _rows(run(levels, **_options(seconds, words, database, "PostgreSQL")), "PostgreSQL")
        save("per_character", rows)  # what has run so far, if a later run fails
    # The profiles, from runs that measure nothing else.
    profiled = {**_options(seconds, LONG_WORDS, "sqlite", "SQLite"), "bare": False, "passing": False}
    run([GOAL_VISITORS], **{**profiled, "profile": str(RESULTS / "profile-per-char-sqlite")})
    if postgres:
        with fresh_postgres("kookee_bench") as database:
            profiled.update(database=database, label="PostgreSQL", profile=str(RESULTS / "profile-per-char-postgresql"))
            run([GOAL_VISITORS], **profiled)
    # The window's trade-off: twice as long, at the goal's level.
    wider = _options(seconds, LONG_WORDS, "sqlite", "SQLite")
    wider["env_extra"] = {"KOOKEE_DELTA_WINDOW_MS": str(2 * DEFAULT_WINDOW_MS)}
    wider["passing"] = False
    for row in run([GOAL_VISITORS], **wider):
        row["database"], row["window_ms"] = "SQLite", 2 * DEFAULT_WINDOW_MS
        rows.append(row)
    save("per_character", rows)
    return rows


def _options(seconds: float, words: int, database: str, name: str) -> dict[str, Any]:
    return {
        "seconds": seconds,
        "server": "daphne",
        "processes": 1,
        "database": database,
        "stop_fraction": 0.0,
        "bare": True,
        "passing": bool(words),
        "label": name,
        "words": words,
    }


def _rows(rows: list[dict[str, Any]], database: str) -> list[dict[str, Any]]:
    for row in rows:
        row["database"], row["window_ms"] = database, DEFAULT_WINDOW_MS
    return rows


def _key(r: dict[str, Any]) -> tuple[Any, ...]:
    return r["database"], r["words"], r["visitors"], r.get("window_ms", DEFAULT_WINDOW_MS)


def pairs(rows: list[dict[str, Any]]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """(app, bare relay) measured in the same run: same database, length, level."""
    bare = {_key(r): r for r in rows if r["path"] == "/ws/bare/"}
    return [(r, bare[_key(r)]) for r in rows if r["path"] == "/ws/chat/" and _key(r) in bare]


def passes(rows: list[dict[str, Any]]) -> dict[tuple[Any, ...], dict[str, Any]]:
    """The pass-through's rows, by the key of the app's row in the same run."""
    return {_key(r): r for r in rows if r["path"] == "/ws/pass/"}


def goals(rows: list[dict[str, Any]]) -> list[tuple[str, str, bool]]:
    """The issue's done-when lines: (target, measured, met)."""
    found = []
    for app, bare in pairs(rows):
        if app["visitors"] != GOAL_VISITORS or app["words"] != LONG_WORDS or app["window_ms"] != DEFAULT_WINDOW_MS:
            continue
        ratio = app["cpu_us_per_char"] / bare["cpu_us_per_char"]
        errors = app["errors"] + bare["errors"]
        found += [
            (
                f"200 visitors, 200-word answers after a search, one daphne process, {app['database']}: CPU per"
                f" answer character at most {GOAL_RATIO:.0f}x a bare relay's (one frame per provider chunk)",
                f"{ratio:.2f}x ({app['cpu_us_per_char']:.1f} / {bare['cpu_us_per_char']:.1f} us)",
                ratio <= GOAL_RATIO,
            ),
            (
                f"... first delta p99 within the provider's time to first token + 250 ms ({GOAL_FIRST_DELTA_MS} ms),"
                " 0 errors",
                f"{app['first_delta_p99_ms']:.0f} ms, {errors} errors",
                app["first_delta_p99_ms"] <= GOAL_FIRST_DELTA_MS and not errors,
            ),
        ]
    return found


def section(rows: list[dict[str, Any]], charts: Path) -> str:
    lines = [
        "## 4b. Cost per character",
        "",
        "Visitors ask help questions back to back (each turn a search round, then the answer), against the bench"
        f" provider at {TTFT_MS} ms to first token and 40 chunks a second, served by one daphne process. Short"
        f" answers are the offline model's; long ones are padded to {LONG_WORDS} words. The bare relay, in the same"
        " process and run, sends the same visitors one frame per provider chunk of the same answers at the same"
        " pace, with no model, no search and no database: what sending the frames costs by itself (the pass-through,"
        " below, adds the model's streams). The app gathers"
        " the text that streams within `KOOKEE_DELTA_WINDOW_MS` (50 ms) of the last delta into one frame; the"
        " first delta never waits. CPU per character is the server's CPU in the window divided by the characters"
        " that arrived in it (whatever turn they belong to); CPU per help question is that times a question's"
        " characters.",
        "",
        "| database | answers | window | visitors | first delta p50 / p99, app | bare relay | CPU per character, app |"
        " bare | ratio | CPU per help question, app | bare | frames per answer, app | bare | errors |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for app, bare in sorted(
        pairs(rows), key=lambda p: (p[0]["database"] != "SQLite", -p[0]["words"], p[0]["window_ms"], p[0]["visitors"])
    ):
        ratio = app["cpu_us_per_char"] / bare["cpu_us_per_char"]
        lines.append(
            f"| {app['database']} | {'long' if app['words'] else 'short'} | {app['window_ms']} ms | {app['visitors']} |"
            f" {app['first_delta_p50_ms']:.0f} / {app['first_delta_p99_ms']:.0f} ms |"
            f" {bare['first_delta_p50_ms']:.0f} / {bare['first_delta_p99_ms']:.0f} ms |"
            f" {app['cpu_us_per_char']:.1f} us | {bare['cpu_us_per_char']:.1f} us | {ratio:.2f}x |"
            f" {app['cpu_ms_per_turn']:.1f} ms | {bare['cpu_ms_per_turn']:.1f} ms |"
            f" {app['frames'] / max(app['turns'], 1):.0f} | {bare['frames'] / max(bare['turns'], 1):.0f} |"
            f" {app['errors'] + bare['errors']} |"
        )
    lines += _split(rows)
    lines += _budget(rows)
    lines += ["", "| goal | measured | |", "| --- | --- | --- |"]
    lines += [f"| {goal} | {measured} | {'met' if met else '**missed**'} |" for goal, measured, met in goals(rows)]
    profiles = [
        (name, RESULTS / f"profile-per-char-{name.lower()}-200-ws-chat-raw")
        for name in ("SQLite", "PostgreSQL")
        if (RESULTS / f"profile-per-char-{name.lower()}-200-ws-chat-raw").exists()
    ]
    if profiles:
        lines += [
            "",
            "**Where the CPU goes at 200 visitors, long answers** (py-spy on the running server, the thread holding"
            " the interpreter's lock):",
            "",
            *table(profiles),
        ]
    return "\n".join(lines) + "\n"


def _budget(rows: list[dict[str, Any]]) -> list[str]:
    """The pass-through beside the app and the bare relay (long answers):
    what the goal of GOAL_RATIO x the bare relay leaves for the app's own
    work (storing, limits, billing, search, the hub), and what that work
    costs (the app's question less the pass-through's)."""
    through = passes(rows)
    lines = []
    for app, bare in sorted(pairs(rows), key=lambda p: (p[0]["database"] != "SQLite", p[0]["visitors"])):
        passed = through.get(_key(app))
        if passed is None or not passed.get("cpu_us_per_char"):
            continue
        per_char = passed["cpu_us_per_char"] / bare["cpu_us_per_char"]
        left = GOAL_RATIO * bare["cpu_ms_per_turn"] - passed["cpu_ms_per_turn"]
        lines.append(
            f"| {app['database']} | {app['visitors']} | {passed['cpu_us_per_char']:.1f} us | {per_char:.2f}x |"
            f" {passed['cpu_ms_per_turn']:.1f} ms | {passed['server_cpu_percent']:.0f}% |"
            f" {passed['first_delta_p99_ms']:.0f} ms | {left:.1f} ms |"
            f" {app['cpu_ms_per_turn'] - passed['cpu_ms_per_turn']:.1f} ms | {app['server_cpu_percent']:.0f}% |"
        )
    if not lines:
        return []
    return [
        "",
        "**The pass-through** (long answers; bench/relay.py), in the same process and run: the model's two rounds"
        " through the app's own round loop and provider (the official client, reads paced to the window), each"
        " delta straight to the socket as the app frames it; nothing stored, limited, billed or searched (the"
        " search round is answered from memory with what the real search answered). What the goal of"
        f" {GOAL_RATIO:.0f}x the bare relay leaves for the app's own work is {GOAL_RATIO:.0f}x the bare relay's"
        " question less the pass-through's; what that work costs is the app's question less the pass-through's.",
        "",
        "| database | visitors | pass-through, CPU per character | times the bare relay | CPU per question |"
        " server CPU | first delta p99 | the goal leaves for the app's own work | the app's own work costs |"
        " server CPU, app |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        *lines,
    ]


def _split(rows: list[dict[str, Any]]) -> list[str]:
    """A help question's cost as a fixed part and a part per character:
    from the short and the long answers at 50 visitors (no queueing), per
    database, for the app and the bare relay."""
    found = {(a["database"], a["words"]): (a, b) for a, b in pairs(rows) if a["visitors"] == 50}
    lines = []
    for database in ("SQLite", "PostgreSQL"):
        if (database, 0) not in found or (database, LONG_WORDS) not in found:
            continue
        parts = []
        for index, name in ((0, "the app"), (1, "the bare relay")):
            short, long = found[(database, 0)][index], found[(database, LONG_WORDS)][index]
            chars = [r["cpu_ms_per_turn"] * 1000 / r["cpu_us_per_char"] for r in (short, long)]
            per_char = (long["cpu_ms_per_turn"] - short["cpu_ms_per_turn"]) * 1000 / (chars[1] - chars[0])
            fixed = short["cpu_ms_per_turn"] - per_char * chars[0] / 1000
            parts.append(f"{name} {fixed:.1f} ms a question plus {per_char:.1f} us a character")
        lines.append(f"- {database}, 50 visitors: " + "; ".join(parts) + ".")
    if not lines:
        return []
    return [
        "",
        "A question's cost, split into what it costs whatever its length and what each character adds"
        " (from the short and long answers at 50 visitors, where nothing queues):",
        "",
        *lines,
    ]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--levels", type=int, nargs="+", default=LEVELS)
    parser.add_argument("--sqlite-only", action="store_true")
    args = parser.parse_args()
    rows = suite(args.seconds, args.levels, postgres=not args.sqlite_only and _reachable(5432))
    for goal, measured, met in goals(rows):
        print(f"{'met' if met else 'MISSED'}: {goal}: {measured}")


if __name__ == "__main__":
    main()
