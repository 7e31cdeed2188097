"""Replies to Feishu: a "Typing" reaction, a live CardKit card, the answer in the right place, once.

Where an answer goes: inside a topic (or a group mention with reply_in_thread) it is a topic reply
to the user's message; a DM's top-level message gets a plain message in the chat; other group
messages get a quote reply. Every message carries a `uuid` derived from the delivery id, so a
retried delivery is deduplicated by Feishu (for an hour) instead of shown twice.
"""

from __future__ import annotations

import asyncio
import logging
import re
import tempfile
import time
import uuid
from collections import OrderedDict
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from adapters.download import AttachmentError
from adapters.feishu import render
from adapters.feishu.approval_card import approval_card
from adapters.feishu.client import FeishuClient
from adapters.feishu.config import FeishuConfig
from adapters.feishu.events import PLATFORM, attachments_of, quoted_message_id
from adapters.feishu.example_card import example_card
from adapters.feishu.monitor_card import alert_card
from adapters.feishu.transport import FeishuApiError
from adapters.markdown_tables import Table
from agent_core.catalog.learned import Proposal
from agent_core.governance.approval import ApprovalView
from agent_core.i18n import Language, t
from agent_core.messages import Attachment, InboundMessage, OutboundFile, OutboundReply
from agent_core.monitors.model import AlertView
from agent_core.provenance import ENGLISH, Provenance, ProvenanceWords
from agent_core.thread_context import ThreadContext

log = logging.getLogger(__name__)

PROGRESS_EMOJI = "Typing"
# Image formats im/v1/images accepts; anything else is sent as a file.
_IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".gif", ".webp", ".bmp", ".tif", ".tiff", ".ico"}
_FILE_TYPES = {
    ".pdf": "pdf",
    ".doc": "doc",
    ".docx": "doc",
    ".xls": "xls",
    ".xlsx": "xls",
    ".ppt": "ppt",
    ".pptx": "ppt",
    ".mp4": "mp4",
    ".opus": "opus",
}
# Fixed namespace: uuid5(namespace, delivery id + part) is the same in every process.
_UUID_NAMESPACE = uuid.UUID("0b9f5f5e-6c1d-4f7e-9a51-7c2f4d0e8a13")
_MAX_TRACKED_STREAMS = 256


_RESOURCE_PATH = re.compile(r"^/open-apis/im/v1/messages/([^/]+)/resources/")

# Every Feishu message id starts with this; ids the gateway makes up for its own runs do not.
FEISHU_MESSAGE_ID_PREFIX = "om_"
OPEN_ID_PREFIX = "ou_"


def stop_value(msg: InboundMessage) -> dict[str, Any]:
    """The Stop button's callback value: the conversation whose turn it stops."""
    return {
        "stop": {
            "workspace": msg.thread.workspace,
            "chat": msg.channel,
            "root": msg.thread.root,
            "reply_in": msg.reply_in_thread or "",
            "dm": msg.is_dm,
            "language": msg.language.value,
        }
    }


def delivery_uuid(*parts: str) -> str:
    """The idempotency uuid of one message of a delivery (stable across retries)."""
    return str(uuid.uuid5(_UUID_NAMESPACE, "\x1f".join(parts)))


