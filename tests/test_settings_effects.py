# Over 600 lines: one test per documented setting, observed through the service; split by nothing but length.
"""Every README configuration variable not exercised elsewhere, set and observed through the
service as `serve` builds it.

Process-level settings (listen address, log tags, tracing) run `ba-agent serve` as a
subprocess. The others run the in-process app (`create_app`) on settings read FROM THE
ENVIRONMENT exactly as `serve` reads them (`load_settings`), answering in the test process
(`BA_WORKER_PROCESSES=0`) against the local fakes. Each test observes what a user or an operator
would notice, and is written so that it fails if the setting were ignored (the default is noted
next to each).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agent_core.messages import utcnow
from gateway.config import Settings, load_settings
from tests.fakes.anthropic_api import FakeAnthropic, HttpError, Reply, text, tool_use
from tests.fakes.feishu_api import FakeFeishu
from tests.fakes.feishu_events import (
    ENCRYPT_KEY,
    VERIFICATION_TOKEN,
    encrypted_body,
    signed_headers,
    text_event,
)
from tests.fakes.otlp_collector import FakeCollector
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention, message
from tests.harness import SIGNING_SECRET, Gateway, running_gateway
from tests.serve_process import (
    clean_env,
    free_port,
    post_event,
    start,
    stop,
    wait_healthy,
    wait_workers_ready,
)
from tests.waiting import Deadline, scaled

_OUR_PREFIXES = ("BA_", "SLACK_", "FEISHU_", "ANTHROPIC_", "DATABASE_URL", "OTEL_")
THREAD = "1700000001.000100"


# --- helpers ---------------------------------------------------------------------------------


def settings_from_env(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    anthropic: FakeAnthropic,
    slack: FakeSlack | None = None,
    **env: str,
) -> Settings:
    """The settings `serve` would load with `env` set: every variable goes through the process
    environment (nothing is passed as a keyword), from an environment cleared of ours."""
    for name in list(os.environ):
        if name.startswith(_OUR_PREFIXES):
            monkeypatch.delenv(name)
    values = {
        "DATABASE_URL": f"sqlite:///{tmp_path / 'ba.db'}",
        "BA_DATA_DIR": str(tmp_path / "data"),
        "ANTHROPIC_API_KEY": "test-key",
        "ANTHROPIC_BASE_URL": anthropic.base_url,
        "BA_POLL_INTERVAL": "0.2",
        "BA_WORKER_PROCESSES": "0",  # answered in this process, on the app `serve` builds
    }
    if slack is not None:
        values |= {
            "SLACK_BOT_TOKEN": slack.bot_token,
            "SLACK_SIGNING_SECRET": SIGNING_SECRET,
            "SLACK_API_URL": slack.base_url,
        }
    for name, value in {**values, **env}.items():
        monkeypatch.setenv(name, value)
    return load_settings(_env_file=None)


SHUTDOWN_LIMIT_S = 15.0


@contextlib.asynccontextmanager
async def serving(settings: Settings) -> AsyncIterator[Gateway]:
    """`running_gateway`, whose shutdown must finish in bounded time: a gateway that does not
    stop fails the test instead of hanging the suite. (On Python 3.11 `asyncio.wait_for` can
    swallow a cancellation that coincides with its result, which the dispatcher's claim loop
    waits on: `Dispatcher.stop` then never returns.)"""
    async with contextlib.AsyncExitStack() as stack:
        gw = await stack.enter_async_context(running_gateway(settings))
        try:
            yield gw
        finally:
            limit = scaled(SHUTDOWN_LIMIT_S)
            try:
                async with asyncio.timeout(limit):
                    await stack.aclose()
            except TimeoutError:
                pytest.fail(f"the gateway did not shut down within {limit:.0f} s")


@pytest.fixture
async def fakes() -> AsyncIterator[tuple[FakeAnthropic, FakeSlack]]:
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        yield anthropic, slack


def answers(slack: FakeSlack, channel: str = "C1") -> list[str]:
    return [p.get("markdown_text") or p.get("text") or "" for p in slack.posted(channel=channel)]


async def mention(gw: Gateway, text_: str, *, user: str = "U1", channel: str = "C1", ts: str = THREAD) -> None:
    assert (await gw.post_event(app_mention(f"<@UBOT> {text_}", user, channel, ts=ts))).status == 200


async def follow_up(gw: Gateway, text_: str, ts: str, *, user: str = "U1", channel: str = "C1") -> None:
    """A reply in the bot's thread, without a mention."""
    event = message(text_, user, channel, ts=ts, channel_type="channel", thread_ts=THREAD)
    assert (await gw.post_event(event)).status == 200


