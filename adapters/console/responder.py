"""Prints progress and answers to a terminal; signals when each answer is complete."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from typing import TextIO

from adapters.approval_clicks import accept_click
from adapters.base import GatewayServices
from agent_core.governance.approval import ApprovalStatus, ApprovalView
from agent_core.i18n import Language, t
from agent_core.messages import ClickChoice, InboundMessage, OutboundReply, new_id
from agent_core.monitors.model import AlertView

PLATFORM = "console"
_YES = {"y", "yes", "是"}  # the approval prompt's answers that approve


class _ConsoleStream:
    def __init__(self, out: TextIO) -> None:
        self._out = out
        self.shown = ""

    async def update(self, text_so_far: str) -> None:
        if not text_so_far.startswith(self.shown):  # a restarted model call: start a new line
            self._out.write("\n")
            self.shown = ""
        self._out.write(text_so_far[len(self.shown) :])
        self._out.flush()
        self.shown = text_so_far

    async def close(self) -> None:
        return None


class ConsoleResponder:
    """Implements `adapters.base.Responder` on a terminal, with progress lines, the answer
    streamed as it is written, approvals asked at the prompt, and alerts printed."""

    platform = PLATFORM

    def __init__(
        self, out: TextIO = sys.stdout, read_line: Callable[[str], str] = input, services: GatewayServices | None = None
    ) -> None:
        self._out = out
        self._read_line = read_line
        self._services = services
        self._streams: dict[str, _ConsoleStream] = {}
        self._answered: dict[str, asyncio.Event] = {}

    def answered(self, msg: InboundMessage) -> asyncio.Event:
        """An event set once the answer to `msg` has been printed."""
        return self._answered.setdefault(msg.message_id, asyncio.Event())

    async def show_progress(self, msg: InboundMessage) -> None:
        self._out.write("bot> ")
        self._out.flush()

    async def show_status(self, msg: InboundMessage, status: str) -> None:
        self._out.write(f"\n  · {status}\n")
        self._out.flush()

    async def open_stream(self, msg: InboundMessage, delivery_id: str) -> _ConsoleStream:
        stream = _ConsoleStream(self._out)
        self._streams[delivery_id] = stream
        return stream

    async def deliver(
        self, msg: InboundMessage, reply: OutboundReply, delivery_id: str, *, resumed: bool = False
    ) -> None:
        stream = self._streams.pop(delivery_id, None)
        if stream is None or stream.shown.strip() != reply.text.strip():
            self._out.write(("\n" if stream and stream.shown else "") + reply.text)
        for file in reply.files:
            self._out.write(f"\n  [file] {file.title}: {file.path}")
        self._out.write("\n\n")
        self._out.flush()

    async def clear_progress(self, msg: InboundMessage) -> None:
        self.answered(msg).set()

    async def ask_approval(self, msg: InboundMessage, approval: ApprovalView, *, resumed: bool = False) -> str | None:
        """Show the request and ask at once: the terminal's user is the asker, and the answer
        is accepted like a click (the turn resumes after this one's event is done). Resumed or
        not: an earlier attempt's question left the terminal with its process."""
        request, language = approval.request, msg.language
        if request.estimated_rows is not None:
            estimate = t(language, "~{rows} rows", rows=f"{request.estimated_rows:,}")
        else:
            estimate = t(language, "unknown")
        asked = t(
            language,
            "Approval needed for a query on {source} ({reasons}).\nTables: {tables}; estimated scan: {estimate}",
            source=request.source,
            reasons="; ".join(request.reasons),
            tables=", ".join(request.tables) or t(language, "none"),
            estimate=estimate,
        )
        self._out.write("\n" + "".join(f"  {line}\n" for line in asked.splitlines()) + f"  SQL: {request.sql}\n")
        self._out.flush()
        line = await asyncio.to_thread(self._read_line, "  " + t(language, "approve? [y/N]") + " ")
        choice: ClickChoice = "approve" if line.strip().lower() in _YES else "reject"
        services = self._services
        if services is not None and services.approvals is not None:
            await accept_click(
                services.approvals, services.accept, platform=self.platform, approval_id=approval.id,
                choice=choice, user=msg.user, user_name=msg.user_name, event_id=f"console:{new_id()}",
            )  # fmt: skip
        return approval.id

    async def show_decision(self, msg: InboundMessage, approval: ApprovalView) -> None:
        self._out.write(f"\n  · {_decision(approval.status, msg.language)}\n")
        self._out.flush()

    async def post_alert(self, alert: AlertView) -> str | None:
        self._out.write(f"\n{alert.markdown()}\n")
        self._out.flush()
        return alert.id

    def dm_address(self, user: str) -> str | None:
        return user  # the terminal is the user's DM

    async def close(self) -> None:
        return None  # a terminal holds no connection


def _decision(status: ApprovalStatus, language: Language) -> str:
    if status is ApprovalStatus.APPROVED:
        return t(language, "Approved")
    if status is ApprovalStatus.REJECTED:
        return t(language, "Rejected")
    if status is ApprovalStatus.EXPIRED:
        return t(language, "Expired")
    return t(language, "Withdrawn")
