"""The tool pipeline: output levels, formatting by shape, data files, errors, retries, breaker, parallelism.

Every test drives `ToolPipeline.execute` / `execute_many` the way the agent loop does and checks
what the model would read (the observation) or what the user would notice (files, timing).
"""

from __future__ import annotations

import asyncio
import csv
import itertools
import json
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, Field

from agent_core.data.duckdb_engine import QueryResult
from agent_core.messages import ToolUseBlock
from agent_core.run_context import RunContext
from agent_core.toolkit.formatting import estimate_tokens
from agent_core.toolkit.levels import LevelSource, OutputLevel, decide_output_level
from agent_core.toolkit.pipeline import ToolPipeline, ToolPipelineConfig
from agent_core.toolkit.protocol import ErrorType, Tool, ToolError, ToolResult
from agent_core.toolkit.resilience import BreakerState, CircuitBreaker, RetryPolicy
from agent_core.workspace.local import thread_dir_name

THREAD = "slack:T1:C1:1700000001.000100"


class FakeInput(BaseModel):
    model_config = ConfigDict(extra="forbid")  # proves output_level never reaches the tool

    n: int = Field(1, ge=1, le=100)
    label: str = "x"


Behaviour = Callable[[FakeInput, int], Awaitable[Any]]


class FakeTool(Tool[FakeInput]):
    """A tool whose result (or failure) is a coroutine of (args, attempt number)."""

    description = "A test tool."
    Input = FakeInput

    def __init__(self, behave: Behaviour | Any, name: str = "fake", **declared: Any) -> None:
        self.name = name  # type: ignore[misc]
        self._behave = behave
        self.calls = 0
        for key, value in declared.items():  # timeout_s, idempotent, retry, ... per instance
            setattr(self, key, value)

    async def run(self, args: FakeInput, ctx: RunContext) -> Any:
        self.calls += 1
        if callable(self._behave):
            return await self._behave(args, self.calls)
        return self._behave


def returning(data: Any) -> FakeTool:
    return FakeTool(data)


def call(name: str = "fake", call_id: str = "toolu_1", **tool_input: Any) -> ToolUseBlock:
    return ToolUseBlock(id=call_id, name=name, input=tool_input)


@pytest.fixture
def ctx(tmp_path: Path) -> RunContext:
    return RunContext(thread_id=THREAD, data_dir=tmp_path)


def data_path(ctx: RunContext, result: ToolResult) -> Path:
    """Where the model-visible /data/<name> of a result lives on disk."""
    assert result.data_file is not None and result.data_file.startswith("/data/")
    name = result.data_file.removeprefix("/data/")
    return ctx.data_dir / "workspaces" / thread_dir_name(ctx.thread_id) / "data" / name


def query_result(rows: int, truncated: bool = False) -> QueryResult:
    return QueryResult(
        sql="SELECT region, gmv FROM demo.sales",
        columns=["region", "gmv"],
        column_types=["VARCHAR", "DOUBLE"],
        rows=[[f"region-{i}", i * 10.5] for i in range(rows)],
        row_count=rows,
        truncated=truncated,
        elapsed_ms=4,
    )


def error_of(result: ToolResult) -> dict[str, Any]:
    assert result.is_error
    return json.loads(result.observation)["error"]


# --- output levels -----------------------------------------------------------------------------


def test_level_decision_chain_each_rung() -> None:
    brief, standard, full = OutputLevel.BRIEF, OutputLevel.STANDARD, OutputLevel.FULL
    assert decide_output_level(full, brief, standard).level is full  # the call's own argument
    assert decide_output_level(None, full, brief).level is full  # the tool's default
    assert decide_output_level(None, None, brief).level is brief  # the global default
    assert decide_output_level(None, None).level is standard  # STANDARD when nothing is set
    forced = decide_output_level(full, full, full, context_fill=0.81)
    assert (forced.level, forced.source) == (brief, LevelSource.CONTEXT)
    assert decide_output_level(full, None, context_fill=0.8).level is full  # "over" 80 %, not at