async def dm(gw: Gateway, text_: str, ts: str, *, user: str = "U1") -> None:
    assert (await gw.post_event(message(text_, user, "D1", ts=ts, channel_type="im"))).status == 200
    await gw.settled()


def last_tool_results(body: dict[str, Any]) -> list[dict[str, Any]]:
    content = body["messages"][-1]["content"]
    return [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def has_reminder(body: dict[str, Any]) -> bool:
    return "<system-reminder>" in json.dumps(body["messages"][-1])


def is_summarizer_call(body: dict[str, Any]) -> bool:
    return "running summary of a conversation" in json.dumps(body.get("system"))


# --- the model call --------------------------------------------------------------------------


async def test_ba_model_and_ba_max_tokens_go_into_every_model_request(monkeypatch, tmp_path, fakes) -> None:
    # Defaults: claude-sonnet-5-5 and 8192.
    anthropic, slack = fakes
    settings = settings_from_env(
        monkeypatch, tmp_path, anthropic, slack, BA_MODEL="claude-haiku-4-5-20251001", BA_MAX_TOKENS="1234"
    )
    anthropic.script(Reply([text("GMV was 1.2M.")]))
    async with serving(settings) as gw:
        await mention(gw, "GMV yesterday?")
        await gw.settled()
    assert answers(slack) == ["GMV was 1.2M."]
    body = anthropic.last_request.body
    assert (body["model"], body["max_tokens"]) == ("claude-haiku-4-5-20251001", 1234)


async def test_ba_max_iterations_stops_a_looping_turn_with_a_note(monkeypatch, tmp_path, fakes) -> None:
    # Default 20: the model below would be called 20 times.
    anthropic, slack = fakes
    settings = settings_from_env(monkeypatch, tmp_path, anthropic, slack, BA_MAX_ITERATIONS="3")
    anthropic.respond_with(lambda _body: Reply([tool_use("list_tables", {})]))  # never answers
    async with serving(settings) as gw:
        await mention(gw, "which tables are there?")
        await gw.settled()
    assert len(anthropic.requests) == 3
    [note] = answers(slack)
    assert "I stopped after 3 steps" in note


@pytest.mark.parametrize(("retries", "expect_answer"), [("0", False), ("2", True)])
async def test_ba_model_retries_decides_whether_one_overload_reaches_the_user(
    monkeypatch, tmp_path, fakes, retries, expect_answer
) -> None:
    anthropic, slack = fakes
    settings = settings_from_env(monkeypatch, tmp_path, anthropic, slack, BA_MODEL_RETRIES=retries)
    anthropic.script(HttpError(529, retry_after=0.01), Reply([text("Orders are up 4%.")]))
    async with serving(settings) as gw:
        await mention(gw, "orders this week?")
        await gw.settled(timeout=30)
    [reply] = answers(slack)
    if expect_answer:
        assert reply == "Orders are up 4%." and len(anthropic.requests) == 2
    else:
        assert "the analysis model is overloaded" in reply and len(anthropic.requests) == 1


# --- answering capacity ----------------------------------------------------------------------


@pytest.mark.parametrize("limit", [1, 2])
async def test_ba_max_concurrent_turns_bounds_model_requests_in_flight(monkeypatch, tmp_path, fakes, limit) -> None:
    # Default 8: two conversations would always be answered at once.
    anthropic, slack = fakes
    settings = settings_from_env(monkeypatch, tmp_path, anthropic, slack, BA_MAX_CONCURRENT_TURNS=str(limit))
    in_flight = peak = 0

    async def hold(_body: dict[str, Any]) -> Reply:
        """Holds each answer until a second request is in flight too (or 1 s passed)."""
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            deadline = Deadline(1.0)
            while in_flight < 2 and not deadline.passed():
                await asyncio.sleep(0.01)
            return Reply([text("Here you go.")])
        finally:
            in_flight -= 1

    anthropic.respond_with(hold)
    async with serving(settings) as gw:
        await mention(gw, "GMV?", channel="C1")
        await mention(gw, "orders?", channel="C2")
        await gw.settled(timeout=20)
    assert answers(slack, "C1") == answers(slack, "C2") == ["Here you go."]
    assert peak == limit


# --- Slack -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("required", "answered"), [("true", False), ("false", True)])
async def test_slack_require_mention_in_threads(monkeypatch, tmp_path, fakes, required, answered) -> None:
    # Default false: follow-ups in the bot's thread are answered without a mention.
    anthropic, slack = fakes
    settings = settings_from_env(monkeypatch, tmp_path, anthropic, slack, SLACK_REQUIRE_MENTION_IN_THREADS=required)
    anthropic.script(Reply([text("GMV was 1.2M.")]), Reply([text("5% above last week.")]))
    async with serving(settings) as gw:
        await mention(gw, "GMV yesterday?")
        await gw.settled()
        await follow_up(gw, "and vs last week?", ts="1700000005.000100")  # stored before the 200, if at all
        await gw.settled()
        stored = await gw.stored_events()
    if answered:
        assert answers(slack) == ["GMV was 1.2M.", "5% above last week."] and stored == 2
    else:
        assert answers(slack) == ["GMV was 1.2M."] and stored == 1
        assert len(anthropic.requests) == 1


# --- Feishu ----------------------------------------------------------------------------------


def feishu_env(feishu: FakeFeishu, **extra: str) -> dict[str, str]:
    return {
        "FEISHU_APP_ID": feishu.app_id,
        "FEISHU_APP_SECRET": feishu.app_secret,
        "FEISHU_DOMAIN": feishu.domain,
        **extra,
    }


def feishu_answers(feishu: FakeFeishu) -> list[str]:
    """What the user sees: the final content of each card or message posted."""
    texts = []
    for sent in feishu.messages:
        if sent.msg_type == "interactive" and "data" in sent.content:
            card = feishu.cards[sent.content["data"]["card_id"]]
            texts.append(card.updates[-1]["body"]["elements"][0]["content"] if card.updates else "")
        else:
            texts.append(str(sent.content))
    return texts


async def test_feishu_encrypt_key_decrypts_events(monkeypatch, tmp_path) -> None:
    # Unset, an encrypted event is refused (400) and a plaintext one accepted.
    with FakeFeishu() as feishu:
        async with FakeAnthropic() as anthropic:
            settings = settings_from_env(
                monkeypatch,
                tmp_path,
                anthropic,
                **feishu_env(feishu, FEISHU_VERIFICATION_TOKEN=VERIFICATION_TOKEN, FEISHU_ENCRYPT_KEY=ENCRYPT_KEY),
            )
            anthropic.script(Reply([text("Hello from the bot.")]))
            async with serving(settings) as gw:
                url = gw.server.make_url("/feishu/events")
                body = encrypted_body(text_event("hi", chat_type="p2p", chat_id="oc_p2p"))
                async with gw.http.post(url, data=body, headers=signed_headers(body)) as resp:
                    assert resp.status == 200
                await gw.settled()
                # With a key configured, an unencrypted event is not trusted.
                plain = json.dumps(text_event("hi again", chat_type="p2p", chat_id="oc_p2p")).encode()
                async with gw.http.post(url, data=plain, headers={"Content-Type": "application/json"}) as resp:
                    assert resp.status == 401
                assert await gw.stored_events() == 1
    assert feishu_answers(feishu) == ["Hello from the bot."]
    assert anthropic.last_request.body["messages"][0]["content"][0]["text"] == "hi"


async def test_feishu_mode_websocket_connects_and_answers_over_the_long_connection(monkeypatch, tmp_path) -> None:
    # Default webhook: no connection is made (and without a token or key the config is refused).
    with FakeFeishu() as feishu:
        async with FakeAnthropic() as anthropic:
            settings = settings_from_env(monkeypatch, tmp_path, anthropic, **feishu_env(feishu, FEISHU_MODE="websocket"))
            anthropic.script(Reply([text("Sales are up 3%.")]))
            async with serving(settings) as gw:
                deadline = Deadline(15)
                while True:
                    status, body = await gw.get_json("/readyz")
                    if status == 200 or deadline.passed():
                        break
                    await asyncio.sleep(0.1)
                assert status == 200 and body["connections"]["feishu"]["state"] == "connected"
                assert feishu.ws_connections >= 1
                await asyncio.to_thread(feishu.ws_push_event, text_event("how are sales?", chat_type="p2p", chat_id="oc_dm"))
                deadline = Deadline(15)
                while await gw.stored_events() == 0 and not deadline.passed():
                    await asyncio.sleep(0.05)
                await gw.settled()
    assert feishu_answers(feishu) == ["Sales are up 3%."]


# --- the agent's context ---------------------------------------------------------------------


async def test_ba_skills_dir_adds_an_operator_skill_to_the_system_prompt(monkeypatch, tmp_path, fakes) -> None:
    # Default: only the bundled skills.
    anthropic, slack = fakes
    skill = tmp_path / "skills" / "churn-watch"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        "---\nname: churn-watch\ndescription: Track weekly customer churn by cohort and flag cohorts "
        "losing more than 5%.\n---\n\n# Churn watch\n\nCompare cohorts week over week.\n"
    )
    settings = settings_from_env(monkeypatch, tmp_path, anthropic, slack, BA_SKILLS_DIR=str(tmp_path / "skills"))
    anthropic.script(Reply([text("Churn is flat.")]))
    async with serving(settings) as gw:
        await mention(gw, "how is churn?")
        await gw.settled()
    assert answers(slack) == ["Churn is flat."]
    system = json.dumps(anthropic.last_request.body["system"])
    assert "churn-watch" in system and "losing more than 5%" in system
    assert "anomaly-detection" in system  # the bundled skills stay


