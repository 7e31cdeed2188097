"""Replies to Slack: progress reaction, answers streamed into the right thread, exactly once."""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from pathlib import Path
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.download import AttachmentError, download
from adapters.slack.alerts import alert_blocks
from adapters.slack.installations import BotTokens, WorkspaceNotInstalled
from adapters.slack.locales import UserLocales
from adapters.slack.render import (
    answer_messages,
    approval_blocks,
    comment_view,
    example_review_blocks,
    feedback_block,
    provenance_message,
    with_blocks,
)
from adapters.slack.stream import SlackAnswerStream, StreamingSupport, cut_streams, retire_cut_streams
from adapters.slack.surface import MAX_SUGGESTED_PROMPTS, AgentSurface, conversation_title
from adapters.slack.thread_context import fetch_thread
from agent_core.catalog.learned import Proposal
from agent_core.governance.approval import ApprovalView
from agent_core.i18n import Language, language_of_locale, t
from agent_core.messages import Attachment, InboundMessage, OutboundReply
from agent_core.monitors.model import AlertView
from agent_core.provenance import ProvenanceWords
from agent_core.thread_context import ThreadContext

log = logging.getLogger(__name__)

PROGRESS_REACTION = "eyes"
SLACK_FILE_HOSTS = (".slack.com", ".slack-edge.com", ".slack-files.com")
REPLY_EVENT_TYPE = "ba_agent_reply"
# Every message posted into a thread carries metadata: one without is a stream cut by a crash.
APPROVAL_EVENT_TYPE = "ba_agent_approval"