async def test_level_comes_from_call_tool_and_global_default(ctx: RunContext) -> None:
    data = [{"city": f"c{i}"} for i in range(30)]
    tool_full = FakeTool(data, name="wide", default_output_level=OutputLevel.FULL)
    pipeline = ToolPipeline(
        [returning(data), tool_full], ToolPipelineConfig(default_output_level=OutputLevel.BRIEF)
    )
    by_global = await pipeline.execute(call(), ctx)
    by_tool = await pipeline.execute(call("wide"), ctx)
    by_call = await pipeline.execute(call("wide", output_level="standard"), ctx)
    assert (by_global.output_level, by_global.level_source) == (OutputLevel.BRIEF, LevelSource.GLOBAL)
    assert by_global.observation.startswith("Found 30 rows; columns: city.")
    assert (by_tool.output_level, by_tool.level_source) == (OutputLevel.FULL, LevelSource.TOOL)
    assert "| c29 |" in by_tool.observation
    assert (by_call.output_level, by_call.level_source) == (OutputLevel.STANDARD, LevelSource.CALL)
    assert "| c19 |" in by_call.observation and "| c20 |" not in by_call.observation


async def test_nearly_full_context_forces_brief_but_keeps_the_data(ctx: RunContext) -> None:
    pipeline = ToolPipeline([returning(query_result(50))])
    ctx.turn.context_fill = 0.85
    result = await pipeline.execute(call(output_level="full"), ctx)
    assert result.output_level is OutputLevel.BRIEF and result.level_source is LevelSource.CONTEXT
    assert "Found 50 rows" in result.observation and "| region |" not in result.observation
    assert "85% full" in result.observation
    assert result.data_file in result.observation  # the model can still reach everything
    assert len(data_path(ctx, result).read_text().splitlines()) == 51
    small = await ToolPipeline([returning("3 rows deleted")]).execute(call(), ctx)
    assert small.observation.startswith("3 rows deleted") and small.data_file is None  # nothing left out


def test_every_tool_schema_offers_output_level() -> None:
    [spec] = ToolPipeline([returning("ok")]).specs()
    prop = spec["input_schema"]["properties"]["output_level"]
    assert prop["enum"] == ["brief", "standard", "full"]
    assert "output_level" not in spec["input_schema"].get("required", [])


async def test_output_level_is_stripped_before_validation(ctx: RunContext) -> None:
    pipeline = ToolPipeline([returning("hello")])
    result = await pipeline.execute(call(n=2, output_level="BRIEF"), ctx)  # extra="forbid" input
    assert not result.is_error and result.observation == "hello"
    bad = error_of(await pipeline.execute(call(output_level="verbose"), ctx))
    assert bad["type"] == "invalid_parameters" and bad["message"].startswith("output_level:")


# --- formatting by level and shape --------------------------------------------------------------


async def test_standard_table_is_markdown_preview_with_truncation_notice(ctx: RunContext) -> None:
    pipeline = ToolPipeline([returning(query_result(50, truncated=True))])
    result = await pipeline.execute(call(), ctx)
    obs = result.observation
    assert result.output_level is OutputLevel.STANDARD and result.data_file is None
    assert "At least 50 rows × 2 columns: region (VARCHAR), gmv (DOUBLE)." in obs
    assert "| region | gmv |\n| --- | --- |\n| region-0 | 0.0 |" in obs
    assert "| region-19 |" in obs and "| region-20 |" not in obs
    assert "Showing the first 20 of 50 rows." in obs
    assert "More rows exist than the 50 returned" in obs
    assert 'output_level="full"' in obs  # the model is told how to get the rest


async def test_brief_table_names_row_count_and_columns(ctx: RunContext) -> None:
    rows = [{"region": "East China", "gmv": i} for i in range(1204)]
    result = await ToolPipeline([returning(rows)]).execute(call(output_level="brief"), ctx)
    assert result.observation.startswith("Found 1,204 rows; columns: region, gmv.")
    assert "East China" not in result.observation
    single = await ToolPipeline([returning(query_result(1))]).execute(call(output_level="brief"), ctx)
    assert single.observation == "Found 1 row: region = region-0, gmv = 0.0."  # the answer itself


