"""Token accounting: offline cl100k with hash check, Claude estimates, incremental counting,
usage and cost, budgets."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import inspect, text

from agent_core.config import BudgetConfig
from agent_core.messages import Role, StandardMessage, TextBlock, ToolResultBlock, ToolUseBlock
from agent_core.request import ModelRequest, SystemBlock
from agent_core.state import ThreadState, ThreadUsage
from agent_core.store.db import create_engine, session_factory
from agent_core.store.tables import CallRecordRow
from agent_core.tokens.budget import check_budget, day_bounds, user_tokens_since
from agent_core.tokens.estimate import (
    CJK_TOKENS_PER_CHAR,
    CL100K_SHA256,
    TextKind,
    TokenCounter,
    TokenizerUnavailable,
    cl100k_path,
    classify,
    load_cl100k,
)
from agent_core.tokens.prices import ModelInfo, ModelTable, budget_tokens, cost_usd
from agent_core.tokens.usage import record_usage, usage_lines
from gateway.migrate import upgrade
from tests.context_harness import rig
from tests.fakes.anthropic_api import estimate_tokens
from tests.waiting import scaled

ROOT = Path(__file__).resolve().parent.parent

# --------------------------------------------------------------------------- offline cl100k

OFFLINE_PROBE = textwrap.dedent(
    """
    import socket, sys

    def no_network(*args, **kwargs):
        raise OSError("network access attempted")

    # The process can reach nothing: sockets cannot connect, names cannot resolve.
    socket.socket.connect = no_network
    socket.socket.connect_ex = no_network
    socket.create_connection = no_network
    socket.getaddrinfo = no_network

    import tiktoken, tiktoken.registry

    def no_registry(*args, **kwargs):
        raise AssertionError("tiktoken.get_encoding must never be needed")

    tiktoken.get_encoding = no_registry
    tiktoken.registry.get_encoding = no_registry

    from agent_core.tokens.estimate import TokenCounter, load_cl100k

    encoding = load_cl100k()
    assert encoding.encode_ordinary("hello world") == [15339, 1917], encoding.encode_ordinary("hello world")
    print(TokenCounter(encoding).text("Why did GMV drop last week?"))
    """
)


def test_cl100k_loads_offline_without_tiktoken_registry_or_cache(tmp_path: Path) -> None:
    cache = tmp_path / "tiktoken-cache"
    gym = tmp_path / "data-gym"
    env = {
        **os.environ,
        "TIKTOKEN_CACHE_DIR": str(cache),
        "DATA_GYM_CACHE_DIR": str(gym),
        "TMPDIR": str(tmp_path / "tmp"),  # tiktoken's default cache dir lives under it
        "PYTHONPATH": str(ROOT),
    }
    (tmp_path / "tmp").mkdir()
    done = subprocess.run(
        [sys.executable, "-c", OFFLINE_PROBE], env=env, capture_output=True, text=True, timeout=scaled(60)
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.strip()) > 0
    assert not cache.exists() and not gym.exists()
    assert list((tmp_path / "tmp").iterdir()) == []


def test_cl100k_file_is_the_published_one() -> None:
    import hashlib

    assert hashlib.sha256(cl100k_path().read_bytes()).hexdigest() == CL100K_SHA256


def test_altered_vocabulary_is_refused(tmp_path: Path) -> None:
    data = bytearray(cl100k_path().read_bytes())
    data[10] ^= 0x01
    forged = tmp_path / "cl100k_base.tiktoken"
    forged.write_bytes(bytes(data))
    with pytest.raises(TokenizerUnavailable, match="SHA-256"):
        load_cl100k(forged)


# --------------------------------------------------------------------------- estimates


@pytest.fixture(scope="module")
def counter() -> TokenCounter:
    return TokenCounter(load_cl100k())


def test_cjk_counts_at_least_one_token_per_character(counter: TokenCounter) -> None:
    chinese = "上个月华东区的成交额为什么下降了请按品类和渠道拆分并给出同比环比"
    estimate = counter.text(chinese)
    assert estimate >= len(chinese)
    assert estimate == pytest.approx(len(chinese) * CJK_TOKENS_PER_CHAR, abs=1)
    # Mixed text: the CJK part per character, the Latin part through cl100k.
    mixed = "GMV 上个月 dropped 下降 by 4.2%"
    cjk = 5
    latin = counter.encoding.encode_ordinary("GMV  dropped  by 4.2%")
    assert counter.text(mixed) == pytest.approx(cjk * CJK_TOKENS_PER_CHAR + len(latin) * 1.15, abs=1.5)


def test_dense_text_is_estimated_denser_than_prose(counter: TokenCounter) -> None:
    prose = "The week over week decline was concentrated in the eastern region and in apparel."
    json_text = '{"region": "East", "gmv": 120345.5, "orders": 812, "refunds": 2001.5}'
    code = "SELECT region, SUM(gmv) AS gmv\nFROM orders\nWHERE dt >= '2024-05-01'\nGROUP BY 1"
    assert classify(prose) is TextKind.PROSE
    assert classify(json_text) is TextKind.JSON
    assert classify(code) is TextKind.CODE
    for sample, factor in ((prose, 1.15), (json_text, 1.30), (code, 1.25)):
        base = len(counter.encoding.encode_ordinary(sample))
        assert counter.text(sample) == pytest.approx(base * factor, abs=1)


class CountingEncoding:
    """Wraps the real encoding to count how much text gets encoded."""

    def __init__(self) -> None:
        self._inner = load_cl100k()
        self.chars = 0

    def encode_ordinary(self, value: str) -> list[int]:
        self.chars += len(value)
        return self._inner.encode_ordinary(value)


def message(thread: str, role: Role, words: str) -> StandardMessage:
    return StandardMessage(thread_id=thread, role=role, content=[TextBlock(text=words)])


def test_message_estimates_are_computed_once_per_message() -> None:
    encoding = CountingEncoding()
    counter = TokenCounter(encoding)  # type: ignore[arg-type]
    history = [message("t", Role.USER, "question " * 50), message("t", Role.ASSISTANT, "answer " * 50)]
    first = counter.messages(history)
    encoded = encoding.chars
    assert counter.messages(history) == first
    assert encoding.chars == encoded  # cached: nothing re-encoded
    history.append(message("t", Role.USER, "follow-up"))
    counter.messages(history)
    assert encoding.chars - encoded == len("follow-up")  # only the new message


async def test_context_estimate_is_reported_usage_plus_new_messages(tmp_path: Path) -> None:
    """The hook's estimate costs only the messages stored after the last request."""
    async with rig(tmp_path) as r:
        thread = await r.thread()
        await r.say(thread, "Why did GMV drop last week?")
        state = await r.store.load_state(thread)
        history = await r.store.history(thread)
        # The fake reports input + cache read + cache write = its size estimate of the request.
        assert state.usage.last_context_tokens == estimate_tokens(r.fake.requests[-1].body)
        assert state.usage.last_request_messages == len(history) - 1  # the answer came after it
        new = [message(thread, Role.USER, "And the week before?")]
        encoding = CountingEncoding()
        counter = TokenCounter(encoding)  # type: ignore[arg-type]
        r.compression.counter = counter
        request = ModelRequest(system=(SystemBlock("-"),), messages=[], tools=[])
        estimate = r.compression.estimate(request, [*history, *new], state)
        assert estimate == state.usage.last_context_tokens + counter.messages([history[-1], *new])
        assert encoding.chars < 300  # the new messages only, not the conversation