@pytest.mark.parametrize(("every", "reminded"), [("1", True), (None, False)])
async def test_ba_refocus_every_puts_a_reminder_into_the_next_model_call(monkeypatch, tmp_path, fakes, every, reminded) -> None:
    anthropic, slack = fakes
    env = {"BA_REFOCUS_EVERY": every} if every else {}  # None: the default, 5
    settings = settings_from_env(monkeypatch, tmp_path, anthropic, slack, **env)
    anthropic.script(Reply([tool_use("list_tables", {})]), Reply([text("There are demo tables.")]))
    async with serving(settings) as gw:
        await mention(gw, "which tables can I query?")
        await gw.settled()
    assert answers(slack) == ["There are demo tables."]
    first, second = anthropic.requests
    assert not has_reminder(first.body)
    assert has_reminder(second.body) is reminded
    if reminded:
        assert "which tables can I query?" in json.dumps(second.body["messages"][-1])


async def test_ba_compress_at_summarizes_a_conversation_past_the_threshold(monkeypatch, tmp_path, fakes) -> None:
    # Default 0.8 of claude-sonnet-5-5's 1M window: the 400k-token context reported below stays
    # under it (and under the 0.5 cold-cache pruning fill), so nothing would be compressed.
    anthropic, slack = fakes
    settings = settings_from_env(monkeypatch, tmp_path, anthropic, slack, BA_COMPRESS_AT="0.3")
    turns = 0

    def model(body: dict[str, Any]) -> Reply:
        nonlocal turns
        if is_summarizer_call(body):
            return Reply([text("## Goal\nThe user tracks daily GMV by region.")])
        turns += 1
        return Reply([text(f"Answer {turns}.")], usage={"input_tokens": 400_000})

    anthropic.respond_with(model)
    async with serving(settings) as gw:
        for n in range(1, 7):
            await dm(gw, f"GMV by region for day {n}?", ts=f"17000000{n:02d}.000100")
    assert answers(slack, "D1") == [f"Answer {n}." for n in range(1, 7)]
    summarizer = [r for r in anthropic.requests if is_summarizer_call(r.body)]
    assert len(summarizer) == 1
    assert "GMV by region for day 1?" in json.dumps(summarizer[0].body["messages"])
    # The sixth answer's request carried the summary instead of the first exchange.
    last = anthropic.requests[-1].body["messages"]
    assert len(last) < 11
    assert "The user tracks daily GMV by region." in json.dumps(last)