class FeishuAnswerStream:
    """A CardKit card written live (implements adapters.base.AnswerStream).

    Updates are coalesced: at most one card call per interval, always with the latest text,
    and every call carries the next sequence number (calls are serialized, so they stay
    strictly increasing).
    """

    def __init__(
        self, client: FeishuClient, card_id: str, message_id: str, *, interval_s: float, shown: str
    ) -> None:
        self.card_id = card_id
        self.message_id = message_id  # the user's message this card answers
        self._client = client
        self._interval_s = interval_s
        self._sequence = 0
        self._shown = shown
        self._pending: str | None = None
        self._answer_started = False
        self._last_push = time.monotonic()
        self._flusher: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()
        self.closed = False
        self.failed = False  # a card call failed: stop streaming; the final answer still comes

    async def update(self, text_so_far: str) -> None:
        """Show the answer so far (the part that fits one card); returns without waiting."""
        preview = render.stream_preview(text_so_far)
        if self.closed or self.failed or not preview.strip():
            return
        self._answer_started = True
        self._schedule(preview)

    def set_status(self, status: str) -> None:
        """Replace the status line, until the answer itself starts."""
        if not (self.closed or self.failed or self._answer_started):
            self._schedule(render.status_markdown(status))

    async def close(self) -> None:
        """Flush the last update and end streaming mode."""
        if self.closed:
            return
        self.closed = True
        if self._flusher is not None:
            await self._flusher
        if self.failed:
            return
        async with self._lock:
            try:
                await self._client.set_card_streaming(self.card_id, False, self._next_sequence())
            except FeishuApiError as exc:
                log.warning("feishu: could not end streaming of card %s: %s", self.card_id, exc)

    async def reopen(self, status: str) -> bool:
        """Stream into this card again (the turn is being retried); False if that failed."""
        if self.failed:
            return False
        async with self._lock:
            try:
                await self._client.set_card_streaming(self.card_id, True, self._next_sequence())
            except FeishuApiError as exc:
                log.warning("feishu: could not reopen card %s: %s", self.card_id, exc)
                return False
        self.closed = False
        self._answer_started = False
        self.set_status(status)
        return True

    async def finish(
        self,
        part: render.CardPart,
        provenance: Provenance | None = None,
        words: ProvenanceWords = ENGLISH,
        language: Language = Language.EN,
        answer_id: str | None = None,
    ) -> bool:
        """End streaming and make `part` (and the answer's provenance and 👍/👎, when this is
        its last part) the card's final content; False if that failed."""
        await self.close()
        card = render.answer_card(part.markdown, provenance, part.table, part.full_table, words, language, answer_id)
        async with self._lock:
            try:
                await self._client.update_card(self.card_id, card, self._next_sequence())
            except FeishuApiError as exc:
                log.warning(
                    "feishu: could not write the final answer into card %s: %s", self.card_id, exc
                )
                return False
        return True

    def _schedule(self, text: str) -> None:
        self._pending = text
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.create_task(self._flush_loop())

    async def _flush_loop(self) -> None:
        while self._pending is not None and not self.failed:
            wait = self._last_push + self._interval_s - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            text, self._pending = self._pending, None
            if text is not None and text != self._shown:
                await self._push(text)

    async def _push(self, text: str) -> None:
        async with self._lock:
            try:
                await self._client.stream_card_text(
                    self.card_id, render.ANSWER_ELEMENT_ID, text, self._next_sequence()
                )
                self._shown = text
            except FeishuApiError as exc:
                self.failed = True
                log.warning(
                    "feishu: streaming into card %s failed, stopping: %s", self.card_id, exc
                )
            self._last_push = time.monotonic()

    def _next_sequence(self) -> int:
        self._sequence += 1
        return self._sequence