def test_tool_blocks_are_estimated_with_their_payload(counter: TokenCounter) -> None:
    call = StandardMessage(
        thread_id="t",
        role=Role.ASSISTANT,
        content=[ToolUseBlock(id="toolu_1", name="run_sql", input={"query": "SELECT 1 " * 40})],
    )
    result = StandardMessage(
        thread_id="t",
        role=Role.USER,
        content=[ToolResultBlock(tool_use_id="toolu_1", content="| a | b |\n" * 100)],
    )
    assert counter.message(call) > counter.text("SELECT 1 " * 40)
    assert counter.message(result) > counter.text("| a | b |\n" * 100)
    request = {
        "system": "You are BA-Agent.",
        "tools": [{"name": "run_sql", "input_schema": {}}],
        "messages": [call.to_api()],
    }
    assert counter.request(request) > counter.prefix(request) > 350  # the tool-use preamble


# --------------------------------------------------------------------------- models, usage, cost


def test_model_table_matches_longest_prefix_and_allows_overrides() -> None:
    table = ModelTable({"claude-sonnet-4-5": ModelInfo(context_window=1_000_000)})
    assert table.get("claude-opus-4-1-20250805").input_usd_per_mtok == 15.0
    assert table.get("claude-opus-4-5-20251101").input_usd_per_mtok == 5.0
    assert table.get("claude-opus-5-5").cache_read_multiplier == 0.05
    assert table.get("claude-sonnet-5-5").context_window == 1_000_000
    assert table.get("claude-sonnet-4-5-20250929").context_window == 1_000_000  # overridden
    assert table.get("claude-sonnet-4-20250514").context_window == 200_000
    assert table.get("some-other-model").context_window == 200_000


def test_cost_weights_cache_writes_and_reads() -> None:
    info = ModelInfo(input_usd_per_mtok=3.0, output_usd_per_mtok=15.0)
    cost = cost_usd(
        info,
        input_tokens=1_000_000,
        output_tokens=100_000,
        cache_read_tokens=2_000_000,
        cache_write_tokens=400_000,
    )
    assert cost == pytest.approx(3.0 + 1.5 + 0.6 + 1.5)
    usage = ThreadUsage()
    record_usage(
        usage, info, input_tokens=100, output_tokens=10, cache_read_tokens=1000, cache_write_tokens=200
    )
    record_usage(usage, info, input_tokens=50, output_tokens=5, cache_read_tokens=0, cache_write_tokens=0)
    assert (usage.requests, usage.input_tokens, usage.cache_read_tokens) == (2, 150, 1000)
    assert usage.cost_usd == pytest.approx((150 + 250 + 100) * 3e-6 + 15 * 15e-6)