# --- token budgets ---------------------------------------------------------------------------


async def test_ba_conversation_token_budget_stops_a_spent_conversation(monkeypatch, tmp_path, fakes) -> None:
    # Default unlimited: the follow-up would be answered by the model.
    anthropic, slack = fakes
    settings = settings_from_env(monkeypatch, tmp_path, anthropic, slack, BA_CONVERSATION_TOKEN_BUDGET="1000")
    anthropic.script(Reply([text("GMV was 1.2M.")], usage={"input_tokens": 5000}), Reply([text("More.")]))
    async with serving(settings) as gw:
        await mention(gw, "GMV yesterday?")
        await gw.settled()
        await follow_up(gw, "and the day before?", ts="1700000005.000100")
        await gw.settled()
    first, second = answers(slack)
    assert first == "GMV was 1.2M."
    assert "This conversation has used its token budget" in second and "of 1,000 tokens" in second
    assert len(anthropic.requests) == 1


async def test_ba_user_daily_token_budget_stops_that_user_in_every_conversation(monkeypatch, tmp_path, fakes) -> None:
    # Default unlimited: U1's second question would be answered by the model.
    anthropic, slack = fakes
    settings = settings_from_env(monkeypatch, tmp_path, anthropic, slack, BA_USER_DAILY_TOKEN_BUDGET="1000")
    anthropic.script(Reply([text("GMV was 1.2M.")], usage={"input_tokens": 5000}), Reply([text("Orders: 930.")]))
    async with serving(settings) as gw:
        await mention(gw, "GMV yesterday?", user="U1", channel="C1")
        await gw.settled()
        await mention(gw, "orders yesterday?", user="U1", channel="C2")  # a new conversation
        await gw.settled()
        await mention(gw, "orders yesterday?", user="U2", channel="C3")  # someone else
        await gw.settled()
    assert answers(slack, "C1") == ["GMV was 1.2M."]
    [spent] = answers(slack, "C2")
    assert "You've used today's token budget" in spent and "of 1,000 tokens" in spent
    assert answers(slack, "C3") == ["Orders: 930."]
    assert len(anthropic.requests) == 2


