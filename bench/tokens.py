"""Token benchmark: what a 30-turn analysis conversation costs, against a fair baseline.

A scripted analyst (FakeAnthropic, which reports prompt-cache reads and writes from the cache
breakpoints it receives, on a simulated clock) talks to the REAL AgentLoop on a temporary SQLite
thread store with the real hook chain -- compression (with token accounting), refocus, prompt
caching, dangling-call patch -- and a SQL tool returning 120-360 rows through the real tool
pipeline. Every turn runs one to three queries (every other one with ``output_level="full"``,
i.e. all rows inline) and writes a Markdown answer; some questions are in Chinese. The model is
a 200k-window one, so the conversation outgrows the window.

The baseline is the same loop as a careful simple implementation would run it: default
(5-minute) prompt caching, and the oldest turns dropped when the request would not fit the
window. People pause between questions, so the conversation runs on a simulated clock: each
model call takes 5 s, and between questions the user thinks for a while -- 10 s (back to back),
a fixed 2 to 10 minutes, or a random 2-10 minutes -- so a 5-minute cache expires between some
questions. Each loop runs with 5-minute and with 1-hour cache breakpoints (the TTL set on the
wire, as the API takes it). Billed equivalents of plain input tokens: input + cache write x
1.25 (5 min) or x 2 (1 h) + cache read x 0.1, summarizer calls included.

Targets: the agent at least 2x cheaper than the baseline at 2-10 minute pauses, and >= 85 % of
input tokens read from cache from turn 2 on when back to back. The table shows from which pause
on a 1-hour TTL pays for itself.

    .venv/bin/python bench/tokens.py [--turns 30] [--model claude-haiku-4-5] [--pauses 0.17,2,4,6,8,10,2-10]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import tempfile
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx2 as httpx  # noqa: E402 - the HTTP client the Anthropic SDK is built on
from anthropic import AsyncAnthropic  # noqa: E402
from pydantic import BaseModel, Field  # noqa: E402

from agent_core.config import AgentConfig, CompressionConfig  # noqa: E402
from agent_core.hooks import Hook  # noqa: E402
from agent_core.hooks.caching import PromptCachingHook  # noqa: E402
from agent_core.hooks.compression import CompressionHook  # noqa: E402
from agent_core.hooks.dangling import DanglingToolCallPatch  # noqa: E402
from agent_core.hooks.refocus import RefocusHook  # noqa: E402
from agent_core.hooks.usage import UsageHook  # noqa: E402
from agent_core.loop import AgentLoop  # noqa: E402
from agent_core.messages import Role, StandardMessage, TextBlock, ThreadKey  # noqa: E402
from agent_core.model import ModelClient, ModelResponse, api_body  # noqa: E402
from agent_core.prompts import system_prompt  # noqa: E402
from agent_core.request import ModelRequest  # noqa: E402
from agent_core.run_context import RunContext, RunDeps  # noqa: E402
from agent_core.state import ThreadState  # noqa: E402
from agent_core.store.db import create_engine, session_factory  # noqa: E402
from agent_core.store.threads import ThreadStore  # noqa: E402
from agent_core.tokens.prices import ModelTable  # noqa: E402
from agent_core.toolkit.pipeline import ToolPipeline  # noqa: E402
from agent_core.toolkit.protocol import Tool  # noqa: E402
from agent_core.tools.standard import tools_prompt_section  # noqa: E402
from agent_core.tools.todo import TodoTool  # noqa: E402
from gateway.migrate import upgrade  # noqa: E402
from tests.fakes.anthropic_api import FakeAnthropic, Reply, estimate_tokens, text, tool_use  # noqa: E402

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

    async def run(self, args: SqlInput, ctx: RunContext) -> list[dict[str, Any]]:
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

    async def after_model(self, response: ModelResponse, ctx: RunContext) -> None:
        self.tally.add(response)


CALL_SECONDS = 5.0  # one model call (and its tool run), on the simulated clock
EPOCH = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)  # when the simulated conversation starts
MAX_OUTPUT = 4096
WRITE_PRICE = {"5m": 1.25, "1h": 2.0}  # cache writes, in plain-input prices; reads cost 0.1


class SimulatedClock:
    """Seconds since the conversation began; the fake API's cache and the compressor read it."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def now(self) -> float:
        return self.seconds

    def datetime(self) -> datetime:
        return EPOCH + timedelta(seconds=self.seconds)


