"""The contract between the gateway and a chat platform adapter."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel

from agent_core.messages import Attachment, InboundMessage, OutboundReply


class ConnectionState(StrEnum):
    """A long-lived platform connection (Feishu long connection, Slack Socket Mode)."""

    CONNECTING = "connecting"
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"
    STOPPED = "stopped"


class ConnectionStatus(BaseModel):
    """What /readyz reports about a long-lived platform connection."""

    state: ConnectionState
    connected_since: datetime | None = None  # first frame on the current connection
    last_frame_at: datetime | None = None  # any frame, pings and pongs included
    last_event_at: datetime | None = None
    restarts: int = 0  # connections replaced by the adapter's supervisor


class AcceptOutcome(StrEnum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"


# The gateway's durable inbox. An adapter calls it once per parsed message and answers the
# platform only after it returns: the message is committed to the database by then.
AcceptMessage = Callable[[InboundMessage], Awaitable[AcceptOutcome]]


class AnswerStream(Protocol):
    """A reply being written live (a Slack message edited in place, a Feishu streaming card)."""

    async def update(self, text_so_far: str) -> None:
        """Show the answer so far (Markdown); implementations throttle platform calls."""

    async def close(self) -> None:
        """End streaming mode; the final answer follows through `Responder.deliver`."""


class Responder(Protocol):
    """Renders progress and answers back to one platform."""

    platform: str

    async def show_progress(self, msg: InboundMessage) -> None:
        """Tell the user at once that the bot is on it (a reaction, a status line)."""

    async def show_status(self, msg: InboundMessage, status: str) -> None:
        """Update the progress line (e.g. "Running sql_query…"); best effort."""

    async def open_stream(self, msg: InboundMessage, delivery_id: str) -> AnswerStream | None:
        """Start a live answer, or None when the platform or configuration does not stream."""

    async def deliver(
        self, msg: InboundMessage, reply: OutboundReply, delivery_id: str, *, resumed: bool = False
    ) -> None:
        """Post the final answer in the right place.

        Idempotent per `delivery_id`: `resumed` says an earlier attempt may have posted some or
        all of it (a crash between posting and recording); nothing may then be posted twice.
        """

    async def clear_progress(self, msg: InboundMessage) -> None:
        """Remove the progress indicator; best effort."""

    async def resolve_attachments(self, msg: InboundMessage) -> list[Attachment]:
        """The files to fetch for `msg`: its own, with any that stand for another message (a
        quoted file) replaced by that message's files."""

    async def fetch_attachment(
        self, msg: InboundMessage, attachment: Attachment, dest: Path, max_bytes: int
    ) -> Path:
        """Download a file the user shared into `dest` (raises `AttachmentError`)."""

    def mention(self, user: str) -> str:
        """Markup that notifies `user` in a post (empty where the platform has none)."""

    def dm_address(self, user: str) -> str | None:
        """The channel to post to for a direct message to `user`, when the platform can address
        a DM by user alone; None when only the DM conversation's own id will do."""
