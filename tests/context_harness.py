"""A real AgentLoop on SQLite with the context hooks, driven by FakeAnthropic (shared by the
token, compression, refocus and memory tests and the token benchmark)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from anthropic import AsyncAnthropic
from pydantic import BaseModel, Field

from agent_core.config import CompressionConfig
from agent_core.context.summarizer import SUMMARY_SECTIONS
from agent_core.hooks import Hook
from agent_core.hooks.caching import PromptCachingHook
from agent_core.hooks.compression import CompressionHook
from agent_core.hooks.dangling import DanglingToolCallPatch
from agent_core.hooks.memory import MemoryHook
from agent_core.hooks.refocus import RefocusConfig, RefocusHook
from agent_core.hooks.usage import UsageHook
from agent_core.loop import AgentLoop, TurnResult
from agent_core.memory import MemoryStore
from agent_core.messages import Role, StandardMessage, TextBlock, ThreadKey
from agent_core.model import ModelClient
from agent_core.run_context import RunContext, RunDeps
from agent_core.store.db import create_engine, session_factory
from agent_core.store.threads import ThreadStore
from agent_core.tokens.estimate import TokenCounter
from agent_core.tokens.prices import ModelInfo, ModelTable
from agent_core.toolkit.pipeline import ToolPipeline
from agent_core.toolkit.protocol import Tool
from agent_core.tools.memory_tool import MemoryTool
from agent_core.tools.todo import TodoTool
from gateway.migrate import upgrade
from tests.fakes.anthropic_api import FakeAnthropic, Reply, text, tool_use

MODEL = "claude-sonnet-5-5"
SUMMARY_MARK = "You maintain the running summary"
REGIONS = ["East", "North", "South", "West", "Central"]
CATEGORIES = ["Apparel", "Beauty", "Electronics", "Food", "Home", "Sports", "Toys", "Books"]


class QueryInput(BaseModel):
    query: str = Field(..., description="SQL to run")


class FakeSqlTool(Tool[QueryInput]):
    """Returns `rows` realistic order-summary rows for any query."""

    name = "run_sql"
    description = "Run a read-only SQL query against the sales warehouse."
    Input = QueryInput

    def __init__(self, rows: int = 40) -> None:
        self.rows = rows

    async def run(self, args: QueryInput, ctx: RunContext) -> list[dict[str, Any]]:
        return [
            {
                "day": f"2024-05-{i % 28 + 1:02d}",
                "region": REGIONS[i % len(REGIONS)],
                "category": CATEGORIES[i % len(CATEGORIES)],
                "orders": 800 + (i * 37) % 400,
                "gmv": round(120_000 + (i * 7919) % 50_000 + 0.25 * i, 2),
                "refunds": round(2_000 + (i * 131) % 900 + 0.5, 2),
                "aov": round(150 + (i * 13) % 40 + 0.33, 2),
            }
            for i in range(self.rows)
        ]


def summary_reply(body: dict[str, Any]) -> Reply:
    """What the fake summarizer answers: every section, echoing the transcript's numbering."""
    prompt = body["messages"][-1]["content"][0]["text"]
    numbers = [line.split(" ", 1)[0] for line in prompt.splitlines() if line.startswith("#")]
    sections = "\n\n".join(f"## {s}\n- point about {s.lower()}" for s in SUMMARY_SECTIONS)
    span = f"{numbers[0]} to {numbers[-1]}" if numbers else "-"
    return Reply([text(f"{sections}\n\n(covers {span})")])


def analyst(body: dict[str, Any]) -> Reply:
    """A scripted analyst: a query for every user request, then an answer."""
    if SUMMARY_MARK in json.dumps(body.get("system")):
        return summary_reply(body)
    last = body["messages"][-1]["content"]
    if any(block.get("type") == "tool_result" for block in last):
        return Reply([text("GMV fell 4.2% week over week, mostly in the East region (Apparel -11%).")])
    return Reply(
        [
            tool_use(
                "run_sql", {"query": "SELECT day, region, category, SUM(gmv) FROM orders GROUP BY 1, 2, 3"}
            )
        ]
    )


