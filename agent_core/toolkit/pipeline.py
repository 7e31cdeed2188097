"""The call pipeline around every tool: from the model's call to the observation it reads.

1. check the input -- size cap, the ``output_level`` argument every tool accepts, then the
   tool's pydantic input model;
2. ask the tool's circuit breaker whether it may run at all;
3. run it under its timeout, retrying idempotent tools by their `RetryPolicy`;
4. decide the output level (levels.py), shape and format the data (formatting.py), and write
   large or FULL data to the conversation's ``/data`` area (storage.py);
5. return a `ToolResult`: the observation -- all the model ever sees -- plus engineering data.

Failures of any kind become the one standard error observation; `execute` never raises for
them. `execute_many` runs one model turn's calls, concurrency-safe ones in parallel.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_core.messages import ToolUseBlock
from agent_core.run_context import RunContext, RunDeps
from agent_core.toolkit.formatting import (
    ErrorType,
    FormatSettings,
    Serialized,
    Shape,
    compose_observation,
    estimate_tokens,
    head_tail_preview,
    render,
    serialize,
    shape_of,
)
from agent_core.toolkit.levels import (
    OUTPUT_LEVEL_FIELD,
    LevelSource,
    OutputLevel,
    decide_output_level,
    parse_output_level,
)
from agent_core.toolkit.protocol import NotedResult, Tool, ToolError, ToolResult, error_observation
from agent_core.toolkit.resilience import CircuitBreaker
from agent_core.toolkit.storage import DataFileStore, StoredFile
from agent_core.units import human_size
from agent_core.workspace.backend import WorkspaceError

log = logging.getLogger(__name__)

# Failures that say the tool (or what it depends on) is unwell, as opposed to the model having
# asked for something wrong; only these count towards opening the circuit breaker.
_HEALTH_FAILURES = frozenset({ErrorType.TIMEOUT, ErrorType.RESOURCE_ERROR})
_CRASHED = "TOOL_CRASHED"


class ToolPipelineConfig(BaseModel):
    """Global knobs of the tool pipeline."""

    model_config = ConfigDict(frozen=True)

    default_output_level: OutputLevel = OutputLevel.STANDARD
    context_pressure: float = Field(0.8, gt=0, le=1)  # above this fill, results are BRIEF
    max_input_bytes: int = Field(256 * 1024, ge=1)  # larger call inputs are refused
    file_threshold_bytes: int = Field(1024 * 1024, ge=1)  # larger data goes to a file at any level
    full_inline_tokens: int = Field(10_000, ge=1)  # FULL shows data inline up to this size
    evict_tokens: int = Field(20_000, ge=100)  # larger observations become head+tail previews
    preview_head_tokens: int = Field(2_000, ge=10)
    preview_tail_tokens: int = Field(500, ge=0)
    max_data_file_bytes: int = Field(50 * 1024 * 1024, ge=1)
    breaker_failures: int = Field(5, ge=1)  # consecutive failed calls that open the breaker
    breaker_cooldown_s: float = Field(30.0, ge=0)
    format: FormatSettings = FormatSettings()


class _CallFailed(Exception):
    def __init__(self, error: ToolError, retries: int) -> None:
        self.error = error
        self.retries = retries


class ToolPipeline:
    """The tools available to a conversation, declared once, executed safely."""

    def __init__(
        self,
        tools: list[Tool[Any]] | None = None,
        config: ToolPipelineConfig | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config or ToolPipelineConfig()
        self._clock = clock
        self._tools: dict[str, Tool[Any]] = {}
        self._specs: list[dict[str, Any]] | None = None
        self._breakers: dict[str, CircuitBreaker] = {}
        self._files = DataFileStore(self.config.max_data_file_bytes)
        for tool in tools or []:
            self.register(tool)

    def register(self, tool: Tool[Any]) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} registered twice")
        if OUTPUT_LEVEL_FIELD in tool.Input.model_fields:
            raise ValueError(f"tool {tool.name!r}: {OUTPUT_LEVEL_FIELD!r} is reserved for the pipeline")
        self._tools[tool.name] = tool
        self._specs = None
        self._breakers[tool.name] = CircuitBreaker(
            self.config.breaker_failures, self.config.breaker_cooldown_s, self._clock
        )

    def get(self, name: str) -> Tool[Any] | None:
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[dict[str, Any]]:
        """The tool declarations for the API, built once: they are part of the cached prefix."""
        if self._specs is None:
            self._specs = [tool.spec(self.config.default_output_level) for tool in self._tools.values()]
        return self._specs

    async def execute_many(self, calls: list[ToolUseBlock], ctx: RunContext) -> list[ToolResult]:
        """Run one model turn's tool calls; results come back in the order of ``calls``.

        Consecutive calls of concurrency-safe tools run together; any other call runs alone,
        after everything before it and before everything after it.
        """
        results: list[ToolResult] = []
        for group in self._groups(calls):
            if len(group) == 1:
                results.append(await self.execute(group[0], ctx))
            else:
                recorded = len(ctx.turn.data_used)
                results.extend(await asyncio.gather(*(self.execute(call, ctx) for call in group)))
                # Calls running together record their data as they finish: keep call order.
                order = {call.id: index for index, call in enumerate(group)}
                ctx.turn.data_used[recorded:] = sorted(
                    ctx.turn.data_used[recorded:], key=lambda access: order.get(access.call_id, len(order))
                )
        return results

    def _groups(self, calls: list[ToolUseBlock]) -> list[list[ToolUseBlock]]:
        groups: list[list[ToolUseBlock]] = []
        previous_safe = False
        for call in calls:
            tool = self._tools.get(call.name)
            safe = tool is not None and tool.concurrency_safe
            if safe and previous_safe:
                groups[-1].append(call)
            else:
                groups.append([call])
            previous_safe = safe
        return groups

    async def execute(self, call: ToolUseBlock, ctx: RunContext) -> ToolResult:
        """Run one tool call. Never raises for tool failures: they become error results."""
        started = time.perf_counter()
        tool = self._tools.get(call.name)
        if tool is None:
            known = ", ".join(self._tools) or "none"
            error = ToolError(
                f"unknown tool {call.name!r}; available tools: {known}",
                ErrorType.INVALID_PARAMETERS,
                code="UNKNOWN_TOOL",
            )
            return _failure(call, error, started)
        try:
            args, requested_level = self._parse_input(tool, call)
        except ToolError as invalid:
            return _failure(call, invalid, started)

        breaker = self._breakers[tool.name]
        admission = breaker.acquire()
        if not admission.allowed:
            wait = max(math.ceil(admission.retry_after_s or 0.0), 1)
            disabled = ToolError(
                f"{tool.name} is temporarily disabled after repeated failures. Try it again in "
                f"{wait} s, or continue without it.",
                ErrorType.RESOURCE_ERROR,
                code="TOOL_DISABLED",
                retry_after_s=wait,
            )
            return _failure(call, disabled, started)
        healthy: bool | None = None  # None if we are cancelled: the call proves nothing
        try:
            call_ctx = replace(ctx, tool_call_id=call.id, tool_name=call.name)
            raw, retries = await self._run_with_retries(tool, args, call_ctx)
            healthy = True
        except _CallFailed as failed:
            healthy = failed.error.error_type not in _HEALTH_FAILURES and failed.error.code != _CRASHED
            return _failure(call, failed.error, started, failed.retries)
        finally:
            breaker.record(admission, healthy)

        try:
            return await self._present(call, tool, raw, ctx, requested_level, started, retries)
        except Exception as exc:  # a formatting bug must not end the conversation
            log.exception("tool %s: result of %s could not be presented", tool.name, call.id)
            unreadable = ToolError(
                f"the result could not be read ({type(exc).__name__})", code="UNREADABLE_RESULT"
            )
            return _failure(call, unreadable, started, retries)

    def _parse_input(self, tool: Tool[Any], call: ToolUseBlock) -> tuple[BaseModel, OutputLevel | None]:
        size = len(json.dumps(call.input, ensure_ascii=False, default=str).encode())
        if size > self.config.max_input_bytes:
            raise ToolError(
                f"the input is {human_size(size)}; at most {human_size(self.config.max_input_bytes)} "
                "is accepted. Pass less data, e.g. refer to a table or file instead of inlining it.",
                ErrorType.INVALID_PARAMETERS,
                code="INPUT_TOO_LARGE",
            )
        fields = dict(call.input)
        try:
            requested = parse_output_level(fields.pop(OUTPUT_LEVEL_FIELD, None))
        except ValueError as exc:
            raise ToolError(
                f"{OUTPUT_LEVEL_FIELD}: {exc}", ErrorType.INVALID_PARAMETERS, code="INVALID_INPUT"
            ) from None
        try:
            return tool.Input.model_validate(fields), requested
        except ValidationError as exc:
            raise ToolError(
                validation_message(exc), ErrorType.INVALID_PARAMETERS, code="INVALID_INPUT"
            ) from None

    async def _run_with_retries(self, tool: Tool[Any], args: BaseModel, ctx: RunContext) -> tuple[Any, int]:
        """The tool's raw data and the retries it took; raises `_CallFailed`."""
        policy = tool.retry
        retries = 0
        while True:
            timeout = policy.timeout_s(tool.timeout_s, retries)
            try:
                return await asyncio.wait_for(tool.run(args, ctx), timeout), retries
            except TimeoutError:
                error = ToolError(f"{tool.name} did not finish within {timeout:g} s", ErrorType.TIMEOUT)
            except ToolError as exc:
                error = exc
            except Exception as exc:  # a tool bug must not end the conversation
                log.exception("tool %s crashed", tool.name)
                error = ToolError(f"{type(exc).__name__}: {exc}", code=_CRASHED)
            if not (tool.idempotent and policy.should_retry(error.error_type, retries)):
                raise _CallFailed(error, retries)
            retries += 1
            delay = policy.delay_s(retries)
            log.info("tool %s: %s; retry %d in %.2f s", tool.name, error.code, retries, delay)
            await asyncio.sleep(delay)

    async def _present(
        self,
        call: ToolUseBlock,
        tool: Tool[Any],
        raw: Any,
        ctx: RunContext,
        requested: OutputLevel | None,
        started: float,
        retries: int,
    ) -> ToolResult:
        """Format raw data for the decided level, storing it to a file where it must be."""
        config = self.config
        decision = decide_output_level(
            requested,
            tool.default_output_level,
            config.default_output_level,
            ctx.turn.context_fill,
            config.context_pressure,
        )
        # Shaping and serializing touch every value: off the event loop for large results.
        shape, data = await asyncio.to_thread(_prepare, raw)
        large = len(data.content) > config.file_threshold_bytes
        forced_brief = decision.source is LevelSource.CONTEXT
        notes: list[str] = [raw.access_note] if isinstance(raw, NotedResult) and raw.access_note else []
        if forced_brief:
            notes.append(f"(Shown briefly: the conversation's context is {ctx.turn.context_fill:.0%} full.)")
        full_inline = not large and estimate_tokens(data.text) <= config.full_inline_tokens
        rendered = render(shape, decision.level, config.format, full_inline=full_inline)
        stored: StoredFile | None = None
        # Under context pressure the data is saved too, so what BRIEF leaves out is not lost.
        if decision.level is OutputLevel.FULL or large or (forced_brief and not rendered.complete):
            stored = await self._store(ctx, data, notes)
            if stored is None and rendered.summary:  # no file to point to: show it all instead
                rendered = render(shape, decision.level, config.format)
        observation = compose_observation(rendered, stored=stored, notes=notes)
        evicted = estimate_tokens(observation) > config.evict_tokens
        if evicted:
            if stored is None:
                stored = await self._store(ctx, data, [])
            observation = head_tail_preview(
                observation,
                head_tokens=config.preview_head_tokens,
                tail_tokens=config.preview_tail_tokens,
                stored=stored,
            )
        result = ToolResult(
            tool_use_id=call.id,
            tool_name=call.name,
            observation=observation,
            duration_ms=(time.perf_counter() - started) * 1000,
            retries=retries,
            output_level=decision.level,
            level_source=decision.source,
            data_file=stored.path if stored else None,
            size_bytes=len(data.content),
            data_hash=stored.sha256 if stored else None,
            evicted=evicted,
        )
        log.info(
            "tool %s ok in %.0f ms: level=%s (%s) size=%d file=%s retries=%d evicted=%s",
            call.name,
            result.duration_ms,
            decision.level,
            decision.source,
            result.size_bytes,
            result.data_file,
            retries,
            evicted,
        )
        return result

    async def _store(self, ctx: RunDeps, data: Serialized, notes: list[str]) -> StoredFile | None:
        """Write the data file; on failure say so in ``notes`` and return None."""
        try:
            return await self._files.save(ctx.data_dir, ctx.thread_id, data.content, data.extension)
        except (WorkspaceError, OSError) as exc:
            log.warning("data file for thread %s not written: %s", ctx.thread_id, exc)
            reason = str(exc) if isinstance(exc, WorkspaceError) else "storage error"
            notes.append(f"The complete data could not be saved to a file ({reason}).")
            return None


