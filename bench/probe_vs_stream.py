"""Probe-then-stream versus one stream per round: what the naive loop costs.

The tempting tool loop (docs: "never probe, then stream") asks the model
without streaming whether it wants a tool, runs the tools and asks again, and
when an answer finally comes without tool calls, throws it away and asks once
more, streamed, for the text the visitor sees. The product's loop
(`chat.engine.rounds.RoundLoop` over `chat.engine.provider.open_stream`) streams every round
instead. Both run here against the same local provider process
(bench/provider.py, the offline model at 300 ms to first token and 40 tokens/s),
with the same system prompt, questions and `search_help_center` tool (a fixed
result, so no database is needed), one turn at a time.

For turns that need no tool (greetings, "what can you do?") and turns that
need one search, it measures per turn: model calls, input and output tokens
as the provider reports them, time to the first character the visitor would
see, and total time. Medians go to bench/results/probe_vs_stream.json, and
`section()` renders them for docs/benchmarks.md.

    .venv/bin/python bench/probe_vs_stream.py [repeats]
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from harness import ROOT, provider, save

from chat.engine.rounds import Round, RoundLoop, Tool
from chat.vocabulary import Status

TTFT_MS = 300
TOKENS_PER_SECOND = 40  # the product's default offline pace
REPEATS = 2  # each question this many times per loop: about 80 s in all
MODEL = "gpt-4o-mini"

# What the offline model answers directly, and what it searches for first.
KINDS = {
    "no_tool": ["hi", "What can you do?", "Hello!", "Who are you?", "Thanks!"],
    "one_tool": [
        "How do webhooks work?",
        "How do I get a refund?",
        "How do I install the feedback widget on my website?",
        "How do I export my data?",
        "How do I change my plan?",
    ],
}
KIND_LABELS = {"no_tool": "no tool", "one_tool": "one tool"}
LOOPS = {"probe": "probe then stream", "stream": "stream every round (ours)"}
METRICS = ["calls", "input_tokens", "output_tokens", "first_visible_ms", "total_ms"]

# A realistic search result, the same for every query: the provider answers
# from whatever articles the tool returns, and both loops then resend it.
SEARCH_RESULT = {
    "articles": [
        {
            "id": 1,
            "title": "Webhooks",
            "url": "/help/webhooks/",
            "snippet": "Webhooks send an HTTP POST to your endpoint when a post is created, "
            "voted on or changes status. Add an endpoint under Settings → Integrations.",
        },
        {
            "id": 2,
            "title": "Using the REST API",
            "url": "/help/rest-api/",
            "snippet": "Create an API key under Settings → API keys, then send it as a Bearer token.",
        },
        {
            "id": 3,
            "title": "Connecting Slack",
            "url": "/help/slack/",
            "snippet": "Get a Slack message for every new post or status change on the boards you pick.",
        },
    ]
}


async def _search_help_center(query: str) -> dict[str, Any]:
    return SEARCH_RESULT


def search_tool() -> Tool:
    """The product's search tool (its name, description and parameters, as
    the model sees them), answering with a fixed result so both loops get
    the same one. After Django's set-up: chat.engine.tools reads the database."""
    from chat.engine.tools import SEARCH_HELP_CENTER

    return dataclasses.replace(SEARCH_HELP_CENTER, run=_search_help_center)


def system_prompt() -> str:
    """The product's system prompt, with the demo help center's overview,
    read from the fixture rather than the database."""
    from chat.engine.prompt import IN_ENGLISH, SYSTEM_PROMPT

    articles = json.loads((ROOT / "helpcenter" / "fixtures" / "help_center.json").read_text())
    titles = [a["fields"]["title"] for a in articles if a["model"] == "helpcenter.article"]
    # The demo help center is in English.
    return SYSTEM_PROMPT.format(languages=IN_ENGLISH, overview="\n".join(f"- {title}" for title in titles))


def _measure(start: float, first: float | None, calls: int, usage: tuple[int, int], text: str) -> dict[str, Any]:
    end = time.perf_counter()
    return {
        "calls": calls,
        "input_tokens": usage[0],
        "output_tokens": usage[1],
        "first_visible_ms": round((first - start) * 1000, 1) if first is not None else None,
        "total_ms": round((end - start) * 1000, 1),
        "text": text,
    }