# --- the scheduler's maintenance jobs --------------------------------------------------------


def write_file_step(path: str, content: str) -> Reply:
    return Reply([tool_use("write_file", {"path": path, "content": content})])


async def test_ba_idle_after_minutes_flags_a_quiet_thread_for_a_refocus_reminder(monkeypatch, tmp_path, fakes) -> None:
    # Default 120: 45 minutes of quiet would not count as idle.
    anthropic, slack = fakes
    settings = settings_from_env(monkeypatch, tmp_path, anthropic, slack, BA_IDLE_AFTER_MINUTES="30")
    anthropic.script(Reply([text("GMV was 1.2M.")]), Reply([text("It was 1.1M.")]))
    async with serving(settings) as gw:
        await mention(gw, "GMV yesterday?")
        await gw.settled()
        # The idle-threads job as the running scheduler built it, fired 45 minutes from now.
        assert await gw.runtime.scheduler.run("idle-threads", utcnow() + timedelta(minutes=45))
        await follow_up(gw, "and the day before?", ts="1700000005.000100")
        await gw.settled()
    assert answers(slack) == ["GMV was 1.2M.", "It was 1.1M."]
    first, second = anthropic.requests
    assert not has_reminder(first.body)
    assert has_reminder(second.body) and "resumes after a pause" in json.dumps(second.body["messages"][-1])


async def test_ba_file_ttl_hours_expires_generated_files(monkeypatch, tmp_path, fakes) -> None:
    # Default 24 h: a file written two hours before the cleanup run would be kept.
    anthropic, slack = fakes
    settings = settings_from_env(monkeypatch, tmp_path, anthropic, slack, BA_FILE_TTL_HOURS="1")
    anthropic.script(write_file_step("/data/regions.csv", "region,gmv\nEast,1\n"), Reply([text("Saved regions.csv.")]))
    async with serving(settings) as gw:
        await mention(gw, "save GMV by region")
        await gw.settled()
        [written] = list((tmp_path / "data" / "workspaces").glob("*/data/regions.csv"))
        assert await gw.runtime.scheduler.run("cleanup", utcnow() + timedelta(hours=2))
    assert answers(slack) == ["Saved regions.csv."]
    assert not written.exists()