def test_long_prompts_pay_the_higher_tier() -> None:
    haiku = ModelTable().get("claude-haiku-5-5")
    short = cost_usd(
        haiku, input_tokens=100_000, output_tokens=1000, cache_read_tokens=0, cache_write_tokens=0
    )
    long = cost_usd(
        haiku, input_tokens=100_001, output_tokens=1000, cache_read_tokens=0, cache_write_tokens=0
    )
    assert short == pytest.approx((100_000 * 0.10 + 1000 * 0.50) / 1e6)
    assert long == pytest.approx(5 * (100_001 * 0.10 + 1000 * 0.50) / 1e6)


async def test_usage_is_persisted_per_thread_for_stats(tmp_path: Path) -> None:
    async with rig(tmp_path, window=50_000) as r:
        thread = await r.thread()
        await r.say(thread, "Why did GMV drop last week?")
        await r.say(thread, "And by region?")
        usage = (await r.store.load_state(thread)).usage
        assert usage.requests == 4
        assert usage.model == "claude-sonnet-5-5" and usage.context_window == 50_000
        assert usage.cache_read_tokens > 0 and usage.cost_usd > 0
        assert 0 < usage.fill < 1
        lines = usage_lines(usage)
        assert any("context window 50,000" in line for line in lines)
        assert any("estimated cost" in line for line in lines)
        # ThreadState round-trips through its JSON column with the new sub-models.
        assert (
            ThreadState.model_validate_json((await r.store.load_state(thread)).model_dump_json()).usage
            == usage
        )


# --------------------------------------------------------------------------- budgets


async def test_conversation_budget() -> None:
    usage = ThreadUsage(
        input_tokens=5_000, output_tokens=1_000, cache_read_tokens=100_000, cache_write_tokens=4_000
    )
    spent = budget_tokens(5_000, 1_000, 4_000, 100_000)
    assert spent == 5_000 + 1_000 + 5_000 + 10_000
    assert await check_budget(BudgetConfig(), usage=usage) is None
    assert await check_budget(BudgetConfig(per_conversation_tokens=spent + 1), usage=usage) is None
    message = await check_budget(BudgetConfig(per_conversation_tokens=spent), usage=usage)
    assert message is not None and "token budget" in message and f"{spent:,}" in message


def test_day_bounds_follow_the_configured_timezone() -> None:
    now = datetime(2024, 3, 10, 20, 0, tzinfo=UTC)  # 21:00 in Berlin, 04:00 next day in Shanghai
    assert day_bounds(now, "UTC") == (datetime(2024, 3, 10, tzinfo=UTC), datetime(2024, 3, 11, tzinfo=UTC))
    start, end = day_bounds(now, "Asia/Shanghai")
    assert start == datetime(2024, 3, 10, 16, 0, tzinfo=UTC) and end - start == timedelta(days=1)
    start, end = day_bounds(datetime(2024, 3, 31, 12, tzinfo=UTC), "Europe/Berlin")  # DST starts
    assert end - start == timedelta(hours=23)


async def test_user_daily_budget_sums_calls_across_threads(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'b.db'}"
    upgrade(url)
    engine = create_engine(url)
    # The proposed migration: call_records.user_id (nullable, indexed with started_at).
    async with engine.begin() as conn:
        columns = await conn.run_sync(
            lambda c: [col["name"] for col in inspect(c).get_columns("call_records")]
        )
        if "user_id" not in columns:
            await conn.execute(text("ALTER TABLE call_records ADD COLUMN user_id VARCHAR(128)"))
    sessions = session_factory(engine)
    now = datetime(2024, 6, 1, 15, 0, tzinfo=UTC)
    rows = [
        ("t1", "U1", now - timedelta(hours=1), 1000, 100),
        ("t2", "U1", now - timedelta(hours=2), 2000, 200),
        ("t3", "U1", now - timedelta(days=1), 50_000, 0),  # yesterday
        ("t1", "U2", now - timedelta(hours=1), 70_000, 0),  # someone else
    ]
    try:
        async with sessions() as session:
            for thread, _user, started, tin, tout in rows:
                session.add(
                    CallRecordRow(
                        thread_id=thread,
                        kind="model",
                        name="m",
                        started_at=started,
                        input_tokens=tin,
                        output_tokens=tout,
                    )
                )
            await session.commit()
        async with engine.begin() as conn:
            for thread, user, _started, tin, _tout in rows:
                await conn.execute(
                    text("UPDATE call_records SET user_id = :u WHERE thread_id = :t AND input_tokens = :i"),
                    {"u": user, "t": thread, "i": tin},
                )
        start, _ = day_bounds(now, "UTC")
        assert await user_tokens_since(sessions, "U1", start) == 3300
        config = BudgetConfig(per_user_daily_tokens=3300)
        message = await check_budget(config, usage=ThreadUsage(), user="U1", sessions=sessions, now=now)
        assert (
            message is not None
            and "today's token budget" in message
            and "resets at midnight UTC (in 9 h 0 min)" in message
        )
        assert await check_budget(config, usage=ThreadUsage(), user="U3", sessions=sessions, now=now) is None
    finally:
        await engine.dispose()
