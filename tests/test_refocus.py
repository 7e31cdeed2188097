"""Refocus reminders: periodic and after idle, at the end of the latest user turn, context only."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import update

from agent_core.hooks.refocus import RefocusConfig, mark_idle_threads, reminder_text
from agent_core.messages import Role, StandardMessage, TextBlock, ThreadKey, utcnow
from agent_core.skills.activation import ActivationFrame
from agent_core.state import ThreadState, Todo
from agent_core.store.tables import ThreadRow
from tests.context_harness import SUMMARY_MARK, rig, summary_reply
from tests.fakes.anthropic_api import Reply, text, tool_use

GOAL = "Why did GMV drop in the East last week? Break it down by category and channel."


def planner(body: dict[str, Any]) -> Reply:
    """Writes a todo list, runs five queries, then answers."""
    if SUMMARY_MARK in json.dumps(body.get("system")):
        return summary_reply(body)
    queries = sum(
        1
        for m in body["messages"]
        if m["role"] == "assistant"
        for b in m["content"]
        if b.get("name") == "run_sql"
    )
    planned = any(
        b.get("name") == "todo" for m in body["messages"] if m["role"] == "assistant" for b in m["content"]
    )
    if not planned:
        todos = [
            {"content": "GMV by category", "status": "in_progress"},
            {"content": "GMV by channel", "status": "pending"},
            {"content": "Write the answer", "status": "pending"},
        ]
        return Reply([tool_use("todo", {"todos": todos})])
    if queries < 5:
        return Reply([tool_use("run_sql", {"query": f"SELECT {queries}"})])
    return Reply([text("East GMV fell 6%, mostly Apparel via the app channel.")])


def reminders(request: dict[str, Any]) -> list[str]:
    return [
        b["text"]
        for m in request["messages"]
        for b in m["content"]
        if b.get("type") == "text" and b["text"].startswith("<system-reminder>")
    ]


async def test_reminder_every_n_calls_at_the_end_of_the_last_user_turn(tmp_path: Path) -> None:
    async with rig(tmp_path, refocus=RefocusConfig(every_calls=3), responder=planner) as r:
        thread = await r.thread()
        result = await r.say(thread, GOAL)
        requests = r.main_requests()
        assert len(requests) == 7  # todo, 5 queries, answer
        with_reminder = [i for i, req in enumerate(requests) if reminders(req)]
        assert with_reminder == [3, 6]  # after every third model call
        for i in with_reminder:
            last = requests[i]["messages"][-1]
            assert last["role"] == "user"
            reminder = last["content"][-1]["text"]
            assert reminders(requests[i]) == [reminder]  # only there: never in earlier turns
            assert GOAL in reminder
            assert "[~] 1. GMV by category" in reminder and "[ ] 2. GMV by channel" in reminder
            assert "not a message from the user" in reminder
            # The block before it carries a breakpoint, so the next call reads a cache
            # entry written without the reminder.
            assert last["content"][-2]["cache_control"] == {"type": "ephemeral"}
            following = requests[i + 1] if i + 1 < len(requests) else None
            if following is not None:
                n = len(requests[i]["messages"])
                assert following["messages"][n - 1]["content"] == [
                    {k: v for k, v in b.items() if k != "cache_control"} for b in last["content"][:-1]
                ]
        # Context only: never stored, never posted.
        history = await r.store.history(thread)
        assert not any("<system-reminder>" in json.dumps(m.to_api()) for m in history)
        assert "<system-reminder>" not in result.text
        state = await r.store.load_state(thread)
        assert state.refocus.last_reminder_call == 6


async def test_reminder_names_the_active_skill_chain(tmp_path: Path) -> None:
    async with rig(tmp_path, refocus=RefocusConfig(every_calls=1)) as r:
        thread = await r.thread()
        state = ThreadState(
            model_calls=4, todos=[Todo(id=1, content="Compare regions", status="in_progress")]
        )
        state.skills.frames = [ActivationFrame(name="report-generation"), ActivationFrame(name="attribution")]
        await r.store.save_state(thread, state)
        await r.say(thread, "Go on with the attribution")
        first, second = r.main_requests()[:2]
        # First call: the request is the newest message, so it is not restated; the work
        # in flight is.
        reminder = reminders(first)[0]
        assert "Active skills: report-generation → attribution" in reminder
        assert "The user's current request" not in reminder
        assert "The user's current request:\nGo on with the attribution" in reminders(second)[0]


async def test_idle_threads_get_a_reminder_on_resume(tmp_path: Path, database_url: str) -> None:
    async with rig(tmp_path, refocus=RefocusConfig(every_calls=100), database_url=database_url) as r:
        idle = await r.thread(root="1.1")
        fresh_never_answered = await r.thread(root="2.2")
        archived = await r.thread(root="3.3")
        await r.say(idle, "Weekly GMV by region")
        await r.say(archived, "Something old")
        await r.store.append(
            fresh_never_answered,
            [StandardMessage(thread_id=fresh_never_answered, role=Role.USER, content=[TextBlock(text="hi")])],
        )
        state = await r.store.load_state(idle)
        state.todos = [Todo(id=1, content="Check refunds", status="pending")]
        await r.store.save_state(idle, state)
        await r.store.reset(ThreadKey(platform="slack", workspace="T1", channel="C1", root="3.3"))

        later = utcnow() + timedelta(hours=3)
        assert await mark_idle_threads(r.sessions, idle_after=timedelta(hours=2), now=later) == 1
        assert (await r.store.load_state(idle)).refocus.idle_resume
        assert await mark_idle_threads(r.sessions, idle_after=timedelta(hours=2), now=later) == 0  # already
        # Not idle long enough: nothing happens.
        assert await mark_idle_threads(r.sessions, idle_after=timedelta(hours=4), now=later) == 0

        before = len(r.main_requests())
        await r.say(idle, "Back again: and the week after?")
        resumed = r.main_requests()[before]
        reminder = reminders(resumed)[0]
        assert "resumes after a pause" in reminder and "[ ] 1. Check refunds" in reminder
        assert resumed["messages"][-1]["content"][-1]["text"] == reminder
        assert not reminders(r.main_requests()[before + 1])  # once
        assert not (await r.store.load_state(idle)).refocus.idle_resume


async def test_idle_flag_is_not_written_over_a_thread_touched_since(
    tmp_path: Path, database_url: str
) -> None:
    async with rig(tmp_path, database_url=database_url) as r:
        thread = await r.thread()
        await r.say(thread, "Weekly GMV")
        async with r.sessions() as session:  # a turn started: its message moved updated_at
            await session.exec(
                update(ThreadRow)
                .where(ThreadRow.id == thread)
                .values(updated_at=utcnow() + timedelta(hours=5))
            )
            await session.commit()
        assert await mark_idle_threads(r.sessions, now=utcnow() + timedelta(hours=3)) == 0
        assert not (await r.store.load_state(thread)).refocus.idle_resume


async def test_reminder_survives_compression(tmp_path: Path) -> None:
    """Compression re-renders the message list; the reminder is added after it, so both hold."""
    async with rig(tmp_path, window=6_000, refocus=RefocusConfig(every_calls=2)) as r:
        thread = await r.thread()
        for i in range(14):
            await r.say(thread, f"Question {i} about GMV")
        both = [
            req
            for req in r.main_requests()
            if reminders(req)
            and req["messages"][0]["content"][0]["text"].startswith("<conversation_summary>")
        ]
        assert both
        assert "Question 13 about GMV" in reminders(r.main_requests()[-1])[0]


def test_no_reminder_when_it_would_only_repeat_the_newest_message() -> None:
    history = [StandardMessage(thread_id="t", role=Role.USER, content=[TextBlock(text="hello")])]
    assert reminder_text(history, ThreadState()) is None
    idle = reminder_text(history, ThreadState(), idle=True)
    assert idle is not None and "resumes after a pause" in idle