async def test_full_small_result_is_complete_and_saved(ctx: RunContext) -> None:
    result = await ToolPipeline([returning(query_result(40))]).execute(call(output_level="full"), ctx)
    assert all(f"| region-{i} | {i * 10.5} |" in result.observation for i in range(40))
    assert f"Complete data: {result.data_file} (" in result.observation
    assert result.data_file.endswith(".csv")
    with data_path(ctx, result).open() as f:
        saved = list(csv.reader(f))
    assert saved[0] == ["region", "gmv"] and len(saved) == 41 and saved[40] == ["region-39", "409.5"]


async def test_full_large_result_is_file_reference_plus_summary(ctx: RunContext) -> None:
    data = query_result(3000)  # ~60 KB: too much to inline, well under 1 MB
    result = await ToolPipeline([returning(data)]).execute(call(output_level="full"), ctx)
    obs = result.observation
    assert "3,000 rows × 2 columns" in obs and "| region-4 |" in obs
    assert "region-2999" not in obs
    assert f"too large to show here; it is in {result.data_file}" in obs
    assert estimate_tokens(obs) < 500
    with data_path(ctx, result).open() as f:
        saved = list(csv.reader(f))
    assert saved[1:] == [[r, str(g)] for r, g in data.rows]


@pytest.mark.parametrize("level", ["brief", "standard", "full"])
async def test_over_one_megabyte_goes_to_a_file_at_every_level(ctx: RunContext, level: str) -> None:
    blob = {"events": [{"id": i, "payload": "x" * 200} for i in range(6000)]}  # ~1.3 MB
    result = await ToolPipeline([returning(blob)]).execute(call(output_level=level), ctx)
    assert result.size_bytes > 1024 * 1024 and result.data_file in result.observation
    assert estimate_tokens(result.observation) < 2_000
    assert json.loads(data_path(ctx, result).read_text()) == blob


async def test_same_data_lands_in_the_same_file(ctx: RunContext) -> None:
    pipeline = ToolPipeline([returning({"a": 1}), FakeTool({"a": 2}, name="other")])
    first = await pipeline.execute(call(call_id="t1", output_level="full"), ctx)
    again = await pipeline.execute(call(call_id="t2", output_level="full"), ctx)
    other = await pipeline.execute(call("other", output_level="full"), ctx)
    assert first.data_file == again.data_file != other.data_file
    assert first.data_hash is not None and first.data_file == f"/data/{first.data_hash[:16]}.json"
    assert len(list(data_path(ctx, first).parent.iterdir())) == 2


async def test_object_shape_per_level(ctx: RunContext) -> None:
    data = {"status": "ok", "count": 120, "ids": list(range(120))}
    pipeline = ToolPipeline([returning(data)])
    brief = await pipeline.execute(call(output_level="brief"), ctx)
    standard = await pipeline.execute(call(output_level="standard"), ctx)
    full = await pipeline.execute(call(output_level="full"), ctx)
    assert brief.observation.startswith("Object with 3 fields: status = ok, count = 120, ids = [120 items].")
    preview = json.loads(standard.observation.split("\n\n")[0])
    assert preview["ids"][:20] == list(range(20)) and preview["ids"][20] == "… and 100 more items"
    assert json.loads(full.observation.split("\n\nComplete data:")[0]) == data


async def test_scalar_list_and_text_per_level(ctx: RunContext) -> None:
    pipeline = ToolPipeline([returning(list(range(100))), FakeTool("line\n" * 400, name="text")])
    brief = await pipeline.execute(call(output_level="brief"), ctx)
    standard = await pipeline.execute(call(), ctx)
    assert brief.observation.startswith("List of 100 items: 0, 1, 2, 3, 4, … and 95 more.")
    assert (
        standard.observation.startswith("List of 100 items:\n- 0\n- 1\n")
        and "… and 80 more." in standard.observation
    )
    text_brief = await pipeline.execute(call("text", output_level="brief"), ctx)
    text_standard = await pipeline.execute(call("text"), ctx)
    assert "(2,000 characters, 401 lines in total)" in text_brief.observation
    assert text_standard.observation == "line\n" * 400


