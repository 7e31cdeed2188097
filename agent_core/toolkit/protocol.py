"""The tool protocol: one declaration per tool (a pydantic input model), one result shape.

A tool is a name, a description for the model, a pydantic input model and ``run``, which
returns raw data and never formats it; failures the model should hear about are `ToolError`.
What runs around a tool -- validation, circuit breaker, timeout and retries, output levels,
data files -- is the call pipeline, `agent_core.toolkit.pipeline`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar, Generic, TypeVar

from pydantic import BaseModel

from agent_core.messages import ToolUseBlock
from agent_core.run_context import RunContext
from agent_core.toolkit import formatting
from agent_core.toolkit.formatting import ErrorType
from agent_core.toolkit.levels import OUTPUT_LEVEL_FIELD, LevelSource, OutputLevel, output_level_schema
from agent_core.toolkit.resilience import RetryPolicy

__all__ = ["ErrorType", "NotedResult", "Tool", "ToolError", "ToolResult", "error_observation"]


class ToolError(Exception):
    """A failure the model should hear about (and may correct), not a crash.

    ``code`` is a stable machine-readable name (default: the error type in capitals);
    ``retry_after_s`` tells the model when trying again makes sense.
    """

    error_type: ErrorType = ErrorType.EXECUTION_ERROR

    def __init__(
        self,
        message: str,
        error_type: ErrorType | None = None,
        *,
        code: str | None = None,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(message)
        if error_type is not None:
            self.error_type = error_type
        self.code = code or self.error_type.value.upper()
        self.retry_after_s = retry_after_s


class ToolResult(BaseModel):
    """The outcome of one tool call: the observation for the model plus engineering data."""

    tool_use_id: str
    tool_name: str
    observation: str  # the only part the model sees
    is_error: bool = False
    # Engineering data, never shown to the model:
    error_type: ErrorType | None = None
    error_code: str | None = None
    duration_ms: float = 0.0
    retries: int = 0
    output_level: OutputLevel | None = None
    level_source: LevelSource | None = None
    data_file: str | None = None  # virtual path (/data/<name>) of the stored complete data
    size_bytes: int = 0  # size of the complete data, serialized
    data_hash: str | None = None  # SHA-256 of the stored data
    evicted: bool = False  # the observation was replaced by a head+tail preview


class NotedResult(BaseModel):
    """Raw data a tool returns with a note for the asker: the pipeline puts ``access_note``
    (how the access policy limited the data) in the observation, for the model to pass on."""

    access_note: str | None = None


InputT = TypeVar("InputT", bound=BaseModel)


class Tool(ABC, Generic[InputT]):
    """A tool: a name, a description for the model, an input model, and `run`.

    A tool is parameterized by its input model (``class SqlQueryTool(Tool[SqlQueryInput])``)
    so ``run`` receives exactly the validated ``Input`` instance.

    Class-level declarations the pipeline acts on:
    ``timeout_s`` per attempt; ``default_output_level`` (None: the global default);
    ``idempotent`` -- running it twice is harmless, so failures are retried by ``retry``;
    ``concurrency_safe`` -- it may run alongside other calls of the same model turn.
    """

    name: ClassVar[str]
    # Usually set on the class; not a ClassVar so that a tool built from configuration (`task`)
    # may set its own on the instance.
    description: str
    # Not a ClassVar because a ClassVar may not mention a type variable (and `task` builds its
    # model per instance); most tools set it on the class: ``Input = SqlQueryInput``.
    Input: type[InputT]
    timeout_s: ClassVar[float] = 60.0
    default_output_level: ClassVar[OutputLevel | None] = None
    idempotent: ClassVar[bool] = False
    concurrency_safe: ClassVar[bool] = False
    retry: ClassVar[RetryPolicy] = RetryPolicy()

    @abstractmethod
    async def run(self, args: InputT, ctx: RunContext) -> Any:
        """Do the work and return raw data (str, pydantic model, table, JSON-able value)."""

    def spec(self, global_default: OutputLevel = OutputLevel.STANDARD) -> dict[str, Any]:
        """The tool as declared to the Messages API, with the ``output_level`` argument added."""
        schema = self.Input.model_json_schema()
        schema.setdefault("properties", {})[OUTPUT_LEVEL_FIELD] = output_level_schema(
            self.default_output_level, global_default
        )
        return {"name": self.name, "description": self.description, "input_schema": schema}


def error_observation(
    call: ToolUseBlock,
    error_type: ErrorType,
    message: str,
    *,
    code: str | None = None,
    retry_after_s: float | None = None,
) -> str:
    """The standard error observation for ``call`` (for hooks that refuse a call themselves)."""
    return formatting.error_observation(
        error_type=error_type,
        code=code or error_type.value.upper(),
        message=message,
        tool=call.name,
        tool_use_id=call.id,
        retry_after_s=retry_after_s,
    )
