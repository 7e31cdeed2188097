"""The one message model: what the agent stores, what the model sees, what adapters produce.

Content blocks follow the Anthropic Messages API shape so a stored message can be sent back to
the model verbatim (thinking blocks keep their signature byte for byte).
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from agent_core.i18n import Language, reply_language
from agent_core.provenance import Provenance

SCHEMA_VERSION = 2  # see agent_core.store.schema for the upgrades from older rows


def new_id() -> str:
    """A random, globally unique id (hex uuid4)."""
    return uuid.uuid4().hex


def utcnow() -> datetime:
    return datetime.now(UTC)


class TextBlock(BaseModel):
    type: Literal["text"] = "text"
    text: str


class ThinkingBlock(BaseModel):
    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str


class RedactedThinkingBlock(BaseModel):
    type: Literal["redacted_thinking"] = "redacted_thinking"
    data: str


class ToolUseBlock(BaseModel):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]


class ToolResultBlock(BaseModel):
    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    content: str
    is_error: bool = False


ContentBlock = Annotated[
    TextBlock | ThinkingBlock | RedactedThinkingBlock | ToolUseBlock | ToolResultBlock,
    Field(discriminator="type"),
]


class Role(StrEnum):
    USER = "user"
    ASSISTANT = "assistant"


class StandardMessage(BaseModel):
    """One turn of a conversation. Tool results travel as user messages, as the API requires."""

    schema_version: int = SCHEMA_VERSION
    id: str = Field(default_factory=new_id)
    thread_id: str
    role: Role
    content: list[ContentBlock]
    created_at: datetime = Field(default_factory=utcnow)
    _api: dict[str, Any] | None = PrivateAttr(default=None)

    def to_api(self) -> dict[str, Any]:
        """The message as the Messages API expects it (rendered once: messages are immutable)."""
        if self._api is None:
            self._api = {"role": self.role.value, "content": [b.model_dump() for b in self.content]}
        return self._api

    @property
    def text(self) -> str:
        """The visible text of the message (text blocks joined)."""
        return "\n".join(b.text for b in self.content if isinstance(b, TextBlock))

    def tool_uses(self) -> list[ToolUseBlock]:
        return [b for b in self.content if isinstance(b, ToolUseBlock)]

    def tool_results(self) -> list[ToolResultBlock]:
        return [b for b in self.content if isinstance(b, ToolResultBlock)]


class ThreadKey(BaseModel):
    """Where a conversation lives: one platform thread, or a DM's ongoing top-level conversation."""

    model_config = ConfigDict(frozen=True)

    platform: str
    workspace: str
    channel: str
    root: str  # the platform's thread root id, or "main" for a DM's top-level conversation

    def __str__(self) -> str:
        return f"{self.platform}:{self.workspace}:{self.channel}:{self.root}"


class Attachment(BaseModel):
    """A file the user shared with the message; downloaded by the adapter on demand."""

    file_id: str
    name: str
    mime_type: str = "application/octet-stream"
    size: int | None = None
    url: str | None = None


# What a person's click on an approval request asks for (its buttons' values on every platform).
ClickChoice = Literal["approve", "reject"]
# What a decision asks for: a click, or the expiry sweep's "expire".
ApprovalChoice = Literal[ClickChoice, "expire"]


class ApprovalClick(BaseModel):
    """A decision on an approval request posted in a thread (a button, or the expiry sweep)."""

    approval_id: str
    choice: ApprovalChoice


class InboundMessage(BaseModel):
    """A user message addressed to the bot, already verified and parsed by its adapter."""

    platform: str
    event_id: str
    message_id: str  # the platform's id of this user message (Slack ts, Feishu message_id)
    workspace: str
    channel: str
    thread: ThreadKey
    reply_in_thread: str | None  # thread root to answer in; None answers at the top level
    user: str
    user_name: str | None = None
    # The user's locale as their platform states it ("zh-CN", "en-US"), None where it does not.
    locale: str | None = None
    text: str
    is_dm: bool = False
    attachments: list[Attachment] = Field(default_factory=list)
    received_at: datetime = Field(default_factory=utcnow)
    # Set on a click on an approval request's buttons (an "action" event, `text` is empty): its
    # `message_id` is the approval's, so a second decision on it is a duplicate of the first.
    approval: ApprovalClick | None = None
    # Set on a scheduled run (a report: "report:<schedule id>"): nobody asks live, `user` is
    # its creator, whose access limits the run on top of where it posts (agent_core.governance).
    scheduled_run: str | None = None
    # Set on a choice from the platform's bot menu ("new_analysis", "my_monitors",
    # "my_reports"; `text` is empty): the gateway answers it without the model.
    menu: str | None = None
    # Set on a Stop click (Slack's agent session Stop, a Feishu card button; `text` is empty):
    # the thread's running (or waiting) turn ends with its partial answer, marked stopped.
    stop: bool = False

    @property
    def language(self) -> Language:
        """The language the bot writes to this user in (see `agent_core.i18n.reply_language`)."""
        return reply_language(self.locale, self.text)

    @property
    def dedupe_key(self) -> str:
        """Identity of the user message across event types and redeliveries."""
        return f"{self.platform}:{self.workspace}:{self.channel}:{self.message_id}"


class OutboundFile(BaseModel):
    """A file the agent produced for the user (a chart, a report), by its real path on disk."""

    path: str
    title: str
    mime_type: str = "application/octet-stream"


class OutboundReply(BaseModel):
    """What the agent answers: Markdown text plus files to post beside it, and where its data
    came from (None: the answer used no data) for the adapter to show under it."""

    text: str
    files: list[OutboundFile] = Field(default_factory=list)
    provenance: Provenance | None = None
    # Set on the agent's answers: the id 👍/👎 under it name (its delivery id).
    answer_id: str | None = None