async def test_ba_data_size_cap_gb_removes_least_recently_used_files(monkeypatch, tmp_path, fakes) -> None:
    # Default 10 GB: 4 kB of files would all be kept.
    anthropic, slack = fakes
    cap = 3221 / 1024**3  # 3221 bytes, in GB: two 2000-byte files exceed it, one does not
    settings = settings_from_env(monkeypatch, tmp_path, anthropic, slack, BA_DATA_SIZE_CAP_GB=f"{cap:.12f}")
    anthropic.script(
        write_file_step("/data/older.csv", "x" * 2000),
        write_file_step("/data/newer.csv", "y" * 2000),
        Reply([text("Saved both files.")]),
    )
    async with serving(settings) as gw:
        await dm(gw, "save the two extracts", ts="1700000001.000100")
        await dm(gw, "new", ts="1700000002.000100")  # the conversation is archived: no longer active
        workspace = next((tmp_path / "data" / "workspaces").glob("*/data/older.csv")).parent
        assert await gw.runtime.scheduler.run("cleanup", utcnow() + timedelta(minutes=1))
    assert answers(slack, "D1")[0] == "Saved both files."
    assert sorted(p.name for p in workspace.iterdir()) == ["newer.csv"]


# --- scheduled reports -----------------------------------------------------------------------


async def test_ba_schedule_admins_may_list_everyones_schedules(monkeypatch, tmp_path, fakes) -> None:
    # Default: no admins, so UADMIN would get the permission error too.
    anthropic, slack = fakes
    settings = settings_from_env(monkeypatch, tmp_path, anthropic, slack, BA_SCHEDULE_ADMINS="U7, UADMIN")

    def model(body: dict[str, Any]) -> Reply:
        """Schedules or lists as asked, and answers with what the tool returned."""
        if results := last_tool_results(body):
            outcome = "ERROR " if results[0].get("is_error") else ""
            return Reply([text(outcome + str(results[0]["content"]))])
        question = json.dumps(body["messages"][-1])
        if "every morning" in question:
            report = {"prompt": "Daily orders by channel", "cron": "0 9 * * *", "timezone": "Asia/Shanghai"}
            return Reply([tool_use("schedule_report", report)])
        return Reply([tool_use("list_schedules", {"all_users": True})])

    anthropic.respond_with(model)
    async with serving(settings) as gw:
        await mention(gw, "send me orders every morning", user="U2", channel="C1", ts="1700000001.000100")
        await gw.settled()
        await mention(gw, "list everyone's schedules", user="UADMIN", channel="C2", ts="1700000002.000100")
        await gw.settled()
        await mention(gw, "list everyone's schedules", user="U3", channel="C3", ts="1700000003.000100")
        await gw.settled()
    [created] = answers(slack, "C1")
    assert "Daily orders by channel" in created and not created.startswith("ERROR")
    [admin_view] = answers(slack, "C2")
    assert "Daily orders by channel" in admin_view and not admin_view.startswith("ERROR")
    [refused] = answers(slack, "C3")
    assert refused.startswith("ERROR") and "Only admins" in refused


# --- process-level settings: `ba-agent serve` ------------------------------------------------


def serve_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in clean_env(tmp_path).items() if not k.startswith(_OUR_PREFIXES) or k == "BA_DATA_DIR"}
    return {**env, **extra}


def http_status(url: str) -> int:
    with urllib.request.urlopen(url, timeout=scaled(2)) as resp:
        return resp.status


