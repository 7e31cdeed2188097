"""Prints progress and answers to a terminal; signals when each answer is complete."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import TextIO

from adapters.download import AttachmentError
from agent_core.messages import Attachment, InboundMessage, OutboundReply

PLATFORM = "console"


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
    """Implements `adapters.base.Responder` on a terminal."""

    platform = PLATFORM

    def __init__(self, out: TextIO = sys.stdout) -> None:
        self._out = out
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

    def mention(self, user: str) -> str:
        return ""

    def dm_address(self, user: str) -> str | None:
        return user  # the terminal is the user's DM

    async def resolve_attachments(self, msg: InboundMessage) -> list[Attachment]:
        return msg.attachments

    async def fetch_attachment(
        self, msg: InboundMessage, attachment: Attachment, dest: Path, max_bytes: int
    ) -> Path:
        raise AttachmentError("the console has no file attachments")