class SlackResponder:
    """Implements `adapters.base.Responder` for Slack, with every capability of the contract."""

    platform = "slack"

    def __init__(self, client: AsyncWebClient, tokens: BotTokens | None = None) -> None:
        """`client` calls the Web API; with `tokens` (OAuth installs) each workspace is answered
        with a client of its own bot token, built like `client`."""
        self._client = client
        self._tokens = tokens
        self._clients: dict[str, AsyncWebClient] = {}  # by bot token
        self._session: aiohttp.ClientSession | None = None  # shared by every client
        self._http: aiohttp.ClientSession | None = None
        # The answer being written in each thread (channel, thread ts), until it is delivered.
        self._streams: dict[tuple[str, str], SlackAnswerStream] = {}
        self._streaming = StreamingSupport()
        self._bot_user_ids: dict[str, str] = {}  # by workspace
        self._locales = UserLocales(self._web)
        self._bot_ids: dict[str, tuple[str, str | None]] = {}  # by workspace: (user id, bot id), from auth.test
        self._surface = AgentSurface(self._web)
        self._titled: dict[tuple[str, str], None] = {}  # assistant threads given a title (oldest first)

    async def user_locale(self, user: str, workspace: str) -> str | None:
        return await self._locales.of(user, workspace)

    async def language_of(self, user: str, workspace: str) -> Language:
        """The language to write to `user` in outside an answer (a modal, a DM): their locale's."""
        return language_of_locale(await self.user_locale(user, workspace)) or Language.EN

    async def show_progress(self, msg: InboundMessage) -> None:
        await self._best_effort(
            msg.workspace, "reactions.add", channel=msg.channel, timestamp=msg.message_id, name=PROGRESS_REACTION
        )
        if msg.is_dm and msg.reply_in_thread and msg.scheduled_run is None:
            # An assistant thread (the app's messages tab): a title and a status while working.
            key = (msg.channel, msg.reply_in_thread)
            if key not in self._titled and await self._surface.call(
                msg.workspace,
                "assistant.threads.setTitle",
                channel_id=msg.channel,
                thread_ts=msg.reply_in_thread,
                title=conversation_title(msg.text),
            ):
                self._titled[key] = None
                while len(self._titled) > 10_000:
                    self._titled.pop(next(iter(self._titled)))
            await self._surface.call(
                msg.workspace,
                "assistant.threads.setStatus",
                channel_id=msg.channel,
                thread_ts=msg.reply_in_thread,
                status=t(msg.language, "is working on it…"),
            )
        # An agent session in the thread: "processing" shows Slack's native Stop button.
        if msg.reply_in_thread and msg.scheduled_run is None:
            await self._surface.call(
                msg.workspace,
                "agents.sessions.setStatus",
                status="processing",
                channel_id=msg.channel,
                thread_ts=msg.reply_in_thread,
                title=conversation_title(msg.text),
                initiator_user_id=msg.user,
            )

    async def show_status(self, msg: InboundMessage, status: str) -> None:
        # The status line exists only in Slack's assistant threads (DM threads of AI apps).
        if msg.is_dm and msg.reply_in_thread:
            await self._surface.call(
                msg.workspace,
                "assistant.threads.setStatus",
                channel_id=msg.channel,
                thread_ts=msg.reply_in_thread,
                status=status,
            )
        stream = self._streams.get((msg.channel, msg.reply_in_thread)) if msg.reply_in_thread else None
        if stream is not None:
            await stream.step(status)

    async def open_stream(self, msg: InboundMessage, delivery_id: str) -> SlackAnswerStream | None:
        # Slack streams replies in threads only; nobody waits on a scheduled report's progress.
        if msg.reply_in_thread is None or msg.scheduled_run is not None:
            return None
        key = (msg.channel, msg.reply_in_thread)
        if (earlier := self._streams.pop(key, None)) is not None:
            await earlier.retire()  # an attempt that failed in this process
        web = await self._web(msg.workspace)
        cleanup = asyncio.create_task(self._retire_cut_streams(msg))
        stream = SlackAnswerStream(lambda: web, msg, delivery_id, self._streaming, cleanup)
        self._streams[key] = stream
        return stream

    async def deliver(
        self, msg: InboundMessage, reply: OutboundReply, delivery_id: str, *, resumed: bool = False
    ) -> None:
        stream = self._streams.pop((msg.channel, msg.reply_in_thread), None) if msg.reply_in_thread else None
        parts = answer_messages(reply.text)
        web = await self._web(msg.workspace)
        already, shared = await self._posted(msg, delivery_id) if resumed else (set(), set())
        if stream is not None and 0 in already:
            await stream.retire()
            stream = None
        # 👍/👎 close the answer: under its provenance line, or under its last text part.
        feedback = [feedback_block(reply.answer_id, msg.language)] if reply.answer_id else []
        for index, part in enumerate(parts):
            if index in already:
                continue
            metadata = {"event_type": REPLY_EVENT_TYPE, "event_payload": {"delivery_id": delivery_id, "part": index}}
            closing = feedback if index == len(parts) - 1 and reply.provenance is None else []
            # The streamed message becomes the first part: the answer appears once.
            if index == 0 and stream is not None and await stream.finish(part.fields, metadata, closing):
                continue
            await web.chat_postMessage(
                channel=msg.channel, thread_ts=msg.reply_in_thread, metadata=metadata, **with_blocks(part.fields, closing)
            )
        # A table shown only in part: the whole of it as CSV, named by its content like the files.
        for table in (p.full_table for p in parts if p.full_table is not None):
            if table.csv_name() not in shared:
                shared.add(table.csv_name())
                await web.files_upload_v2(
                    channel=msg.channel,
                    thread_ts=msg.reply_in_thread,
                    content=table.csv(),
                    title=table.csv_name(),
                    filename=table.csv_name(),
                )
        for file in reply.files:
            # Files carry no metadata; their names are content-hashed (charts, reports), so a
            # file of that name already in the thread is this delivery's, posted before a crash.
            name = Path(file.path).name
            if name in shared:
                continue
            await web.files_upload_v2(
                channel=msg.channel,
                thread_ts=msg.reply_in_thread,
                file=file.path,
                title=file.title,
                filename=name,
            )
        # The provenance line and the SQL end the answer, as the part after the text parts.
        if reply.provenance is not None and len(parts) not in already:
            await web.chat_postMessage(
                channel=msg.channel,
                thread_ts=msg.reply_in_thread,
                metadata={
                    "event_type": REPLY_EVENT_TYPE,
                    "event_payload": {"delivery_id": delivery_id, "part": len(parts)},
                },
                **with_blocks(provenance_message(reply.provenance, ProvenanceWords.of(msg.language)), feedback),
            )

    async def clear_progress(self, msg: InboundMessage) -> None:
        await self._best_effort(
            msg.workspace, "reactions.remove", channel=msg.channel, timestamp=msg.message_id, name=PROGRESS_REACTION
        )
        if msg.is_dm and msg.reply_in_thread and msg.scheduled_run is None:
            await self._surface.call(
                msg.workspace,
                "assistant.threads.setStatus", channel_id=msg.channel, thread_ts=msg.reply_in_thread, status=""
            )
        if msg.reply_in_thread and msg.scheduled_run is None:
            await self._surface.call(
                msg.workspace,
                "agents.sessions.setStatus", status="active", channel_id=msg.channel, thread_ts=msg.reply_in_thread
            )

    async def suggest_prompts(
        self, workspace: str, channel: str, thread_ts: str, prompts: list[str], language: Language
    ) -> None:
        """Offer `prompts` in a new assistant thread (Slack shows up to 4)."""
        if not prompts:
            return
        await self._surface.call(
            workspace,
            "assistant.threads.setSuggestedPrompts",
            channel_id=channel,
            thread_ts=thread_ts,
            title=t(language, "Try asking:"),
            prompts=[{"title": conversation_title(p), "message": p} for p in prompts[:MAX_SUGGESTED_PROMPTS]],
        )

    async def cut_answer(self, msg: InboundMessage, delivery_id: str) -> str:
        if not msg.reply_in_thread:
            return ""
        try:
            web = await self._web(msg.workspace)
            bot_user_id = self._bot_user_ids.get(msg.workspace)
            if bot_user_id is None:
                bot_user_id = self._bot_user_ids[msg.workspace] = str((await web.auth_test())["user_id"])
            response = await web.conversations_replies(
                channel=msg.channel, ts=msg.reply_in_thread, include_all_metadata=True, limit=200
            )
        except (SlackApiError, WorkspaceNotInstalled, aiohttp.ClientError, TimeoutError) as exc:
            log.warning("could not read the unfinished reply in %s: %s", msg.channel, type(exc).__name__)
            return ""
        cut = cut_streams(response.get("messages") or [], msg, bot_user_id)
        return "\n\n".join(str(m.get("text") or "") for m in cut if m.get("text"))

    def mention(self, user: str) -> str:
        return f"<@{user}> "

    async def ask_approval(self, msg: InboundMessage, approval: ApprovalView, *, resumed: bool = False) -> str | None:
        text, blocks = approval_blocks(approval, msg.language)
        metadata = {"event_type": APPROVAL_EVENT_TYPE, "event_payload": {"approval_id": approval.id}}
        stream = self._streams.pop((msg.channel, msg.reply_in_thread), None) if msg.reply_in_thread else None
        if resumed and (earlier := await self._posted_approval(msg, approval.id)) is not None:
            if stream is not None:  # this attempt's progress message: the request is above it
                await stream.retire()
            return earlier
        # The paused turn's progress message turns into the request.
        if stream is not None and (ts := await stream.become(text, blocks, metadata)) is not None:
            return ts
        web = await self._web(msg.workspace)
        posted = await web.chat_postMessage(
            channel=msg.channel, thread_ts=msg.reply_in_thread, text=text, blocks=blocks, metadata=metadata
        )
        return str(posted["ts"])

    async def show_decision(self, msg: InboundMessage, approval: ApprovalView) -> None:
        if not approval.message_ref:
            return
        text, blocks = approval_blocks(approval, msg.language)
        await self._best_effort(
            msg.workspace, "chat.update", channel=msg.channel, ts=approval.message_ref, text=text, blocks=blocks
        )

    async def post_alert(self, alert: AlertView) -> str | None:
        text, blocks = alert_blocks(alert)
        web = await self._web(alert.workspace)
        posted = await web.chat_postMessage(channel=alert.channel, text=text, blocks=blocks)
        ts = str(posted["ts"])
        if alert.chart is not None:
            await web.files_upload_v2(
                channel=alert.channel,
                thread_ts=ts,
                file=alert.chart.path,
                title=alert.chart.title,
                filename=Path(alert.chart.path).name,
            )
        return ts

    async def update_alert(self, alert: AlertView) -> None:
        if not alert.message_ref:
            return
        text, blocks = alert_blocks(alert)
        await self._best_effort(
            alert.workspace, "chat.update", channel=alert.channel, ts=alert.message_ref, text=text, blocks=blocks
        )

    async def ask_example_review(self, workspace: str, owner: str, proposal: Proposal, language: Language) -> bool:
        text, blocks = example_review_blocks(proposal, language)
        try:
            await (await self._web(workspace)).chat_postMessage(channel=owner, text=text, blocks=blocks)
        except (SlackApiError, WorkspaceNotInstalled) as exc:
            log.warning("could not ask %s to review example %d: %s", owner, proposal.id, exc)
            return False
        return True

    async def show_example_decision(
        self, workspace: str, channel: str, ts: str, proposal: Proposal, language: Language
    ) -> None:
        text, blocks = example_review_blocks(proposal, language)
        await self._best_effort(workspace, "chat.update", channel=channel, ts=ts, text=text, blocks=blocks)

    async def ask_what_was_wrong(self, workspace: str, trigger_id: str, answer_id: str, language: Language) -> None:
        """The optional question after a 👎, as a modal (the click's trigger is valid 3 s)."""
        await self._best_effort(workspace, "views.open", trigger_id=trigger_id, view=comment_view(answer_id, language))

    async def tell_privately(self, workspace: str, channel: str, user: str, text: str, thread_ts: str | None) -> None:
        """An ephemeral note only ``user`` sees (a refused click); best effort."""
        where = {"thread_ts": thread_ts} if thread_ts else {}
        await self._best_effort(workspace, "chat.postEphemeral", channel=channel, user=user, text=text, **where)

    def dm_address(self, user: str) -> str | None:
        return user  # Slack delivers a post to a user id into that user's DM with the app

    async def thread_context(self, msg: InboundMessage) -> ThreadContext | None:
        # A DM's messages all reach the bot; a top-level mention starts its thread.
        if msg.is_dm or msg.scheduled_run is not None or msg.reply_in_thread in (None, msg.message_id):
            return None
        assert msg.reply_in_thread is not None
        web = await self._web(msg.workspace)
        if msg.workspace not in self._bot_ids:
            me = await web.auth_test()
            self._bot_ids[msg.workspace] = (str(me["user_id"]), me.get("bot_id"))
        user_id, bot_id = self._bot_ids[msg.workspace]
        return await fetch_thread(web, msg.channel, msg.reply_in_thread, msg.message_id, user_id, bot_id)

    async def resolve_attachments(self, msg: InboundMessage) -> list[Attachment]:
        return msg.attachments

    async def fetch_attachment(
        self, msg: InboundMessage, attachment: Attachment, dest: Path, max_bytes: int
    ) -> Path:
        if not attachment.url:
            raise AttachmentError(f"{attachment.name} has no download URL")
        if attachment.size is not None and attachment.size > max_bytes:
            raise AttachmentError(f"{attachment.name} is larger than the {max_bytes // 1024**2} MB limit")
        token = (await self._web(msg.workspace)).token
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
                headers={"Authorization": f"Bearer {token}"},
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

    async def _web(self, workspace: str) -> AsyncWebClient:
        """The client that answers in `workspace`: the one client, or (OAuth installs) one of
        the workspace's own bot token; raises WorkspaceNotInstalled."""
        client = self._client
        if self._tokens is not None:
            token = await self._tokens.bot_token(workspace)
            if token is None:
                raise WorkspaceNotInstalled(workspace)
            client = self._clients.get(token) or self._clients.setdefault(
                token,
                AsyncWebClient(
                    token=token,
                    base_url=self._client.base_url,
                    timeout=self._client.timeout,
                    retry_handlers=list(self._client.retry_handlers),
                ),
            )
        # One HTTP session for every Web API call: without one, slack_sdk opens (and on
        # slack.com TLS-handshakes) a new connection per call.
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self._client.timeout))
        client.session = self._session
        return client

    async def close(self) -> None:
        for session in (self._http, self._session):
            if session is not None:
                await session.close()

    async def _posted(self, msg: InboundMessage, delivery_id: str) -> tuple[set[int], set[str]]:
        """Text parts of this delivery already in the conversation (found by their message
        metadata), and the names of the files shared there."""
        found: set[int] = set()
        shared: set[str] = set()
        for message in await self._conversation(msg):
            meta: dict[str, Any] = message.get("metadata") or {}
            payload = meta.get("event_payload") or {}
            if meta.get("event_type") == REPLY_EVENT_TYPE and payload.get("delivery_id") == delivery_id:
                found.add(int(payload.get("part", 0)))
            shared.update(str(f.get("name")) for f in message.get("files") or [])
        return found, shared

    async def _posted_approval(self, msg: InboundMessage, approval_id: str) -> str | None:
        """The message asking for this approval, if it is in the conversation already."""
        for message in await self._conversation(msg):
            meta: dict[str, Any] = message.get("metadata") or {}
            payload = meta.get("event_payload") or {}
            if meta.get("event_type") == APPROVAL_EVENT_TYPE and payload.get("approval_id") == approval_id:
                return str(message["ts"])
        return None

    async def _conversation(self, msg: InboundMessage) -> list[dict[str, Any]]:
        """The messages answering `msg` could be among (its thread, or the channel after it),
        with their metadata."""
        web = await self._web(msg.workspace)
        if msg.reply_in_thread:
            response = await web.conversations_replies(
                channel=msg.channel, ts=msg.reply_in_thread, include_all_metadata=True, limit=200
            )
        else:
            # Our answer came after the message was received (a scheduled run's message id is
            # not a Slack timestamp, so the receive time is the bound).
            oldest = f"{msg.received_at.timestamp() - 1:.6f}"
            response = await web.conversations_history(
                channel=msg.channel, oldest=oldest, include_all_metadata=True, limit=200
            )
        messages: list[dict[str, Any]] = response.get("messages", [])
        return messages

    async def _retire_cut_streams(self, msg: InboundMessage) -> None:
        try:
            web = await self._web(msg.workspace)
            bot_user_id = self._bot_user_ids.get(msg.workspace)
            if bot_user_id is None:
                bot_user_id = self._bot_user_ids[msg.workspace] = str((await web.auth_test())["user_id"])
            await retire_cut_streams(web, msg, bot_user_id)
        except (SlackApiError, aiohttp.ClientError, TimeoutError) as exc:
            log.warning("could not look for unfinished replies in %s: %s", msg.channel, type(exc).__name__)

    async def _best_effort(self, workspace: str, method: str, **params: Any) -> None:
        try:
            web = await self._web(workspace)
            await web.api_call(method, json=params)
        except SlackApiError as exc:
            log.debug("%s failed: %s", method, exc.response.get("error"))
        except WorkspaceNotInstalled:
            log.debug("%s skipped: the app is not installed in %s", method, workspace)
