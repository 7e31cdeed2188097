"""Replies to Slack: progress reaction, answers in the right thread, exactly once."""

from __future__ import annotations

import logging
import os
import uuid
from pathlib import Path
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.download import AttachmentError, download
from adapters.slack.render import split_markdown
from agent_core.messages import Attachment, InboundMessage, OutboundReply

log = logging.getLogger(__name__)

PROGRESS_REACTION = "eyes"
SLACK_FILE_HOSTS = (".slack.com", ".slack-edge.com", ".slack-files.com")
REPLY_EVENT_TYPE = "ba_agent_reply"


class SlackResponder:
    """Implements `adapters.base.Responder` for Slack."""

    platform = "slack"

    def __init__(self, client: AsyncWebClient) -> None:
        self._client = client
        self._http: aiohttp.ClientSession | None = None

    async def show_progress(self, msg: InboundMessage) -> None:
        await self._best_effort(
            "reactions.add", channel=msg.channel, timestamp=msg.message_id, name=PROGRESS_REACTION
        )

    async def show_status(self, msg: InboundMessage, status: str) -> None:
        # The status line exists only in Slack's assistant threads (DM threads of AI apps).
        if msg.is_dm and msg.reply_in_thread:
            await self._best_effort(
                "assistant.threads.setStatus",
                channel_id=msg.channel,
                thread_ts=msg.reply_in_thread,
                status=status,
            )

    async def open_stream(self, msg: InboundMessage, delivery_id: str) -> None:
        return None

    async def deliver(
        self, msg: InboundMessage, reply: OutboundReply, delivery_id: str, *, resumed: bool = False
    ) -> None:
        parts = split_markdown(reply.text)
        already, shared = await self._posted(msg, delivery_id) if resumed else (set(), set())
        for index, part in enumerate(parts):
            if index in already:
                continue
            await self._web().chat_postMessage(
                channel=msg.channel,
                thread_ts=msg.reply_in_thread,
                markdown_text=part,
                metadata={
                    "event_type": REPLY_EVENT_TYPE,
                    "event_payload": {"delivery_id": delivery_id, "part": index},
                },
            )
        for file in reply.files:
            # Files carry no metadata; their names are content-hashed (charts, reports), so a
            # file of that name already in the thread is this delivery's, posted before a crash.
            name = Path(file.path).name
            if name in shared:
                continue
            await self._web().files_upload_v2(
                channel=msg.channel,
                thread_ts=msg.reply_in_thread,
                file=file.path,
                title=file.title,
                filename=name,
            )

    async def clear_progress(self, msg: InboundMessage) -> None:
        await self._best_effort(
            "reactions.remove", channel=msg.channel, timestamp=msg.message_id, name=PROGRESS_REACTION
        )

    def mention(self, user: str) -> str:
        return f"<@{user}> "

    def dm_address(self, user: str) -> str | None:
        return user  # Slack delivers a post to a user id into that user's DM with the app

    async def resolve_attachments(self, msg: InboundMessage) -> list[Attachment]:
        return msg.attachments

    async def fetch_attachment(
        self, msg: InboundMessage, attachment: Attachment, dest: Path, max_bytes: int
    ) -> Path:
        if not attachment.url:
            raise AttachmentError(f"{attachment.name} has no download URL")
        if attachment.size is not None and attachment.size > max_bytes:
            raise AttachmentError(f"{attachment.name} is larger than the {max_bytes // 1024**2} MB limit")
        if self._http is None or self._http.closed:
            self._http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120))
        # Downloaded under a short name, then renamed: `dest` may already be as long as a file
        # name can be (a user's 255-byte file name), leaving no room for a temporary suffix.
        staging = dest.with_name(f".fetch-{uuid.uuid4().hex}")
        try:
            await download(
                self._http,
                attachment.url,
                staging,
                headers={"Authorization": f"Bearer {self._client.token}"},
                max_bytes=max_bytes,
                allowed_host_suffixes=SLACK_FILE_HOSTS,
            )
            os.replace(staging, dest)
        except aiohttp.ClientError:
            raise  # a network failure (some are OSErrors too): the turn is retried
        except OSError as exc:
            # The workspace's file system refused the file (full disk, a name it cannot hold).
            raise AttachmentError(f"it could not be saved ({exc.strerror or type(exc).__name__})") from exc
        finally:
            staging.unlink(missing_ok=True)
        return dest

    def _web(self) -> AsyncWebClient:
        # One HTTP session for every Web API call: without one, slack_sdk opens (and on
        # slack.com TLS-handshakes) a new connection per call.
        session = self._client.session
        if session is None or session.closed:
            self._client.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._client.timeout))
        return self._client

    async def close(self) -> None:
        for session in (self._http, self._client.session):
            if session is not None:
                await session.close()

    async def _posted(self, msg: InboundMessage, delivery_id: str) -> tuple[set[int], set[str]]:
        """Text parts of this delivery already in the conversation (found by their message
        metadata), and the names of the files shared there."""
        if msg.reply_in_thread:
            response = await self._web().conversations_replies(
                channel=msg.channel, ts=msg.reply_in_thread, include_all_metadata=True, limit=200
            )
        else:
            # Our answer came after the message was received (a scheduled run's message id is
            # not a Slack timestamp, so the receive time is the bound).
            oldest = f"{msg.received_at.timestamp() - 1:.6f}"
            response = await self._web().conversations_history(
                channel=msg.channel, oldest=oldest, include_all_metadata=True, limit=200
            )
        found: set[int] = set()
        shared: set[str] = set()
        messages: list[dict[str, Any]] = response.get("messages", [])
        for message in messages:
            meta: dict[str, Any] = message.get("metadata") or {}
            payload = meta.get("event_payload") or {}
            if meta.get("event_type") == REPLY_EVENT_TYPE and payload.get("delivery_id") == delivery_id:
                found.add(int(payload.get("part", 0)))
            shared.update(str(f.get("name")) for f in message.get("files") or [])
        return found, shared

    async def _best_effort(self, method: str, **params: Any) -> None:
        try:
            await self._web().api_call(method, json=params)
        except SlackApiError as exc:
            log.debug("%s failed: %s", method, exc.response.get("error"))
