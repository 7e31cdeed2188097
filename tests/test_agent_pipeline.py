"""The assembled agent (build_agent) through the real SDK and the fake model: skills with
progressive disclosure and allowed-tools enforcement, sub-agents, and the hook order."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest

from agent_core.agent import build_agent
from agent_core.config import AgentConfig
from agent_core.messages import Role, StandardMessage, TextBlock, ThreadKey
from agent_core.run_context import RunDeps
from agent_core.store.db import create_engine, session_factory
from agent_core.store.threads import ThreadStore
from gateway.migrate import upgrade
from tests.fakes.anthropic_api import FakeAnthropic, Reply, text, tool_use
from tests.waiting import eventually


@pytest.fixture
async def agent_env(tmp_path: Path):
    url = f"sqlite:///{tmp_path / 'agent.db'}"
    upgrade(url)
    engine = create_engine(url)
    sessions = session_factory(engine)
    store = ThreadStore(sessions)
    async with FakeAnthropic() as fake:
        config = AgentConfig(model="claude-sonnet-5-5", data_dir=tmp_path, api_key="test", base_url=fake.base_url)
        agent = build_agent(config, store, sessions)
        thread_id = await store.open(ThreadKey(platform="test", workspace="W", channel="C", root="1"))
        yield agent, fake, thread_id, tmp_path
        await agent.aclose()
    await engine.dispose()


async def turn(agent, thread_id: str, data_dir: Path, question: str, key: str):
    message = StandardMessage(thread_id=thread_id, role=Role.USER, content=[TextBlock(text=question)])
    deps = RunDeps(thread_id=thread_id, data_dir=data_dir, channel="C", user="U1")
    return await agent.run_turn(thread_id, message, event_key=key, deps=deps)


def results_of(request_body: dict) -> dict[str, dict]:
    return {b["tool_use_id"]: b for b in request_body["messages"][-1]["content"] if b.get("type") == "tool_result"}


async def test_skill_disclosure_and_allowed_tools(agent_env) -> None:
    agent, fake, thread_id, data_dir = agent_env
    fake.script(
        Reply([tool_use("activate_skill", {"name": "anomaly-detection"}, id="t1")]),
        Reply([tool_use("generate_report", {"title": "x", "summary": "y"}, id="t2")]),
        Reply([tool_use("finish_skill", {}, id="t3")]),
        Reply([text("Done.")]),
    )
    await turn(agent, thread_id, data_dir, "anything odd in GMV?", "e1")
    first = fake.requests[0].body
    # Level 1: every skill's name and description is in the system prompt, not its instructions.
    system = json.dumps(first["system"])
    assert "anomaly-detection" in system and "attribution" in system and "allowed-tools" not in system
    # Level 2 on activation: the instructions and the level-3 file listing.
    activation = results_of(fake.requests[1].body)["t1"]
    assert not activation.get("is_error") and "skill://anomaly-detection/" in activation["content"]
    # A tool outside the skill's allowed-tools is refused while it is active.
    refused = results_of(fake.requests[2].body)["t2"]
    assert refused["is_error"] and "permission_denied" in refused["content"] and "anomaly-detection" in refused["content"]
    finished = results_of(fake.requests[3].body)["t3"]
    assert "Finished skill anomaly-detection" in finished["content"]


async def test_skill_cycle_is_refused_with_the_path(agent_env) -> None:
    agent, fake, thread_id, data_dir = agent_env
    fake.script(
        Reply([tool_use("activate_skill", {"name": "report-generation"}, id="a1")]),
        Reply([tool_use("activate_skill", {"name": "report-generation"}, id="a2")]),
        Reply([text("ok")]),
    )
    await turn(agent, thread_id, data_dir, "write a report", "e1")
    cycle = results_of(fake.requests[2].body)["a2"]
    assert cycle["is_error"] and "report-generation → report-generation" in cycle["content"]


async def test_subagents_start_fresh_run_in_parallel_and_return_their_text(agent_env) -> None:
    agent, fake, thread_id, data_dir = agent_env
    parent_question = "Compare East and West China GMV (the private parent question)"
    sub_asked = 0
    overlapped: list[bool] = []

    async def respond(body: dict) -> Reply:
        nonlocal sub_asked
        system = json.dumps(body["system"])
        if "working on one task for a colleague" in system:  # a sub-agent
            sub_asked += 1
            # Each answer waits for the other sub-agent's request: only side by side do both see it.
            with contextlib.suppress(TimeoutError):
                await eventually(lambda: sub_asked == 2, 5, "the other sub-agent's request")
            overlapped.append(sub_asked == 2)
            task = body["messages"][0]["content"][0]["text"]
            return Reply([text(f"result for: {task}")], event_delay=0.1)
        if len(body["messages"]) == 1:
            return Reply([
                tool_use("task", {"description": "GMV of East China in October 2026", "subagent_type": "data-analyst"}, id="s1"),
                tool_use("task", {"description": "GMV of West China in October 2026", "subagent_type": "data-analyst"}, id="s2"),
            ])
        return Reply([text("East beats West.")])

    fake.respond_with(respond)
    result = await turn(agent, thread_id, data_dir, parent_question, "e1")
    assert result.text == "East beats West."
    sub_requests = [r.body for r in fake.requests if "working on one task" in json.dumps(r.body["system"])]
    assert len(sub_requests) == 2
    for body in sub_requests:
        assert len(body["messages"]) == 1 and parent_question not in json.dumps(body)
        assert {t["name"] for t in body["tools"]} == {"list_tables", "describe_table", "sql_query"}
    results = results_of(fake.requests[-1].body)
    assert results["s1"]["content"] == "result for: GMV of East China in October 2026"
    assert results["s2"]["content"] == "result for: GMV of West China in October 2026"
    # The second sub-agent was asked before the first had its answer: they ran side by side.
    assert overlapped == [True, True]


def test_hooks_run_in_the_documented_order(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'a.db'}"
    upgrade(url)
    engine = create_engine(url)
    sessions = session_factory(engine)
    agent = build_agent(AgentConfig(model="m", data_dir=tmp_path, api_key="x"), ThreadStore(sessions), sessions)
    assert [type(h).__name__ for h in agent.hooks] == [
        "MemoryHook", "SkillPolicyHook", "CompressionHook", "RefocusHook",
        "PromptCachingHook", "DanglingToolCallPatch", "UsageHook", "TelemetryHook", "MetricsHook", "TracingHook",
    ]