async def probe_then_stream(client: Any, messages: list[dict[str, Any]], max_rounds: int) -> dict[str, Any]:
    """The baseline, bench-only: non-streamed probes until the model stops
    asking for tools, then the same request again, streamed."""
    start = time.perf_counter()
    messages = list(messages)
    tool = search_tool()
    specs = [tool.spec()]
    calls, input_tokens, output_tokens = 0, 0, 0
    for _ in range(max_rounds):
        completion = await client.chat.completions.create(
            model=MODEL, messages=messages, tools=specs, tool_choice="auto"
        )
        calls += 1
        if completion.usage is not None:
            input_tokens += completion.usage.prompt_tokens
            output_tokens += completion.usage.completion_tokens
        message = completion.choices[0].message
        if not message.tool_calls:
            break  # an answer: the naive loop throws it away and asks again, streamed
        messages.append(
            {
                "role": "assistant",
                "content": message.content or None,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": call.function.name, "arguments": call.function.arguments},
                    }
                    for call in message.tool_calls
                ],
            }
        )
        for call in message.tool_calls:
            result = await tool.run(**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": json.dumps(result)})
    else:
        raise RuntimeError("the probes never stopped asking for tools")
    # Tools stay declared (the history has tool calls) but may not be called.
    stream = await client.chat.completions.create(
        model=MODEL,
        messages=messages,
        tools=specs,
        tool_choice="none",
        stream=True,
        stream_options={"include_usage": True},
    )
    calls += 1
    first, text = None, ""
    async for chunk in stream:
        if chunk.usage is not None:
            input_tokens += chunk.usage.prompt_tokens
            output_tokens += chunk.usage.completion_tokens
        for choice in chunk.choices:  # empty on the final usage chunk
            if choice.delta.content:
                first = first or time.perf_counter()
                text += choice.delta.content
    return _measure(start, first, calls, (input_tokens, output_tokens), text)


class _Sink:
    """Notes when the visitor would have seen the first character."""

    def __init__(self) -> None:
        self.first: float | None = None

    async def delta(self, text: str) -> None:
        self.first = self.first or time.perf_counter()

    async def tool(self, name: str, status: str) -> None:
        pass

    async def round_ended(self, rnd: Round, next_prompt_tokens: int) -> None:
        pass


async def stream_every_round(messages: list[dict[str, Any]], max_rounds: int) -> dict[str, Any]:
    """Ours: the product's round loop and provider code, as chat/engine/turns.py drives them."""
    from chat.engine import provider as chat_provider

    start = time.perf_counter()
    sink = _Sink()
    loop = RoundLoop(chat_provider.open_stream, [search_tool()], sink, max_rounds)
    outcome = await loop.run(messages)
    if outcome.status != Status.COMPLETED:
        raise RuntimeError(f"our loop ended {outcome.status}: {outcome.error} {outcome.detail}")
    usages = [rnd.usage for rnd in loop.rounds]
    if any(u.estimated for u in usages):
        raise RuntimeError("the provider did not report usage for every round")
    usage = (sum(u.input_tokens for u in usages), sum(u.output_tokens for u in usages))
    return _measure(start, sink.first, len(loop.rounds), usage, loop.text)


async def run_turns(base_url: str, repeats: int) -> list[dict[str, Any]]:
    import openai
    from django.conf import settings

    client = openai.AsyncOpenAI(base_url=f"{base_url}/v1", api_key="bench", max_retries=0)
    prompt = system_prompt()
    max_rounds = settings.KOOKEE_MAX_ROUNDS

    def messages(question: str) -> list[dict[str, Any]]:
        return [{"role": "system", "content": prompt}, {"role": "user", "content": question}]

    async def one(name: str, question: str) -> dict[str, Any]:
        if name == "probe":
            return await probe_then_stream(client, messages(question), max_rounds)
        return await stream_every_round(messages(question), max_rounds)

    # Warm both up (connections, lazy imports, client models) before measuring.
    for name in LOOPS:
        await one(name, KINDS["one_tool"][0])
    turns = []
    for repeat in range(repeats):
        for kind, questions in KINDS.items():
            for number, question in enumerate(questions):
                # Alternate which loop goes first, so neither always follows the other.
                order = list(LOOPS) if (repeat + number) % 2 == 0 else list(reversed(LOOPS))
                for name in order:
                    turn = await one(name, question)
                    turns.append({"loop": name, "kind": kind, "question": question, "repeat": repeat, **turn})
    await client.close()
    return turns


def check(turns: list[dict[str, Any]]) -> list[str]:
    """Both loops must end on the same answer, or the comparison is void."""
    problems = []
    by_key = {(t["loop"], t["question"], t["repeat"]): t for t in turns}
    for (name, question, repeat), turn in by_key.items():
        if name != "probe":
            continue
        ours = by_key[("stream", question, repeat)]["text"]
        # Ours also shows the search round's narration; the probe loop threw it away.
        if not turn["text"].strip() or not ours.rstrip().endswith(turn["text"].strip()):
            problems.append(f"different answers to {question!r}")
    return problems


def medians(turns: list[dict[str, Any]]) -> dict[str, dict[str, dict[str, float]]]:
    out: dict[str, dict[str, dict[str, float]]] = {}
    for name in LOOPS:
        for kind in KINDS:
            rows = [t for t in turns if t["loop"] == name and t["kind"] == kind]
            out.setdefault(name, {})[kind] = {m: statistics.median(t[m] for t in rows) for m in METRICS}
    return out


def setup_django(database: Path, provider_url: str) -> None:
    """Settings as an operator would run them, pointed at the bench provider.

    Assigned, not defaulted: a developer's .env with a real key must not
    send bench traffic to a real provider."""
    os.environ.update(
        {
            "DJANGO_SETTINGS_MODULE": "kookee.settings",
            "DJANGO_DEBUG": "false",
            "DJANGO_SECRET_KEY": "kookee-bench-only-" + "0123456789abcdef" * 4,
            "OPENAI_BASE_URL": f"{provider_url}/v1",
            "OPENAI_API_KEY": "bench",
            "OPENAI_MODEL": MODEL,
            "DATABASE_URL": f"sqlite:///{database}",
        }
    )
    import django

    django.setup()


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else REPEATS
    began = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp, provider(TTFT_MS, TOKENS_PER_SECOND) as (base_url, _):
        setup_django(Path(tmp) / "bench.sqlite3", base_url)
        turns = asyncio.run(run_turns(base_url, repeats))
    problems = check(turns)
    for text in problems:
        print(f"warning: {text}")
    data = {
        "provider": {"ttft_ms": TTFT_MS, "tokens_per_second": TOKENS_PER_SECOND},
        "repeats": repeats,
        "questions": KINDS,
        "problems": problems,
        "medians": medians(turns),
        "turns": [{k: v for k, v in t.items() if k != "text"} | {"visible_chars": len(t["text"])} for t in turns],
    }
    path = save("probe_vs_stream", data)
    print(f"{len(turns)} turns in {time.perf_counter() - began:.0f} s; medians per turn:")
    print(f"{'loop':<28}{'kind':<10}{'calls':>6}{'input':>8}{'output':>8}{'first ms':>10}{'total ms':>10}")
    for name, kinds in data["medians"].items():
        for kind, m in kinds.items():
            print(
                f"{LOOPS[name]:<28}{KIND_LABELS[kind]:<10}{m['calls']:>6g}{m['input_tokens']:>8g}"
                f"{m['output_tokens']:>8g}{m['first_visible_ms']:>10.0f}{m['total_ms']:>10.0f}"
            )
    print(f"wrote {path.relative_to(ROOT)}")


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.1f}x" if b else "n/a"