class Clock:
    """A settable clock for the hooks (cache expiry) -- the fake API keeps real time."""

    def __init__(self) -> None:
        self.now = datetime(2024, 6, 1, 9, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, **delta: float) -> None:
        self.now += timedelta(**delta)


@dataclass
class Rig:
    fake: FakeAnthropic
    store: ThreadStore
    sessions: Any
    loop: AgentLoop
    model: ModelClient
    data_dir: Path
    clock: Clock
    compression: CompressionHook
    events: int = 0
    threads: dict[str, str] = field(default_factory=dict)

    async def thread(self, channel: str = "C1", root: str = "1.1", dm_owner: str | None = None) -> str:
        key = ThreadKey(platform="slack", workspace="T1", channel=channel, root=root)
        thread_id = await self.store.open(key, dm_owner=dm_owner)
        self.threads[str(key)] = thread_id
        return thread_id

    async def say(
        self, thread_id: str, words: str, *, user: str = "U1", channel: str = "C1", is_dm: bool = False
    ) -> TurnResult:
        self.events += 1
        message = StandardMessage(thread_id=thread_id, role=Role.USER, content=[TextBlock(text=words)])
        deps = RunDeps(thread_id=thread_id, data_dir=self.data_dir, channel=channel, user=user, is_dm=is_dm)
        return await self.loop.run_turn(thread_id, message, event_key=f"ev{self.events}", deps=deps)

    def main_requests(self) -> list[dict[str, Any]]:
        """Bodies of the agent's own requests (summarizer calls left out)."""
        return [r.body for r in self.fake.requests if SUMMARY_MARK not in json.dumps(r.body.get("system"))]

    def summary_requests(self) -> list[dict[str, Any]]:
        return [r.body for r in self.fake.requests if SUMMARY_MARK in json.dumps(r.body.get("system"))]


@asynccontextmanager
async def rig(
    tmp_path: Path,
    *,
    window: int = 200_000,
    compression: CompressionConfig | None = None,
    refocus: RefocusConfig | None = None,
    memory: bool = False,
    rows: int = 40,
    responder: Callable[[dict[str, Any]], Reply] = analyst,
    min_cacheable_tokens: int = 0,
    extra_tools: list[Tool] | None = None,
    database_url: str | None = None,
) -> AsyncIterator[Rig]:
    """The context hooks around a real AgentLoop, in the order they must run.

    `database_url`: an empty migrated database (default: a new SQLite file in `tmp_path`).
    """
    url = database_url or f"sqlite:///{tmp_path / 'agent.db'}"
    if database_url is None:
        upgrade(url)
    engine = create_engine(url)
    sessions = session_factory(engine)
    store = ThreadStore(sessions)
    data_dir = tmp_path / "data"
    clock = Clock()
    async with FakeAnthropic(min_cacheable_tokens=min_cacheable_tokens) as fake:
        fake.respond_with(responder)
        client = AsyncAnthropic(base_url=fake.base_url, api_key="test", max_retries=0)
        model = ModelClient(client, MODEL, 1024)
        models = ModelTable({MODEL: ModelInfo(context_window=window)})
        usage = UsageHook(models)
        compressor = CompressionHook(
            model,
            config=compression,
            counter=TokenCounter(),
            models=models,
            store=store,
            summary_observers=[usage],
            clock=clock,
        )
        memory_store = MemoryStore(data_dir / "memory")
        tools: list[Tool] = [FakeSqlTool(rows), TodoTool(), *(extra_tools or [])]
        if memory:
            tools.append(MemoryTool(memory_store, sessions))
        # The order agent_core.agent should use: compression rewrites the message list, so the
        # reminder (which decorates it) comes after it, and caching last.
        hooks: list[Hook] = [MemoryHook(memory_store, sessions)] if memory else []
        hooks += [compressor, RefocusHook(refocus), PromptCachingHook(), DanglingToolCallPatch(store), usage]
        loop = AgentLoop(
            model, ToolPipeline(tools), store, "You are BA-Agent, a business-analysis assistant.", hooks=hooks
        )
        try:
            yield Rig(fake, store, sessions, loop, model, data_dir, clock, compressor)
        finally:
            await client.close()
            await engine.dispose()
