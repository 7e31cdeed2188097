"""Live answers in a Slack thread.

Slack streams a reply with chat.startStream / appendStream / stopStream (slack_sdk's
`AsyncChatStream`): the text grows as the model writes it, and each tool step shows as a task
of the message. A workspace that refuses streaming gets a message posted at the first text or
step and edited as the answer grows instead (post + update).

Exactly once: a stream's message ends as the answer's first message (`finish`), as the approval
request the turn waits for (`become`), or deleted (`retire`). Slack takes metadata only when a
stream stops, so a stream cut by a crash is the one message of ours in the thread without
metadata (every other message the responder posts there carries some): the process that
resumes the turn deletes such messages (`retire_cut_streams`) before its own stream starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slack_sdk.errors import SlackApiError
from slack_sdk.models.messages.chunk import Chunk, TaskUpdateChunk
from slack_sdk.web.async_chat_stream import AsyncChatStream
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.render import MAX_PART_CHARS, with_blocks
from agent_core.messages import InboundMessage

log = logging.getLogger(__name__)

# The metadata of a reply still being written in post + update mode (a stopped stream that is
# being replaced by the final answer carries it too): found after a crash, it is retired.
STREAM_EVENT_TYPE = "ba_agent_stream"
# Errors of a workspace or app that cannot stream; remembered, later answers post and edit.
REFUSALS = frozenset(
    {
        "not_allowed",
        "not_allowed_token_type",
        "unknown_method",
        "missing_scope",
        "feature_not_enabled",
        "method_not_supported_for_channel_type",
        "team_access_not_granted",
    }
)
# Between two Web API calls of one answer: appendStream is cheap, chat.update is rate limited
# (Tier 3, about one a second per channel).
STREAM_INTERVAL_S = 0.5
EDIT_INTERVAL_S = 1.0

WebClient = Callable[[], AsyncWebClient]


@dataclass
class StreamingSupport:
    """Whether this workspace streams, learnt from the first refusal (for the process)."""

    refused: bool = False


def stream_metadata(delivery_id: str) -> dict[str, Any]:
    return {"event_type": STREAM_EVENT_TYPE, "event_payload": {"delivery_id": delivery_id}}


class SlackAnswerStream:
    """One answer being written into a thread (an `adapters.base.AnswerStream`).

    Nothing reaches Slack until the first text or step; a failing stream never fails the turn:
    it stops showing, and the answer is posted as without one."""

    def __init__(
        self,
        web: WebClient,
        msg: InboundMessage,
        delivery_id: str,
        support: StreamingSupport,
        before_start: asyncio.Task[None],
    ) -> None:
        assert msg.reply_in_thread is not None
        self._web = web
        self._msg = msg
        self._thread_ts = msg.reply_in_thread
        self._delivery_id = delivery_id
        self._support = support
        self._before_start = before_start  # retiring the streams of crashed attempts
        self._native: AsyncChatStream | None = None
        self._edited = support.refused  # post + update instead of Slack's streaming
        self._broken = False
        self.ts: str | None = None
        self._shown = ""  # text that reached Slack
        self._pending = ""  # text written since
        self._segment = ""  # what the model wrote since the last step (or restart), as shown
        self._new_segment = False
        self._steps: list[str] = []  # titles; the last one is in progress
        self._step_chunks: list[Chunk] = []  # task updates not sent yet
        self._last_call = 0.0
        self._lock = asyncio.Lock()

    async def update(self, text_so_far: str) -> None:
        if self._broken or not text_so_far:
            return
        if not self._new_segment and text_so_far.startswith(self._segment):
            added = text_so_far[len(self._segment) :]
        elif not self._new_segment and self._segment.startswith(text_so_far):
            return  # a restarted model call writing again what is shown already
        else:  # text after a step, or a restarted call that writes something else
            added = ("\n\n" if self._shown or self._pending else "") + text_so_far
            self._new_segment = False
        self._segment = text_so_far
        room = MAX_PART_CHARS - len(self._shown) - len(self._pending)
        # Past one message's worth the rest arrives with the answer's later messages.
        self._pending += added[: max(room, 0)]
        interval = EDIT_INTERVAL_S if self._edited else STREAM_INTERVAL_S
        if self.ts is None or time.monotonic() - self._last_call >= interval:
            await self._flush()

    async def step(self, title: str) -> None:
        """Show a tool step as progress (a task of the stream, or a status line below the text);
        the previous step is then done."""
        if self._broken:
            return
        if self._steps:
            self._step_chunks.append(TaskUpdateChunk(id=self._task_id(), title=self._steps[-1], status="complete"))
        self._steps.append(title)
        self._step_chunks.append(TaskUpdateChunk(id=self._task_id(), title=title, status="in_progress"))
        self._new_segment = True
        await self._flush()

    async def close(self) -> None:
        """Show the text written so far; the stream stays open for the answer (`finish`)."""
        if self._pending and not self._broken:
            await self._flush()

    async def finish(
        self, fields: dict[str, Any], metadata: dict[str, Any], closing: list[dict[str, Any]] | None = None
    ) -> bool:
        """Make the streamed message the answer's first message (`fields` as chat.postMessage
        takes them, and its metadata, with the `closing` blocks under it: the feedback
        buttons); False when nothing was shown, to post it instead."""
        await self._settle()
        if self._broken:
            await self.retire()
            return False
        if self.ts is None:
            return False
        if self._native is not None and not self._edited:
            text = self._shown + self._pending
            unchanged = fields.get("markdown_text") == text and "blocks" not in fields
            try:
                await self._native.stop(
                    markdown_text=self._pending or None,
                    chunks=self._done_steps() or None,
                    # Until it reads as the answer, a crash leaves it to be replaced.
                    metadata=metadata if unchanged else stream_metadata(self._delivery_id),
                    # Rendered under the streamed text (Slack's place for feedback buttons).
                    blocks=(closing or None) if unchanged else None,
                )
                if unchanged:
                    return True
            except SlackApiError as exc:  # expired, say: it is still there to edit
                log.info("slack stream %s did not stop: %s", self.ts, exc.response.get("error"))
        await self._web().chat_update(
            channel=self._msg.channel, ts=self.ts, metadata=metadata, **with_blocks(fields, closing or [])
        )
        return True

    async def become(self, text: str, blocks: list[dict[str, Any]], metadata: dict[str, Any]) -> str | None:
        """Turn the streamed message into another message (an approval request); its ts, or None
        when nothing was shown."""
        await self._settle()
        if self.ts is None:
            return None
        await self._stop_quietly()
        await self._web().chat_update(channel=self._msg.channel, ts=self.ts, text=text, blocks=blocks, metadata=metadata)
        return self.ts

    async def retire(self) -> None:
        """Remove the streamed message (the answer went elsewhere); best effort."""
        await self._settle()
        if self.ts is None:
            return
        await self._stop_quietly()
        with contextlib.suppress(SlackApiError):
            await self._web().chat_delete(channel=self._msg.channel, ts=self.ts)

    def _task_id(self) -> str:
        return f"step-{len(self._steps)}"

    def _done_steps(self) -> list[Chunk]:
        if not self._steps:
            return []
        return [TaskUpdateChunk(id=self._task_id(), title=self._steps[-1], status="complete")]

    async def _settle(self) -> None:
        with contextlib.suppress(Exception):  # it logs its own failures
            await self._before_start
        async with self._lock:
            pass  # a flush in progress ends first

    async def _stop_quietly(self) -> None:
        if self._native is not None and not self._edited:
            with contextlib.suppress(SlackApiError):
                await self._native.stop(metadata=stream_metadata(self._delivery_id))

    async def _flush(self) -> None:
        async with self._lock:
            if not self._pending and not self._step_chunks:
                return
            if self.ts is None:
                with contextlib.suppress(Exception):  # it logs its own failures
                    await self._before_start
            self._last_call = time.monotonic()
            try:
                if not self._edited:
                    await self._append()
                if self._edited:
                    await self._edit()
            except SlackApiError as exc:
                log.warning("slack answer stream in %s stopped: %s", self._msg.channel, exc.response.get("error"))
                self._broken = True

    async def _append(self) -> None:
        try:
            if self._native is None:
                self._native = await self._web().chat_stream(
                    channel=self._msg.channel,
                    thread_ts=self._thread_ts,
                    # Whom the text is for: Slack requires both outside DMs.
                    recipient_team_id=self._msg.workspace,
                    recipient_user_id=self._msg.user,
                    buffer_size=1,  # the throttling is ours (`update`)
                )
            await self._native.append(markdown_text=self._pending or None, chunks=self._step_chunks or None)
        except SlackApiError as exc:
            error = exc.response.get("error")
            if self._native is None or self._native.ts is None:
                if error in REFUSALS:
                    self._support.refused = True
                log.info("slack streaming refused (%s): posting and editing instead", error)
            else:
                log.info("slack stream %s ended early (%s): editing it instead", self._native.ts, error)
            self.ts = self._native.ts if self._native is not None else None
            self._edited = True
            return
        self.ts = self._native.ts
        self._shown += self._pending
        self._pending = ""
        self._step_chunks = []

    async def _edit(self) -> None:
        text = self._shown + self._pending
        status = f"_{self._steps[-1]}_" if self._steps else ""
        body = "\n\n".join(part for part in (text, status) if part)
        if self.ts is None:
            posted = await self._web().chat_postMessage(
                channel=self._msg.channel,
                thread_ts=self._thread_ts,
                markdown_text=body,
                metadata=stream_metadata(self._delivery_id),
            )
            self.ts = str(posted["ts"])
        else:
            await self._web().chat_update(channel=self._msg.channel, ts=self.ts, markdown_text=body)
        self._shown = text
        self._pending = ""
        self._step_chunks = []


async def retire_cut_streams(web: AsyncWebClient, msg: InboundMessage, bot_user_id: str) -> None:
    """Delete the replies of ours in `msg`'s thread, after `msg`, that a crashed attempt left
    unfinished: streams without metadata, and post + update replies never made final."""
    thread_ts = msg.reply_in_thread
    if thread_ts is None:
        return
    after = _ts_order(msg.message_id)
    try:
        response = await web.conversations_replies(
            channel=msg.channel,
            ts=thread_ts,
            oldest=msg.message_id if after is not None else None,
            include_all_metadata=True,
            limit=200,
        )
    except SlackApiError as exc:
        log.debug("could not look for cut streams in %s: %s", msg.channel, exc.response.get("error"))
        return
    for message in cut_streams(response.get("messages") or [], msg, bot_user_id):
        ts = str(message.get("ts"))
        meta = message.get("metadata") or {}
        log.info("retiring the reply %s a crashed attempt left in %s", ts, msg.channel)
        with contextlib.suppress(SlackApiError):
            if not meta:
                await web.chat_stopStream(channel=msg.channel, ts=ts)
        with contextlib.suppress(SlackApiError):
            await web.chat_delete(channel=msg.channel, ts=ts)


def cut_streams(messages: list[dict[str, Any]], msg: InboundMessage, bot_user_id: str) -> list[dict[str, Any]]:
    """Replies of ours among a thread's `messages`, after `msg`, that a crashed attempt left
    unfinished: streams without metadata, and post + update replies never made final."""
    after = _ts_order(msg.message_id)
    return [
        message
        for message in messages
        if message.get("user") == bot_user_id
        and str(message.get("ts")) != msg.reply_in_thread
        and not message.get("files")
        and (after is None or (_ts_order(str(message.get("ts"))) or (0, 0)) > after)
        and (not message.get("metadata") or (message.get("metadata") or {}).get("event_type") == STREAM_EVENT_TYPE)
    ]


def _ts_order(ts: str) -> tuple[int, int] | None:
    """A Slack timestamp as sortable numbers; None for an id that is not one (scheduled runs)."""
    seconds, _, micros = ts.partition(".")
    if not (seconds.isdigit() and micros.isdigit()):
        return None
    return int(seconds), int(micros.ljust(6, "0")[:6])