def _prepare(raw: Any) -> tuple[Shape, Serialized]:
    shape = shape_of(raw)
    return shape, serialize(shape)


def _failure(call: ToolUseBlock, error: ToolError, started: float, retries: int = 0) -> ToolResult:
    message = str(error)
    if retries:
        message += f" (tried {retries + 1} times)"
    log.info("tool %s failed: %s %s: %s", call.name, error.error_type, error.code, message)
    return ToolResult(
        tool_use_id=call.id,
        tool_name=call.name,
        observation=error_observation(
            call, error.error_type, message, code=error.code, retry_after_s=error.retry_after_s
        ),
        is_error=True,
        error_type=error.error_type,
        error_code=error.code,
        duration_ms=(time.perf_counter() - started) * 1000,
        retries=retries,
    )


def validation_message(exc: ValidationError) -> str:
    """Pydantic's errors as ``field: reason (got value)``, one per problem, without its
    "Value error, " prefix or documentation links."""
    problems = []
    for err in exc.errors():
        where = ".".join(str(part) for part in err["loc"]) or "input"
        problem = f"{where}: {str(err['msg']).removeprefix('Value error, ')}"
        if err["type"] != "missing" and err["loc"]:
            problem += f" (got {err['input']!r:.60})"
        problems.append(problem)
    return "; ".join(problems)