async def test_pydantic_model_and_dataframe_are_shaped_by_content(ctx: RunContext) -> None:
    class Report(BaseModel):
        title: str
        regions: list[str]

    pd = pytest.importorskip("pandas")
    frame = pd.DataFrame({"region": ["East China", "North China"], "gmv": [12.5, 7.25]})
    pipeline = ToolPipeline([returning(Report(title="Q3", regions=["East"])), FakeTool(frame, name="frame")])
    model = await pipeline.execute(call(output_level="brief"), ctx)
    table = await pipeline.execute(call("frame"), ctx)
    assert model.observation.startswith("Object with 2 fields: title = Q3, regions = [1 item].")
    assert table.observation.startswith("2 rows × 2 columns: region (")  # dtype name varies by version
    assert "gmv (float64)." in table.observation
    assert "| East China | 12.5 |\n| North China | 7.25 |" in table.observation


async def test_huge_observation_becomes_head_and_tail_preview(ctx: RunContext) -> None:
    text = "BEGIN\n" + "".join(f"line {i} of the log\n" for i in range(12_000)) + "END\n"  # ~250 KB
    result = await ToolPipeline([returning(text)]).execute(call(), ctx)
    obs = result.observation
    assert result.evicted and result.data_file is not None
    assert obs.startswith("This result is too large to show (about ")
    assert result.data_file in obs and "BEGIN" in obs and "END" in obs and "line 6000 " not in obs
    assert "characters omitted" in obs and estimate_tokens(obs) < 3_000
    assert data_path(ctx, result).read_text() == text


def test_token_estimate_counts_cjk_per_character() -> None:
    assert estimate_tokens("a" * 400) == 100
    assert estimate_tokens("销售额下降" * 20) == 100


# --- errors --------------------------------------------------------------------------------------


async def test_validation_error_names_field_and_reason(ctx: RunContext) -> None:
    tool = returning("never")
    result = await ToolPipeline([tool]).execute(call(call_id="toolu_v", n=0), ctx)
    assert error_of(result) == {
        "type": "invalid_parameters",
        "code": "INVALID_INPUT",
        "message": "n: Input should be greater than or equal to 1 (got 0)",
        "tool": "fake",
        "tool_use_id": "toolu_v",
    }
    assert tool.calls == 0


async def test_unknown_tool_and_oversized_input_are_refused(ctx: RunContext) -> None:
    tool = returning("never")
    pipeline = ToolPipeline([tool], ToolPipelineConfig(max_input_bytes=1000))
    unknown = error_of(await pipeline.execute(call("nope"), ctx))
    assert (unknown["type"], unknown["code"]) == ("invalid_parameters", "UNKNOWN_TOOL")
    assert "available tools: fake" in unknown["message"]
    big = error_of(await pipeline.execute(call(label="x" * 2000), ctx))
    assert (big["type"], big["code"]) == ("invalid_parameters", "INPUT_TOO_LARGE")
    assert tool.calls == 0


@pytest.mark.parametrize(
    ("raised", "error_type", "code", "message"),
    [
        (
            ToolError("writes are not allowed", ErrorType.PERMISSION_DENIED),
            "permission_denied",
            "PERMISSION_DENIED",
            "writes are not allowed",
        ),
        (ToolError("no such column: gmvv"), "execution_error", "EXECUTION_ERROR", "no such column: gmvv"),
        (
            ToolError("warehouse unreachable", ErrorType.RESOURCE_ERROR, code="DB_DOWN"),
            "resource_error",
            "DB_DOWN",
            "warehouse unreachable",
        ),
        (KeyError("boom"), "execution_error", "TOOL_CRASHED", "KeyError: 'boom'"),
    ],
)
async def test_tool_failures_use_the_standard_error(
    ctx: RunContext, raised: Exception, error_type: str, code: str, message: str
) -> None:
    async def fail(args: FakeInput, attempt: int) -> Any:
        raise raised

    result = await ToolPipeline([FakeTool(fail)]).execute(call(call_id="toolu_e"), ctx)
    assert error_of(result) == {
        "type": error_type,
        "code": code,
        "message": message,
        "tool": "fake",
        "tool_use_id": "toolu_e",
    }
    assert (result.error_type, result.error_code) == (ErrorType(error_type), code)