class ClockHook(Hook):
    """Each model call takes `CALL_SECONDS` of the user's time."""

    def __init__(self, clock: SimulatedClock) -> None:
        self.clock = clock

    async def after_model(self, response: ModelResponse, ctx: RunContext) -> None:
        self.clock.seconds += CALL_SECONDS


class TruncateToWindow(Hook):
    """The baseline's context management: drop the oldest whole turns until the request fits."""

    def __init__(self, window: int, reserve: int) -> None:
        self.limit = window - reserve

    async def before_model(self, request: ModelRequest, history: list[StandardMessage], ctx: RunContext) -> ModelRequest:
        messages = request.messages
        while estimate_tokens(api_body(replace(request, messages=messages), "m", 1)) > self.limit:
            starts = [i for i, m in enumerate(messages) if i and m["role"] == "user" and _is_request(m)]
            if not starts:
                break
            messages = messages[starts[0]:]
        return replace(request, messages=messages)


class CacheTtl(httpx.AsyncBaseTransport):
    """Sets `ttl` on every cache breakpoint of a Messages request, as the API takes it."""

    def __init__(self, ttl: str) -> None:
        self.ttl = ttl
        self._inner = httpx.AsyncHTTPTransport()

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if request.method == "POST" and request.url.path.endswith("/messages"):
            body = json.loads(request.content)
            _set_ttl(body, self.ttl)
            headers = [(k, v) for k, v in request.headers.items() if k.lower() != "content-length"]
            request = httpx.Request("POST", request.url, headers=headers, content=json.dumps(body).encode())
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def _set_ttl(node: Any, ttl: str) -> None:
    if isinstance(node, dict):
        if isinstance(node.get("cache_control"), dict):
            node["cache_control"] = {**node["cache_control"], "ttl": ttl}
        for value in node.values():
            _set_ttl(value, ttl)
    elif isinstance(node, list):
        for value in node:
            _set_ttl(value, ttl)


@dataclass(frozen=True)
class Pause:
    """The user's think time between questions: fixed, or uniform between two bounds (minutes)."""

    low_min: float
    high_min: float

    @classmethod
    def parse(cls, text: str) -> Pause:
        low, _, high = text.partition("-")
        return cls(float(low), float(high or low))

    def label(self) -> str:
        if self.high_min == self.low_min:
            return f"{self.low_min * 60:.0f} s" if self.low_min < 1 else f"{self.low_min:g} min"
        return f"{self.low_min:g}-{self.high_min:g} min"

    def seconds(self, rng: random.Random) -> float:
        return rng.uniform(self.low_min, self.high_min) * 60


@dataclass
class Outcome:
    tally: Tally
    state: ThreadState
    stored_messages: int
    ttl: str

    def billed(self, from_turn: int = 1) -> float:
        tin, read, write = self.tally.totals(from_turn)
        return tin + WRITE_PRICE[self.ttl] * write + 0.1 * read

    def cache_share(self, from_turn: int = 2) -> float:
        tin, read, write = self.tally.totals(from_turn)
        return read / max(tin + read + write, 1)


async def run(workdir: Path, *, turns: int, model_name: str, baseline: bool, ttl: str, pause: Pause) -> Outcome:
    """The scripted conversation through the real loop, with the agent's hooks or the baseline's."""
    name = f"{'baseline' if baseline else 'agent'}-{ttl}-{pause.label().replace(' ', '')}"
    url = f"sqlite:///{workdir / f'{name}.db'}"
    upgrade(url)
    engine = create_engine(url)
    store = ThreadStore(session_factory(engine))
    clock = SimulatedClock()
    tally = Tally()
    tally_hook = TallyHook(tally)
    data_dir = workdir / name
    prompt = system_prompt(tools_prompt_section(AgentConfig(model=model_name, data_dir=data_dir)))
    rng = random.Random(f"{pause.label()}")  # the same pauses for every loop
    async with FakeAnthropic(clock=clock.now, min_cacheable_tokens=1024) as fake:
        fake.respond_with(analyst)
        http = httpx.AsyncClient(transport=CacheTtl(ttl))
        client = AsyncAnthropic(base_url=fake.base_url, api_key="bench", max_retries=0, http_client=http)
        model = ModelClient(client, model_name, MAX_OUTPUT)
        tools = ToolPipeline([WarehouseSql(), TodoTool()])
        timing = ClockHook(clock)
        hooks: list[Hook]
        if baseline:
            window = ModelTable().get(model_name).context_window
            hooks = [TruncateToWindow(window, MAX_OUTPUT + 1024), PromptCachingHook(), DanglingToolCallPatch(store),
                     timing, tally_hook]
        else:  # the agent's order: compression, then the reminder it must not drop, then caching
            usage = UsageHook()
            compressor = CompressionHook(
                model, store=store, summary_observers=[usage, timing, tally_hook], clock=clock.datetime,
                config=CompressionConfig(cache_ttl_s=3600.0 if ttl == "1h" else 300.0),
            )
            hooks = [compressor, RefocusHook(), PromptCachingHook(), DanglingToolCallPatch(store), usage, timing,
                     tally_hook]
        loop = AgentLoop(model, tools, store, prompt, hooks=hooks)
        thread = await store.open(ThreadKey(platform="slack", workspace="T1", channel="C1", root="1.1"))
        try:
            for turn in range(1, turns + 1):
                if turn > 1:
                    clock.seconds += pause.seconds(rng)
                tally.turn = turn
                question = QUESTIONS[(turn - 1) % len(QUESTIONS)]
                message = StandardMessage(
                    thread_id=thread, role=Role.USER, content=[TextBlock(text=f"[from Dana] {question}")]
                )
                deps = RunDeps(thread_id=thread, data_dir=data_dir, channel="C1", user="U1")
                await loop.run_turn(thread, message, event_key=f"ev{turn}", deps=deps)
            return Outcome(tally, await store.load_state(thread), len(await store.history(thread)), ttl)
        finally:
            await client.close()
            await engine.dispose()


