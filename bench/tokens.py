"""Token benchmark: what a 30-turn analysis conversation costs, against a naive loop.

A scripted analyst (FakeAnthropic, which reports prompt-cache reads and writes from the cache
breakpoints it receives) talks to the REAL AgentLoop on a temporary SQLite thread store with the
real hook chain -- refocus, compression (with token accounting), prompt caching, dangling-call
patch -- and a SQL tool returning 120-360 rows through the real tool pipeline. Every turn runs
one to three queries (every other one with ``output_level="full"``, i.e. all rows inline) and
writes a Markdown answer; some questions are in Chinese. The model is a 200k-window one, so the
conversation crosses the compression threshold (the naive loop's last request would not fit).

The same script then runs through a naive loop (no hooks: everything resent, nothing cached,
nothing compressed). Both print input tokens, the cache read/write split, and billed-token
equivalents (input + 1.25 x cache write + 0.1 x cache read), summarizer calls included.

Targets: at least 4x cheaper than naive, and >= 85 % of input tokens read from cache from
turn 2 on. The last line reads ``<R>x cheaper than naive, <S>% of input tokens from cache``.

    .venv/bin/python bench/tokens.py [--turns 30] [--model claude-haiku-4-5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from anthropic import AsyncAnthropic  # noqa: E402
from pydantic import BaseModel, Field  # noqa: E402

from agent_core.config import AgentConfig  # noqa: E402
from agent_core.hooks import Hook  # noqa: E402
from agent_core.hooks.caching import PromptCachingHook  # noqa: E402
from agent_core.hooks.compression import CompressionHook  # noqa: E402
from agent_core.hooks.dangling import DanglingToolCallPatch  # noqa: E402
from agent_core.hooks.refocus import RefocusHook  # noqa: E402
from agent_core.loop import AgentLoop  # noqa: E402
from agent_core.messages import Role, StandardMessage, TextBlock, ThreadKey  # noqa: E402
from agent_core.model import ModelClient, ModelResponse  # noqa: E402
from agent_core.prompts import system_prompt  # noqa: E402
from agent_core.state import ThreadState  # noqa: E402
from agent_core.store.db import create_engine, session_factory  # noqa: E402
from agent_core.store.threads import ThreadStore  # noqa: E402
from agent_core.tokens import billed_input_tokens  # noqa: E402
from agent_core.tools.base import Tool, ToolContext, ToolRegistry  # noqa: E402
from agent_core.tools.catalog import tools_prompt_section  # noqa: E402
from agent_core.tools.todo import TodoTool  # noqa: E402
from gateway.migrate import upgrade  # noqa: E402
from tests.fakes.anthropic_api import FakeAnthropic, Reply, text, tool_use  # noqa: E402

SUMMARY_MARK = "You maintain the running summary"
REGIONS = ["East", "North", "South", "West", "Central", "Northeast", "Southwest"]
CATEGORIES = ["Apparel", "Beauty", "Electronics", "Food", "Home", "Sports", "Toys", "Books", "Pets"]
CHANNELS = ["app", "web", "mini-program", "offline", "partner"]
QUESTIONS = [
    "Why did GMV drop last week in the East region?",
    "Break that down by category and channel.",
    "上个月华东区的退款率为什么上升了？",
    "Compare average order value across regions for May.",
    "Which categories drove the growth in the app channel?",
    "Show me the daily trend of orders for the last 60 days.",
    "按渠道拆分一下新客和老客的GMV占比。",
    "Is the refund spike concentrated in a few merchants?",
    "What does conversion look like by device type?",
    "Forecast next week's GMV for the top three categories.",
]


class SqlInput(BaseModel):
    query: str = Field(..., description="A read-only SQL query.")


class WarehouseSql(Tool[SqlInput]):
    """Returns rows shaped like the query asked for: daily series, breakdowns, merchant lists."""

    name = "sql_query"
    description = "Run a read-only SQL query against the sales warehouse and return the rows."
    Input = SqlInput

    async def run(self, args: SqlInput, ctx: ToolContext) -> list[dict[str, Any]]:
        seed = sum(args.query.encode())
        rng = random.Random(seed)
        rows = rng.choice([120, 240, 360])
        return [
            {
                "day": f"2024-{4 + i // 30:02d}-{i % 30 + 1:02d}",
                "region": REGIONS[i % len(REGIONS)],
                "category": CATEGORIES[(i * 7) % len(CATEGORIES)],
                "channel": CHANNELS[(i * 3) % len(CHANNELS)],
                "orders": rng.randint(400, 2400),
                "gmv": round(rng.uniform(50_000, 400_000), 2),
                "refund_rate": round(rng.uniform(0.01, 0.09), 4),
                "aov": round(rng.uniform(90, 420), 2),
                "new_customer_share": round(rng.uniform(0.1, 0.5), 3),
            }
            for i in range(rows)
        ]


def answer_text(turn: int) -> str:
    rng = random.Random(turn)
    lines = [
        f"**GMV moved {rng.uniform(-9, 9):+.1f}%** week over week; most of it comes from "
        f"{rng.choice(REGIONS)} / {rng.choice(CATEGORIES)} in the {rng.choice(CHANNELS)} channel.",
        "",
        "| segment | this week | last week | change |",
        "| --- | --- | --- | --- |",
    ]
    for _ in range(6):
        now, before = rng.uniform(1e5, 9e5), rng.uniform(1e5, 9e5)
        lines.append(
            f"| {rng.choice(REGIONS)} · {rng.choice(CATEGORIES)} | {now:,.0f} | {before:,.0f} | "
            f"{(now - before) / before:+.1%} |"
        )
    lines += [
        "",
        "Caveats: refunds are booked on the refund date, so the latest two days will still move; "
        "the offline channel reports with a one-day lag.",
    ]
    return "\n".join(lines)


def _is_request(message: dict[str, Any]) -> bool:
    """A message the user wrote: not tool results, not the summary standing in for old ones."""
    return any(
        b.get("type") == "text" and not b["text"].startswith("<conversation_summary>")
        for b in message["content"]
    ) and not any(b.get("type") == "tool_result" for b in message["content"])


def analyst(body: dict[str, Any]) -> Reply:
    """The scripted model: one or two queries per question (some FULL), then an answer."""
    if SUMMARY_MARK in json.dumps(body.get("system")):
        sections = [
            "## User intent\n- Explain the GMV and refund movements by region, category and channel.",
            "## Key decisions and definitions\n- GMV excludes refunds; weeks start on Monday.",
            "## Tool outcomes and data files\n- Daily series and breakdowns; complete data in /data/.",
            "## Open questions\n- Whether the refund spike is merchant-specific.",
            "## Next steps\n- Break down conversion by device; forecast top categories.",
        ]
        return Reply([text("\n\n".join(sections))])
    messages = body["messages"]
    requests = [i for i, m in enumerate(messages) if m["role"] == "user" and _is_request(m)]
    turn = len(requests)
    done = sum(1 for m in messages[requests[-1] :] for b in m["content"] if b.get("type") == "tool_result")
    if done < 1 + turn % 3:  # one to three queries per question
        query = (
            f"SELECT day, region, category, channel, SUM(orders) AS orders, SUM(gmv) AS gmv, "
            f"AVG(refund_rate) AS refund_rate, AVG(aov) AS aov, AVG(new_customer_share) AS ncs "
            f"FROM sales_daily WHERE day >= DATE '2024-04-01' /* turn {turn} step {done} */ "
            f"GROUP BY 1, 2, 3, 4 ORDER BY 1"
        )
        args: dict[str, Any] = {"query": query}
        if (turn + done) % 2 == 0:  # every other query asks for the complete rows
            args["output_level"] = "full"
        return Reply([text("Let me query the daily sales table."), tool_use("sql_query", args)])
    return Reply([text(answer_text(turn))])


@dataclass
class Tally:
    """Usage of every model call, by turn (the bench sets `turn` before each one)."""

    turn: int = 0
    calls: list[tuple[int, int, int, int, int]] = field(default_factory=list)  # turn, in, read, write, out

    def add(self, response: ModelResponse) -> None:
        u = response.usage
        self.calls.append(
            (self.turn, u.input_tokens, u.cache_read_tokens, u.cache_write_tokens, u.output_tokens)
        )

    def totals(self, from_turn: int = 1) -> tuple[int, int, int]:
        rows = [c for c in self.calls if c[0] >= from_turn]
        return sum(c[1] for c in rows), sum(c[2] for c in rows), sum(c[3] for c in rows)


class TallyHook(Hook):
    def __init__(self, tally: Tally) -> None:
        self.tally = tally

    async def after_model(self, response: ModelResponse, ctx: ToolContext) -> None:
        self.tally.add(response)


@dataclass
class Outcome:
    tally: Tally
    state: ThreadState
    stored_messages: int


async def run(workdir: Path, *, turns: int, model_name: str, naive: bool) -> Outcome:
    """The scripted conversation through the real loop; `naive` drops every hook but the tally."""
    url = f"sqlite:///{workdir / ('naive.db' if naive else 'agent.db')}"
    upgrade(url)
    engine = create_engine(url)
    store = ThreadStore(session_factory(engine))
    tally = Tally()
    tally_hook = TallyHook(tally)
    data_dir = workdir / ("naive-data" if naive else "data")
    prompt = system_prompt(tools_prompt_section(AgentConfig(model=model_name, data_dir=data_dir)))
    async with FakeAnthropic(min_cacheable_tokens=1024) as fake:
        fake.respond_with(analyst)
        client = AsyncAnthropic(base_url=fake.base_url, api_key="bench", max_retries=0)
        model = ModelClient(client, model_name, 4096)
        tools = ToolRegistry([WarehouseSql(), TodoTool()])
        hooks: list[Hook] = [tally_hook]
        if not naive:  # compression, then the reminder it must not drop, then caching; telemetry last
            compressor = CompressionHook(model, store=store, telemetry=tally_hook)
            hooks = [compressor, RefocusHook(), PromptCachingHook(), DanglingToolCallPatch(store), tally_hook]
        loop = AgentLoop(model, tools, store, prompt, hooks=hooks)
        thread = await store.open(ThreadKey(platform="slack", workspace="T1", channel="C1", root="1.1"))
        try:
            for turn in range(1, turns + 1):
                tally.turn = turn
                question = QUESTIONS[(turn - 1) % len(QUESTIONS)]
                message = StandardMessage(
                    thread_id=thread, role=Role.USER, content=[TextBlock(text=f"[from Dana] {question}")]
                )
                ctx = ToolContext(thread_id=thread, data_dir=data_dir, channel="C1", user="U1")
                await loop.run_turn(thread, message, event_key=f"ev{turn}", ctx=ctx)
            return Outcome(tally, await store.load_state(thread), len(await store.history(thread)))
        finally:
            await client.close()
            await engine.dispose()


def report(name: str, tally: Tally) -> float:
    tin, read, write = tally.totals()
    total = tin + read + write
    billed = billed_input_tokens(tin, write, read)
    last = sum(tally.calls[-1][1:4])
    print(
        f"{name:6} calls {len(tally.calls):3d}  input tokens {total:>10,} (uncached {tin:>9,}, "
        f"cache read {read:>10,}, cache write {write:>8,})  billed equivalents {billed:>10,.0f}  "
        f"last request {last:>7,}"
    )
    return billed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=30)
    # A 200k-window model, so the conversation reaches the compression threshold.
    parser.add_argument("--model", default="claude-haiku-4-5")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ours = await run(Path(tmp), turns=args.turns, model_name=args.model, naive=False)
        naive = await run(Path(tmp), turns=args.turns, model_name=args.model, naive=True)
    context = ours.state.context
    print(
        f"{args.turns}-turn analysis conversation on {args.model}: {ours.stored_messages} stored messages; "
        f"results before #{context.pruned_before} pruned, {ours.state.usage.compression_events} summaries"
    )
    billed = report("agent", ours.tally)
    billed_naive = report("naive", naive.tally)
    tin, read, write = ours.tally.totals(from_turn=2)
    share = read / (tin + read + write)
    print(f"from turn 2 on, summarizer calls included: {share:.1%} of input tokens read from cache")
    print(f"{billed_naive / billed:.1f}x cheaper than naive, {share * 100:.1f}% of input tokens from cache")


if __name__ == "__main__":
    asyncio.run(main())