async def test_timeout(ctx: RunContext) -> None:
    finished = False

    async def slow(args: FakeInput, attempt: int) -> str:
        nonlocal finished
        await asyncio.sleep(5)
        finished = True
        return "late"

    result = await ToolPipeline([FakeTool(slow, timeout_s=0.05)]).execute(call(), ctx)
    assert not finished  # the result came without waiting for the tool
    error = error_of(result)
    assert (error["type"], error["code"]) == ("timeout", "TIMEOUT")
    assert error["message"] == "fake did not finish within 0.05 s"


# --- retries -------------------------------------------------------------------------------------


def test_backoff_and_timeout_growth_are_capped() -> None:
    policy = RetryPolicy(
        initial_delay_s=0.01, backoff_multiplier=2, max_delay_s=0.05, timeout_multiplier=2, max_timeout_s=0.3
    )
    assert [policy.delay_s(n) for n in (1, 2, 3, 4)] == [0.01, 0.02, 0.04, 0.05]
    assert [policy.timeout_s(0.1, n) for n in (0, 1, 2)] == [0.1, 0.2, 0.3]
    assert policy.should_retry(ErrorType.TIMEOUT, 1) and not policy.should_retry(ErrorType.TIMEOUT, 2)
    assert not policy.should_retry(ErrorType.EXECUTION_ERROR, 0)


def _sleeps(seconds: float) -> Behaviour:
    async def behave(args: FakeInput, attempt: int) -> str:
        await asyncio.sleep(seconds)
        return f"done on attempt {attempt}"

    return behave


FAST_RETRY = RetryPolicy(initial_delay_s=0.01, timeout_multiplier=4)


async def test_idempotent_tool_retries_with_a_longer_timeout(ctx: RunContext) -> None:
    tool = FakeTool(_sleeps(0.1), timeout_s=0.05, idempotent=True, retry=FAST_RETRY)
    result = await ToolPipeline([tool]).execute(call(), ctx)
    # Attempt 1 times out at 0.05 s; attempt 2 gets 0.2 s and finishes.
    assert not result.is_error and result.observation == "done on attempt 2"
    assert result.retries == 1 and tool.calls == 2


async def test_non_idempotent_tool_is_not_retried(ctx: RunContext) -> None:
    tool = FakeTool(_sleeps(0.1), timeout_s=0.05, idempotent=False, retry=FAST_RETRY)
    result = await ToolPipeline([tool]).execute(call(), ctx)
    assert error_of(result)["type"] == "timeout" and result.retries == 0 and tool.calls == 1


async def test_retries_back_off_and_stop(ctx: RunContext) -> None:
    times: list[float] = []

    async def busy(args: FakeInput, attempt: int) -> Any:
        times.append(time.monotonic())
        raise ToolError("pool exhausted", ErrorType.RESOURCE_ERROR)

    policy = RetryPolicy(max_retries=2, initial_delay_s=0.03, backoff_multiplier=2)
    tool = FakeTool(busy, idempotent=True, retry=policy)
    result = await ToolPipeline([tool]).execute(call(), ctx)
    assert error_of(result)["message"] == "pool exhausted (tried 3 times)" and result.retries == 2
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert gaps[0] >= 0.03 and gaps[1] >= 0.06

    async def wrong(args: FakeInput, attempt: int) -> Any:
        raise ToolError("syntax error")  # the model's mistake: retrying cannot help

    stubborn = FakeTool(wrong, name="wrong", idempotent=True, retry=policy)
    await ToolPipeline([stubborn]).execute(call("wrong"), ctx)
    assert stubborn.calls == 1