@pytest.fixture
def serve_fakes() -> Iterator[tuple[FakeAnthropic, FakeSlack]]:
    with (
        FakeAnthropic.in_thread() as anthropic,
        FakeSlack.in_thread(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack,
    ):
        yield anthropic, slack


def answering_env(tmp_path: Path, anthropic: FakeAnthropic, slack: FakeSlack, **extra: str) -> dict[str, str]:
    return serve_env(
        tmp_path,
        ANTHROPIC_API_KEY="test-key",
        ANTHROPIC_BASE_URL=anthropic.base_url,
        SLACK_BOT_TOKEN="xoxb-test",
        SLACK_SIGNING_SECRET=SIGNING_SECRET,
        SLACK_API_URL=slack.base_url,
        BA_POLL_INTERVAL="0.2",
        **extra,
    )


def test_ba_host_is_the_listen_address(tmp_path: Path) -> None:
    # Default 127.0.0.1: /healthz would answer there and not on 127.0.0.2.
    port = free_port()
    proc = start(serve_env(tmp_path, BA_HOST="127.0.0.2", BA_WORKER_PROCESSES="0"), port, tmp_path)
    try:
        deadline = Deadline(20)
        while True:
            try:
                assert http_status(f"http://127.0.0.2:{port}/healthz") == 200
                break
            except OSError:
                if deadline.passed() or proc.poll() is not None:
                    raise
                time.sleep(0.05)
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0  # nothing listens there
    finally:
        out = stop(proc)
    assert f"listening on http://127.0.0.2:{port}" in out


def test_ba_service_name_and_environment_tag_every_json_log_line(tmp_path: Path, serve_fakes) -> None:
    # Defaults ba-agent-gateway / development. The worker process's lines count too.
    anthropic, slack = serve_fakes
    anthropic.script(Reply([text("GMV was 1.2M.")]))
    env = answering_env(
        tmp_path, anthropic, slack, BA_LOG_FORMAT="json", BA_SERVICE_NAME="ba-agent-eu", BA_ENVIRONMENT="staging-eu"
    )
    port = free_port()
    proc = start(env, port, tmp_path)
    try:
        wait_healthy(port)
        wait_workers_ready(port)
        assert post_event(port, app_mention("<@UBOT> GMV?", "U1", "C1", ts=THREAD)) == 200
        slack.wait_for_sync("chat.stopStream", timeout=30)  # the answer streams
    finally:
        out = stop(proc)
    entries = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert any("missing:" in e["message"] for e in entries)  # the serve process
    assert any(e["logger"].startswith("gateway.service.worker") for e in entries), out  # a worker process
    assert all((e["service"], e["environment"]) == ("ba-agent-eu", "staging-eu") for e in entries)


@pytest.mark.parametrize(("rate", "exported"), [("1.0", True), ("0", False)])
def test_ba_otel_endpoint_and_sample_rate_export_turn_spans(tmp_path: Path, serve_fakes, rate, exported) -> None:
    # Default: no endpoint, so nothing is exported; sample rate default 1.0.
    anthropic, slack = serve_fakes
    anthropic.script(Reply([tool_use("list_tables", {})]), Reply([text("There are demo tables.")]))
    with FakeCollector.in_thread() as collector:
        env = answering_env(
            tmp_path,
            anthropic,
            slack,
            BA_OTEL_ENDPOINT=collector.traces_url,
            BA_OTEL_SAMPLE_RATE=rate,
            BA_SERVICE_NAME="ba-agent-traced",
            BA_ENVIRONMENT="staging",
            OTEL_BSP_SCHEDULE_DELAY="100",  # the SDK's batch delay (ms): export soon after a turn
        )
        port = free_port()
        proc = start(env, port, tmp_path)
        try:
            wait_healthy(port)
            wait_workers_ready(port)
            assert post_event(port, app_mention("<@UBOT> which tables?", "U1", "C1", ts=THREAD)) == 200
            slack.wait_for_sync("chat.stopStream", timeout=30)
            if exported:
                collector.wait_for_spans_sync("turn", "model.call", "tool.list_tables")
            else:
                time.sleep(1.0)  # ten batch delays: anything sampled would have been exported
        finally:
            out = stop(proc)
        spans = collector.spans
    assert [p["markdown_text"] for p in slack.posted(channel="C1")] == ["There are demo tables."], out
    if not exported:
        assert spans == []
        return
    names = [s.name for s in spans]
    assert names.count("model.call") == 2 and names.count("turn") == 1
    # One trace per turn; the start-up check of the model (the SDK's own span) is a trace of its own.
    assert len({s.trace_id for s in spans if s.name != "anthropic.models.retrieve"}) == 1
    assert all(s.resource["service.name"] == "ba-agent-traced" for s in spans)
    assert all(s.resource["deployment.environment"] == "staging" for s in spans)
    assert "which tables" not in json.dumps([s.attributes for s in spans])  # no message bodies
