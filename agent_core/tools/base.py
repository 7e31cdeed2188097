"""The tool protocol: one declaration per tool (a pydantic input model), one result shape.

Tools return raw data; the registry validates input, runs the tool under its timeout and turns
the outcome into a `ToolResult` whose `observation` is all the model ever sees of it.
"""

from __future__ import annotations

import asyncio
import json
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar

from pydantic import BaseModel, ValidationError

from agent_core.messages import OutboundFile, ToolUseBlock


class ErrorType(StrEnum):
    PERMISSION_DENIED = "permission_denied"
    TIMEOUT = "timeout"
    INVALID_PARAMETERS = "invalid_parameters"
    EXECUTION_ERROR = "execution_error"
    RESOURCE_ERROR = "resource_error"


class ToolError(Exception):
    """A failure the model should hear about (and may correct), not a crash."""

    error_type: ErrorType = ErrorType.EXECUTION_ERROR

    def __init__(self, message: str, error_type: ErrorType | None = None) -> None:
        super().__init__(message)
        if error_type is not None:
            self.error_type = error_type


@dataclass
class ToolContext:
    """What a tool may know about the conversation it runs in."""

    thread_id: str
    data_dir: Path
    channel: str = ""
    user: str = ""
    is_dm: bool = False
    # Files a tool made for the user (charts, reports): posted beside the turn's answer.
    produced_files: list[OutboundFile] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)


class ToolResult(BaseModel):
    """The outcome of one tool call: the observation for the model plus engineering data."""

    tool_use_id: str
    tool_name: str
    observation: str
    is_error: bool = False
    error_type: ErrorType | None = None
    duration_ms: float = 0.0
    retries: int = 0
    output_level: str | None = None
    data_file: str | None = None
    size_bytes: int = 0


class Tool(ABC):
    """A tool: a name, a description for the model, an input model, and `run`."""

    name: ClassVar[str]
    description: ClassVar[str]
    Input: ClassVar[type[BaseModel]]
    timeout_s: ClassVar[float] = 60.0

    @abstractmethod
    async def run(self, args: BaseModel, ctx: ToolContext) -> Any:
        """Do the work and return raw data (str, pydantic model, or JSON-able value)."""

    def spec(self) -> dict[str, Any]:
        """The tool as declared to the Messages API."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.Input.model_json_schema(),
        }


def render_raw(data: Any) -> str:
    """Plain rendering of raw tool data into an observation string."""
    if isinstance(data, str):
        return data
    if isinstance(data, BaseModel):
        return data.model_dump_json(indent=1)
    return json.dumps(data, ensure_ascii=False, default=str, indent=1)


def error_observation(call: ToolUseBlock, error_type: ErrorType, message: str) -> str:
    """The one standard error observation every failed tool call produces."""
    return json.dumps(
        {
            "error": {
                "type": error_type.value,
                "message": message,
                "tool": call.name,
                "tool_use_id": call.id,
            }
        },
        ensure_ascii=False,
    )


class ToolRegistry:
    """The tools available to a conversation, declared once, executed safely."""

    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools or []:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"tool {tool.name!r} registered twice")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[dict[str, Any]]:
        return [tool.spec() for tool in self._tools.values()]

    async def execute(self, call: ToolUseBlock, ctx: ToolContext) -> ToolResult:
        """Run one tool call. Never raises for tool failures: they become error results."""
        started = time.perf_counter()

        def failed(error_type: ErrorType, message: str) -> ToolResult:
            return ToolResult(
                tool_use_id=call.id,
                tool_name=call.name,
                observation=error_observation(call, error_type, message),
                is_error=True,
                error_type=error_type,
                duration_ms=(time.perf_counter() - started) * 1000,
            )

        tool = self._tools.get(call.name)
        if tool is None:
            return failed(ErrorType.INVALID_PARAMETERS, f"unknown tool {call.name!r}")
        try:
            args = tool.Input.model_validate(call.input)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc']) or 'input'}: {err['msg']}" for err in exc.errors()
            )
            return failed(ErrorType.INVALID_PARAMETERS, problems)
        try:
            raw = await asyncio.wait_for(tool.run(args, ctx), timeout=tool.timeout_s)
        except TimeoutError:
            return failed(ErrorType.TIMEOUT, f"{call.name} did not finish within {tool.timeout_s:g}s")
        except ToolError as exc:
            return failed(exc.error_type, str(exc))
        except Exception as exc:  # a tool bug must not end the conversation
            return failed(ErrorType.EXECUTION_ERROR, f"{type(exc).__name__}: {exc}")
        observation = render_raw(raw)
        return ToolResult(
            tool_use_id=call.id,
            tool_name=call.name,
            observation=observation,
            duration_ms=(time.perf_counter() - started) * 1000,
            size_bytes=len(observation.encode()),
        )