def usage_line(name: str, outcome: Outcome) -> str:
    tin, read, write = outcome.tally.totals()
    last = sum(outcome.tally.calls[-1][1:4])
    return (f"{name:14} calls {len(outcome.tally.calls):3d}  uncached {tin:>9,}  cache read {read:>10,}  "
            f"cache write {write:>9,}  billed {outcome.billed():>10,.0f}  last request {last:>7,}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=30)
    # A 200k-window model, so the conversation outgrows the window.
    parser.add_argument("--model", default="claude-haiku-4-5")
    parser.add_argument("--pauses", default="0.17,2,4,6,8,10,2-10",
                        help="think times between questions, minutes: fixed (4) or a uniform range (2-10)")
    args = parser.parse_args()
    pauses = [Pause.parse(p) for p in args.pauses.split(",")]
    results: dict[tuple[str, str, str], Outcome] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for pause in pauses:
            for baseline in (True, False):
                for ttl in ("5m", "1h"):
                    outcome = await run(Path(tmp), turns=args.turns, model_name=args.model, baseline=baseline,
                                        ttl=ttl, pause=pause)
                    results[("baseline" if baseline else "agent", ttl, pause.label())] = outcome
    print(f"{args.turns}-turn analysis conversation on {args.model}, billed input in plain-token equivalents "
          f"(thousands); cache write x1.25 (5 min) / x2 (1 h), read x0.1")
    print(f"{'pause':>10} | {'baseline 5m':>11} {'baseline 1h':>11} | {'agent 5m':>9} {'agent 1h':>9} | "
          f"{'agent vs baseline':>17} | {'1 h TTL saves':>13}")
    for pause in pauses:
        label = pause.label()
        b5, b1, a5, a1 = (results[(side, ttl, label)].billed()
                          for side, ttl in (("baseline", "5m"), ("baseline", "1h"), ("agent", "5m"), ("agent", "1h")))
        best_agent, best_baseline = min(a5, a1), min(b5, b1)
        print(f"{label:>10} | {b5 / 1000:11,.0f} {b1 / 1000:11,.0f} | {a5 / 1000:9,.0f} {a1 / 1000:9,.0f} | "
              f"{best_baseline / best_agent:16.1f}x | {1 - a1 / a5:12.0%}")
    first, last = pauses[0].label(), pauses[-1].label()
    print(f"\nusage at {first} pauses:")
    for side in ("baseline", "agent"):
        for ttl in ("5m", "1h"):
            print("  " + usage_line(f"{side} {ttl}", results[(side, ttl, first)]))
    agent = results[("agent", "5m", first)]
    context = agent.state.context
    print(f"agent: {agent.stored_messages} stored messages; results before #{context.pruned_before} pruned, "
          f"{agent.state.usage.compression_events} summaries")
    share = agent.cache_share()
    verdict = (min(results[("baseline", t, last)].billed() for t in ("5m", "1h"))
               / min(results[("agent", t, last)].billed() for t in ("5m", "1h")))
    print(f"{verdict:.1f}x cheaper than the baseline at {last} pauses; {share * 100:.1f}% of input tokens "
          f"from cache from turn 2 on at {first} pauses")


if __name__ == "__main__":
    asyncio.run(main())
