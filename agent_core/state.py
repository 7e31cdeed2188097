"""Per-conversation working state that outlives a turn: active skills, todos, context and usage."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from agent_core.skills.activation import SkillActivationStack

TodoStatus = Literal["pending", "in_progress", "done"]


class ApprovalRequest(BaseModel):
    """One tool call that waits for a decision: what it would run, and who may decide."""

    model_config = ConfigDict(frozen=True)

    tool_use_id: str
    tool_name: str
    source: str
    tables: list[str] = Field(default_factory=list)
    estimated_rows: int | None = None  # the engine's EXPLAIN estimate, when it was asked
    sql: str  # as it would run, after the access policy's rewrite
    reasons: list[str]  # why it needs approval, for the people asked
    approvers_group: str | None = None
    # Who may decide besides the asker, as platform:user_id (the group's members when asked).
    approvers: list[str] = Field(default_factory=list)


class Todo(BaseModel):
    id: int
    content: str
    status: TodoStatus = "pending"


class ThreadUsage(BaseModel):
    """Token accounting of one conversation (see `agent_core.tokens`).

    The model's reported usage for the last request is the ground truth for the context size;
    what was stored since is estimated offline, so the running estimate costs only the new
    messages, never a recount of the history.
    """

    model: str | None = None  # model of the last request
    context_window: int | None = None  # of that model
    last_context_tokens: int | None = None  # input + cache read + cache write of the last request
    last_request_messages: int = 0  # stored messages the last request was built from
    last_view_version: int = 0  # `ContextState.version` the last request was rendered with
    last_request_at: datetime | None = None
    requests: int = 0  # model requests, summaries included
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float = 0.0  # estimated from the price table
    compression_events: int = 0

    @property
    def fill(self) -> float:
        """How full the context window was at the last request (0..1, 0 when unknown)."""
        if not self.last_context_tokens or not self.context_window:
            return 0.0
        return self.last_context_tokens / self.context_window


class ContextState(BaseModel):
    """What is sent instead of the oldest stored messages (the messages themselves never change).

    Both marks only move forward, and the rendering they drive is deterministic, so the bytes
    sent for old messages stay identical from one request to the next (the prompt cache holds
    them) until the next compression moves a mark.
    """

    summary: str | None = None  # sent instead of the first `summary_through` stored messages
    model_summary: str | None = None  # the model-written part of it, folded into the next one
    summary_through: int = 0
    summary_through_id: str | None = None  # id of the last summarized message (sanity check)
    pruned_before: int = 0  # large tool results of older messages are sent as placeholders
    version: int = 0  # bumped whenever a mark moves
    compressed_at: datetime | None = None


class RefocusState(BaseModel):
    """When the next `<system-reminder>` is due (see `agent_core.hooks.refocus`)."""

    last_reminder_call: int = 0  # `ThreadState.model_calls` when the last reminder was sent
    idle_resume: bool = False  # set by the idle-threads job: remind at the next request


class ThreadState(BaseModel):
    """Stored as JSON with the thread; read at the start of a turn, saved as it changes."""

    skills: SkillActivationStack = Field(default_factory=SkillActivationStack)
    todos: list[Todo] = Field(default_factory=list)
    model_calls: int = 0  # across turns: drives periodic refocus reminders
    usage: ThreadUsage = Field(default_factory=ThreadUsage)
    context: ContextState = Field(default_factory=ContextState)
    refocus: RefocusState = Field(default_factory=RefocusState)
    # The tool call the turn paused on until someone approves it in the thread (agent loop).
    paused: ApprovalRequest | None = None

    def open_todos(self) -> list[Todo]:
        return [t for t in self.todos if t.status != "done"]