def section(results: dict[str, Any], charts: Path) -> str:
    """The docs/benchmarks.md section for saved results; renders only."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    m = results["medians"]
    pace = results["provider"]
    png = charts / "probe_vs_stream.png"
    charts.mkdir(parents=True, exist_ok=True)

    groups = [(kind, metric) for kind in KINDS for metric in ("first_visible_ms", "total_ms")]
    labels = [f"{KIND_LABELS[k]}\n{'first character' if x == 'first_visible_ms' else 'total'}" for k, x in groups]
    fig, ax = plt.subplots(figsize=(7, 3.5), dpi=100)
    width = 0.38
    for offset, name in ((-width / 2, "probe"), (width / 2, "stream")):
        values = [m[name][k][x] for k, x in groups]
        bars = ax.bar([i + offset for i in range(len(groups))], values, width, label=LOOPS[name])
        ax.bar_label(bars, fmt="%.0f", fontsize=7)
    ax.set_xticks(range(len(groups)), labels, fontsize=8)
    ax.set_ylabel("median ms")
    ax.set_title("Time to the first visible character and to the end of the turn", fontsize=9)
    ax.legend(fontsize=8, frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    fig.savefig(png)
    plt.close(fig)

    turns = results.get("turns") or []
    count = len(turns) // (len(LOOPS) * len(KINDS)) if turns else 0
    lines = [
        "## 1. Probe versus stream",
        "",
        "The naive probe-then-stream loop (non-streamed calls until the model stops asking for tools, then "
        "the same request again, streamed) against the product's round loop (one streamed call per round), "
        f"on the same local provider at {pace['ttft_ms']:g} ms to first token and {pace['tokens_per_second']:g} "
        f"tokens/s, with the same prompt, questions and search tool; medians of {count} turns per row, "
        "one turn at a time.",
        "",
        "| Loop | Turn | Model calls | Input tokens | Output tokens | First visible character (ms) | Total (ms) |",
        "|---|---|--:|--:|--:|--:|--:|",
    ]
    for name in LOOPS:
        for kind in KINDS:
            r = m[name][kind]
            lines.append(
                f"| {LOOPS[name]} | {KIND_LABELS[kind]} | {r['calls']:g} | {r['input_tokens']:,.0f} "
                f"| {r['output_tokens']:,.0f} | {r['first_visible_ms']:,.0f} | {r['total_ms']:,.0f} |"
            )
    clauses = []
    for kind in KINDS:
        p, s = m["probe"][kind], m["stream"][kind]
        clauses.append(
            f"on {KIND_LABELS[kind].replace(' ', '-')} turns the probe loop makes "
            f"{_ratio(p['calls'], s['calls'])} the calls, "
            f"bills {_ratio(p['input_tokens'], s['input_tokens'])} the input tokens and "
            f"{_ratio(p['output_tokens'], s['output_tokens'])} the output tokens, and shows its first character "
            f"{p['first_visible_ms'] - s['first_visible_ms']:,.0f} ms later "
            f"({_ratio(p['first_visible_ms'], s['first_visible_ms'])})"
        )
    lines += [
        "",
        f"{clauses[0][0].upper()}{clauses[0][1:]}; {clauses[1]}. On one-tool turns our first character is the "
        "search round's sentence of narration, which the probe loop generates too, then throws away.",
        "",
        f"![Median time to the first visible character and total time per loop and turn](benchmarks/{png.name})",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