# --- circuit breaker -----------------------------------------------------------------------------


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_circuit_breaker_opens_probes_and_closes(ctx: RunContext) -> None:
    clock = FakeClock()
    healthy = False

    async def flaky(args: FakeInput, attempt: int) -> str:
        if not healthy:
            raise ToolError("warehouse unreachable", ErrorType.RESOURCE_ERROR)
        return "rows"

    tool = FakeTool(flaky)
    config = ToolPipelineConfig(breaker_failures=2, breaker_cooldown_s=10)
    pipeline = ToolPipeline([tool], config, clock=clock)
    for _ in range(2):
        assert error_of(await pipeline.execute(call(), ctx))["code"] == "RESOURCE_ERROR"

    refused = error_of(await pipeline.execute(call(), ctx))  # open: the tool is not called
    assert (refused["type"], refused["code"], refused["retry_after_s"]) == (
        "resource_error",
        "TOOL_DISABLED",
        10,
    )
    assert "temporarily disabled" in refused["message"] and "in 10 s" in refused["message"]
    assert tool.calls == 2
    clock.now += 4
    assert error_of(await pipeline.execute(call(), ctx))["retry_after_s"] == 6

    clock.now += 6  # half-open: one probe runs; it fails, so the breaker opens again at once
    assert error_of(await pipeline.execute(call(), ctx))["code"] == "RESOURCE_ERROR"
    assert tool.calls == 3
    assert error_of(await pipeline.execute(call(), ctx))["code"] == "TOOL_DISABLED"

    clock.now += 10
    healthy = True
    assert (await pipeline.execute(call(), ctx)).observation == "rows"  # the probe closes it
    assert (await pipeline.execute(call(), ctx)).observation == "rows"
    assert tool.calls == 5


async def test_model_mistakes_do_not_open_the_breaker(ctx: RunContext) -> None:
    async def bad_sql(args: FakeInput, attempt: int) -> Any:
        raise ToolError("no such column: gmvv")

    tool = FakeTool(bad_sql)
    pipeline = ToolPipeline([tool], ToolPipelineConfig(breaker_failures=2))
    for _ in range(4):
        assert error_of(await pipeline.execute(call(), ctx))["code"] == "EXECUTION_ERROR"
    assert tool.calls == 4


def test_half_open_admits_a_single_probe() -> None:
    clock = FakeClock()
    breaker = CircuitBreaker(failure_threshold=1, cooldown_s=5, clock=clock)
    breaker.record(breaker.acquire(), ok=False)
    assert breaker.state is BreakerState.OPEN
    clock.now += 5
    probe, other = breaker.acquire(), breaker.acquire()
    assert probe.allowed and probe.probe and not other.allowed
    breaker.record(probe, ok=None)  # a cancelled probe frees the slot and proves nothing
    assert breaker.state is BreakerState.HALF_OPEN
    retry = breaker.acquire()
    breaker.record(retry, ok=True)
    assert breaker.state is BreakerState.CLOSED


# --- parallel calls ------------------------------------------------------------------------------


async def test_concurrency_safe_calls_overlap_and_keep_call_order(ctx: RunContext) -> None:
    spans: dict[str, tuple[float, float]] = {}

    def timed(name: str, seconds: float, safe: bool) -> FakeTool:
        async def behave(args: FakeInput, attempt: int) -> str:
            start = time.monotonic()
            await asyncio.sleep(seconds)
            spans[name] = (start, time.monotonic())
            return f"{name} done"

        return FakeTool(behave, name=name, concurrency_safe=safe)

    pipeline = ToolPipeline(
        [
            timed("slow", 0.2, True),
            timed("quick", 0.05, True),
            timed("write", 0.05, False),
            timed("after", 0.05, True),
        ]
    )
    calls = [call(name, call_id=f"toolu_{name}") for name in ("slow", "quick", "write", "after")]
    results = await pipeline.execute_many(calls, ctx)

    assert [r.tool_use_id for r in results] == ["toolu_slow", "toolu_quick", "toolu_write", "toolu_after"]
    assert [r.observation for r in results] == ["slow done", "quick done", "write done", "after done"]
    assert spans["quick"][0] < spans["slow"][1]  # the two safe calls ran at the same time
    assert spans["write"][0] >= max(spans["slow"][1], spans["quick"][1])  # the unsafe one alone
    assert spans["after"][0] >= spans["write"][1]