class FeishuResponder:
    """Implements `adapters.base.Responder` for Feishu / Lark, with progress, streaming cards,
    attachments, thread history, mentions, approvals and alerts. Not: user locales (events carry
    none), DMs by user (a p2p chat id is known only inside it), reading back a cut streaming
    card (the next attempt finishes it) and example reviews (`ba-agent examples review`)."""

    platform = PLATFORM

    def __init__(self, client: FeishuClient, config: FeishuConfig) -> None:
        self._client = client
        self._config = config
        self._reactions: dict[str, str] = {}  # user message_id → our reaction_id
        # Streams by delivery id, kept until the delivery succeeds so a retried deliver still
        # finishes the same card.
        self._streams: OrderedDict[str, FeishuAnswerStream] = OrderedDict()

    async def show_progress(self, msg: InboundMessage) -> None:
        """Put a "Typing" reaction on the user's message."""
        if not msg.message_id.startswith(FEISHU_MESSAGE_ID_PREFIX):
            return  # a menu click: no message to react to
        try:
            self._reactions[msg.message_id] = await self._client.add_reaction(
                msg.message_id, PROGRESS_EMOJI
            )
        except FeishuApiError as exc:
            log.info("feishu: no progress reaction on %s: %s", msg.message_id, exc)

    async def show_status(self, msg: InboundMessage, status: str) -> None:
        """Show the status in the message's streaming card, if one is open and still empty."""
        for stream in self._streams.values():
            if stream.message_id == msg.message_id and not stream.closed:
                stream.set_status(status)

    async def open_stream(self, msg: InboundMessage, delivery_id: str) -> FeishuAnswerStream | None:
        """Post a streaming card that starts with a status line; None when not streaming."""
        if not self._config.stream_enabled:
            return None
        existing = self._streams.get(delivery_id)
        initial_status = t(msg.language, "Thinking…")
        if existing is not None and (not existing.closed or await existing.reopen(initial_status)):
            return existing  # a retried turn keeps writing into its card
        shown = render.status_markdown(initial_status)
        try:
            card_id = await self._client.create_card(render.streaming_card(shown, stop_value(msg), msg.language))
            # The uuid includes the card: a new card (after a restart) must be posted, not
            # deduplicated into the old, abandoned one.
            await self._send(
                msg,
                "interactive",
                {"type": "card", "data": {"card_id": card_id}},
                delivery_uuid(delivery_id, "stream", card_id),
            )
        except FeishuApiError as exc:
            log.warning("feishu: streaming card unavailable, answering at the end: %s", exc)
            return None
        stream = FeishuAnswerStream(
            self._client,
            card_id,
            msg.message_id,
            interval_s=self._config.stream_update_interval_ms / 1000,
            shown=shown,
        )
        self._streams[delivery_id] = stream
        while len(self._streams) > _MAX_TRACKED_STREAMS:
            self._streams.popitem(last=False)
        return stream

    async def deliver(
        self, msg: InboundMessage, reply: OutboundReply, delivery_id: str, *, resumed: bool = False
    ) -> None:
        """Post the final answer: into the streaming card if there is one, else as new messages.

        Parts beyond one card's limits follow as further messages; files follow the text. A
        `resumed` delivery (an earlier attempt may have posted some parts) needs nothing special:
        every message's uuid derives from the delivery id, and Feishu drops repeats for an hour.
        """
        # The last part carries the provenance (line and SQL panel): every part leaves room for it.
        provenance = reply.provenance
        words = ProvenanceWords.of(msg.language)
        budget = (
            render.CONTENT_BUDGET_BYTES
            - render.provenance_cost(provenance, words)
            - render.feedback_cost(reply.answer_id, msg.language)
        )
        parts = render.card_parts(reply.text, budget_bytes=budget)
        stream = self._streams.get(delivery_id)
        if not parts and (stream is not None or provenance is not None):
            empty = t(msg.language, "(see the attached files)") if reply.files else t(msg.language, "(no answer)")
            parts = [render.CardPart(empty)]
        last = len(parts) - 1
        first = 0
        closing = reply.answer_id if last == 0 else None
        if stream is not None and await stream.finish(
            parts[0], provenance if last == 0 else None, words, msg.language, closing
        ):
            first = 1
        for index in range(first, len(parts)):
            await self._post_part(
                msg,
                parts[index],
                delivery_uuid(delivery_id, "text", str(index)),
                provenance if index == last else None,
                words,
                reply.answer_id if index == last else None,
            )
        for table in (part.full_table for part in parts if part.full_table is not None):
            await self._post_table_csv(msg, table, delivery_uuid(delivery_id, "table", table.csv_name()))
        for index, file in enumerate(reply.files):
            await self._post_file(msg, file, delivery_uuid(delivery_id, "file", str(index)))
        self._streams.pop(delivery_id, None)

    async def clear_progress(self, msg: InboundMessage) -> None:
        """Remove the "Typing" reaction."""
        reaction_id = self._reactions.pop(msg.message_id, None)
        if reaction_id is None:
            return
        try:
            await self._client.remove_reaction(msg.message_id, reaction_id)
        except FeishuApiError as exc:
            log.info("feishu: could not remove reaction from %s: %s", msg.message_id, exc)

    async def thread_context(self, msg: InboundMessage) -> ThreadContext | None:
        """The topic so far, or the quoted message (`adapters.feishu.thread_context`)."""
        from adapters.feishu.thread_context import fetch_thread

        return await fetch_thread(self._client, self._config, msg)

    async def resolve_attachments(self, msg: InboundMessage) -> list[Attachment]:
        """The message's files, with a quoted message replaced by the file or image it holds."""
        resolved: list[Attachment] = []
        for attachment in msg.attachments:
            quoted = quoted_message_id(attachment)
            if quoted is None:
                resolved.append(attachment)
                continue
            try:
                message_type, content = await self._client.get_message(quoted)
            except FeishuApiError as exc:
                log.info("feishu: quoted message %s not readable: %s", quoted, exc)
                continue
            resolved.extend(attachments_of(self._config, quoted, message_type, content))
        return resolved

    async def fetch_attachment(
        self, msg: InboundMessage, attachment: Attachment, dest: Path, max_bytes: int
    ) -> Path:
        """Download one of the message's attachments to `dest` (atomically); returns `dest`.

        Raises AttachmentError (a message safe to show the user) when it is larger than
        `max_bytes` or Feishu refuses it.
        """
        # The url is the resource endpoint: the message that holds the file (this one, or the
        # one it quotes) in its path, the resource type ("image" or "file") in its query.
        url = urlsplit(attachment.url or "")
        kind = parse_qs(url.query).get("type", ["file"])[0]
        holder = _RESOURCE_PATH.match(url.path)
        try:
            return await self._client.download_resource(
                holder.group(1) if holder else msg.message_id,
                attachment.file_id,
                kind if kind in ("image", "file") else "file",
                dest,
                max_bytes=max_bytes,
            )
        except FeishuApiError as exc:
            raise AttachmentError(f"Feishu refused the download (code {exc.code})") from exc

    async def _post_part(
        self,
        msg: InboundMessage,
        part: render.CardPart,
        key: str,
        provenance: Provenance | None = None,
        words: ProvenanceWords = ENGLISH,
        answer_id: str | None = None,
    ) -> None:
        if self._config.cards_enabled:
            try:
                await self._send(
                    msg,
                    "interactive",
                    render.answer_card(
                        part.markdown, provenance, part.table, part.full_table, words, msg.language, answer_id
                    ),
                    delivery_uuid(key, "card"),
                )
                return
            except FeishuApiError as exc:
                log.warning("feishu: card reply failed, sending a post instead: %s", exc)
        post = render.post_content(render.post_markdown(render.part_markdown(part, msg.language), provenance, words))
        await self._send(msg, "post", post, delivery_uuid(key, "post"))

    async def _post_table_csv(self, msg: InboundMessage, table: Table, key: str) -> None:
        """The whole of a table a card showed only part of, as a CSV file."""
        with tempfile.TemporaryDirectory(prefix="ba-table-") as folder:
            path = Path(folder) / table.csv_name()
            # With a BOM, so spreadsheet apps read Chinese right.
            await asyncio.to_thread(path.write_text, table.csv(), encoding="utf-8-sig")
            file = OutboundFile(path=str(path), title=table.csv_name(), mime_type="text/csv")
            await self._post_file(msg, file, key)

    async def _post_file(self, msg: InboundMessage, file: OutboundFile, key: str) -> None:
        path = Path(file.path)
        try:
            if path.suffix.lower() in _IMAGE_SUFFIXES:
                msg_type, content = "image", {"image_key": await self._client.upload_image(path)}
            else:
                file_type = _FILE_TYPES.get(path.suffix.lower(), "stream")
                file_key = await self._client.upload_file(path, file_type, path.name)
                msg_type, content = "file", {"file_key": file_key}
        except (FeishuApiError, OSError) as exc:
            log.warning("feishu: could not upload %s: %s", path, exc)
            note = render.text_content(t(msg.language, "(Could not attach {name}.)", name=file.title or path.name))
            await self._send(msg, "text", note, delivery_uuid(key, "note"))
            return
        await self._send(msg, msg_type, content, key)

    def mention(self, user: str) -> str:
        return f'<at user_id="{user}"></at> '

    async def ask_approval(self, msg: InboundMessage, approval: ApprovalView, *, resumed: bool = False) -> str | None:
        # A card whatever `cards_enabled` says: only a card carries buttons. Its clicks come
        # back as card.action.trigger callbacks (`adapters.feishu.card_actions`). Resumed or
        # not, the same request uuid: Feishu answers a second send with the first message.
        card = approval_card(approval, msg.language)
        return await self._send(msg, "interactive", card, delivery_uuid(f"approval-{approval.id}", "card"))

    async def show_decision(self, msg: InboundMessage, approval: ApprovalView) -> None:
        if not approval.message_ref:
            return
        try:
            await self._client.update_card_message(approval.message_ref, approval_card(approval, msg.language))
        except FeishuApiError as exc:
            log.warning("feishu: could not show the decision on approval card %s: %s", approval.message_ref, exc)

    async def post_alert(self, alert: AlertView) -> str | None:
        # A card whatever `cards_enabled` says: only a card carries buttons. Its clicks come
        # back as card.action.trigger callbacks (`adapters.feishu.card_actions`).
        card = alert_card(alert)
        message_id = await self._send(alert.address(), "interactive", card, delivery_uuid("alert", alert.id))
        if alert.chart is not None:
            threaded = alert.model_copy(update={"message_ref": message_id}).address(in_thread=True)
            await self._post_file(threaded, alert.chart, delivery_uuid("alert-chart", alert.id))
        return message_id

    async def update_alert(self, alert: AlertView) -> None:
        if not alert.message_ref:
            return
        try:
            await self._client.update_card_message(alert.message_ref, alert_card(alert))
        except FeishuApiError as exc:
            log.warning("feishu: could not show who acted on alert card %s: %s", alert.message_ref, exc)

    async def ask_example_review(self, workspace: str, owner: str, proposal: Proposal, language: Language) -> bool:
        """Send the data owner (an open_id) the example's review card, in their chat with the bot."""
        try:
            card = example_card(proposal, language)
            uuid_ = delivery_uuid("example", str(proposal.id), owner)
            await self._client.send_message(owner, "interactive", card, uuid=uuid_, to="open_id")
        except FeishuApiError as exc:
            log.warning("feishu: could not ask %s to review example %d: %s", owner, proposal.id, exc)
            return False
        return True

    async def show_example_decision(self, message_id: str, proposal: Proposal, language: Language) -> None:
        """Show who decided on the review card the owner clicked."""
        try:
            await self._client.update_card_message(message_id, example_card(proposal, language))
        except FeishuApiError as exc:
            log.warning("feishu: could not show the decision on example card %s: %s", message_id, exc)

    async def ask_what_was_wrong(self, message_id: str, chat_id: str, answer_id: str, language: Language) -> None:
        """After a 👎: the optional question, as a form card replying to the rated answer."""
        try:
            await self._client.reply_message(
                message_id,
                "interactive",
                render.comment_card(answer_id, language),
                chat_id=chat_id,
                uuid=delivery_uuid(answer_id, "what-was-wrong", message_id),
            )
        except FeishuApiError as exc:
            log.warning("feishu: could not ask what was wrong with %s: %s", answer_id, exc)

    async def close(self) -> None:
        return None  # the client it posts with is closed by the adapter's `stop`

    async def _send(
        self, msg: InboundMessage, msg_type: str, content: dict[str, Any], uuid_: str
    ) -> str:
        """Post one message where the conversation lives; returns its message_id.

        A user's message gets a quote (or topic) reply. A message the gateway made itself (a
        scheduled report, a notice) has no Feishu message to reply to: it goes into its topic
        through the topic's root message, or else top level into the chat.
        """
        target = _reply_target(msg)
        if target is not None and (msg.reply_in_thread is not None or not msg.is_dm):
            return await self._client.reply_message(
                target,
                msg_type,
                content,
                chat_id=msg.channel,
                reply_in_thread=msg.reply_in_thread is not None,
                uuid=uuid_,
            )
        # A bot menu click names the user, not their chat with the bot (adapters.feishu.menu).
        to = "open_id" if msg.channel.startswith(OPEN_ID_PREFIX) else "chat_id"
        return await self._client.send_message(msg.channel, msg_type, content, uuid=uuid_, to=to)


def _reply_target(msg: InboundMessage) -> str | None:
    """The Feishu message an answer replies to: the user's own message, else the topic root."""
    for candidate in (msg.message_id, msg.reply_in_thread):
        if candidate is not None and candidate.startswith(FEISHU_MESSAGE_ID_PREFIX):
            return candidate
    return None
