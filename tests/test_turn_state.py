"""Turn state shared with sub-agents: their tokens count in the conversation's usage and budget."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from agent_core.agent import build_agent
from agent_core.config import AgentConfig
from agent_core.loop import AgentLoop, TurnEnd, TurnResult
from agent_core.messages import Role, StandardMessage, TextBlock, ThreadKey
from agent_core.run_context import RunDeps
from agent_core.store.db import create_engine, session_factory
from agent_core.store.threads import ThreadStore
from gateway.migrate import upgrade
from tests.fakes.anthropic_api import FakeAnthropic, Reply, text, tool_use

SUBAGENT_OUTPUT = 60_000  # tokens each sub-agent's answer reports
PARENT_OUTPUT = 10


def respond(body: dict[str, Any]) -> Reply:
    """The parent hands two tasks to sub-agents, then answers; sub-agents answer at length."""
    if "working on one task for a colleague" in json.dumps(body["system"]):
        return Reply([text("East China GMV: 1.2M")], usage={"output_tokens": SUBAGENT_OUTPUT})
    if len(body["messages"]) == 1:
        tasks = [
            tool_use("task", {"description": f"GMV of {region} China in October", "subagent_type": "data-analyst"}, id=f"s{i}")
            for i, region in enumerate(["East", "West"])
        ]
        return Reply(tasks, usage={"output_tokens": PARENT_OUTPUT})
    return Reply([text("East beats West.")], usage={"output_tokens": PARENT_OUTPUT})


@asynccontextmanager
async def agent_with(tmp_path: Path, **settings: Any) -> AsyncIterator[tuple[AgentLoop, ThreadStore, FakeAnthropic, str]]:
    url = f"sqlite:///{tmp_path / 'agent.db'}"
    upgrade(url)
    engine = create_engine(url)
    sessions = session_factory(engine)
    store = ThreadStore(sessions)
    try:
        async with FakeAnthropic() as fake:
            fake.respond_with(respond)
            config = AgentConfig(
                model="claude-sonnet-5-5", data_dir=tmp_path, api_key="test", base_url=fake.base_url, **settings
            )
            agent = build_agent(config, store, sessions)
            thread_id = await store.open(ThreadKey(platform="test", workspace="W", channel="C", root="1"))
            try:
                yield agent, store, fake, thread_id
            finally:
                await agent.aclose()
    finally:
        await engine.dispose()


async def ask(agent: AgentLoop, thread_id: str, data_dir: Path, question: str) -> TurnResult:
    message = StandardMessage(thread_id=thread_id, role=Role.USER, content=[TextBlock(text=question)])
    deps = RunDeps(thread_id=thread_id, data_dir=data_dir, channel="C", user="U1")
    return await agent.run_turn(thread_id, message, event_key=question, deps=deps)


async def test_subagent_tokens_count_in_the_threads_usage(tmp_path: Path) -> None:
    async with agent_with(tmp_path) as (agent, store, fake, thread_id):
        result = await ask(agent, thread_id, tmp_path, "Compare East and West China GMV")
        assert result.text == "East beats West."
        usage = (await store.load_state(thread_id)).usage
        assert len(fake.requests) == usage.requests == 4  # two of the parent's, one per sub-agent
        assert usage.output_tokens == 2 * SUBAGENT_OUTPUT + 2 * PARENT_OUTPUT


async def test_subagent_tokens_use_up_the_conversations_budget(tmp_path: Path) -> None:
    # The parent's own calls stay far below the budget; the sub-agents' answers exceed it.
    async with agent_with(tmp_path, conversation_token_budget=100_000) as (agent, store, fake, thread_id):
        result = await ask(agent, thread_id, tmp_path, "Compare East and West China GMV")
        assert result.end is TurnEnd.BUDGET_EXHAUSTED and "token budget" in result.text
        assert len(fake.requests) == 3  # no model call once the sub-agents had used it up
        history = await store.history(thread_id)
        assert history[-1].role is Role.ASSISTANT and history[-1].text == result.text
