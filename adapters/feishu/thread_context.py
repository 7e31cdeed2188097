"""The Feishu messages before a message, as `agent_core.thread_context.ThreadContext`.

A message in a topic (话题) gets the topic so far (im.v1.message.list by thread, newest pages
first, bounded); a reply that quotes a message gets the quoted message and the first message of
its reply chain (im.v1.message.get). Only messages of that chat are read: the ones its members
see already. Text, rich-text posts and cards become text; files are named. Listing a group's
topic needs the scope `im:message.group_msg`; without it only the topic's first message is read.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from adapters.feishu.client import FeishuClient
from adapters.feishu.config import FeishuConfig
from adapters.feishu.events import quoted_message_id, readable
from adapters.feishu.transport import FeishuApiError
from agent_core.messages import InboundMessage
from agent_core.thread_context import AuthorKind, EarlierMessage, ThreadContext

log = logging.getLogger(__name__)


async def fetch_thread(client: FeishuClient, config: FeishuConfig, msg: InboundMessage) -> ThreadContext | None:
    """The messages before ``msg`` in its topic or reply chain; None when it is in neither."""
    if msg.scheduled_run is not None:
        return None  # nobody asked in the thread: a report runs on its prompt alone
    quoted = next((q for a in msg.attachments if (q := quoted_message_id(a)) is not None), None)
    # A topic's or reply chain's first message (a menu click's or a DM's root is no message).
    root = msg.thread.root if msg.thread.root.startswith("om_") and msg.thread.root != msg.message_id else None
    if quoted is None and root is None:
        return None
    items: list[Any] = []
    left_unread = False
    if root is not None:
        first = await client.message(root)
        items = [first]
        if first.thread_id:
            try:
                items, left_unread = await client.thread_messages(first.thread_id)
            except FeishuApiError as exc:  # e.g. no im:message.group_msg: the topic's first message only
                log.info("feishu: topic %s not listed: %s", first.thread_id, exc)
    if quoted is not None and all(item.message_id != quoted for item in items):
        items.append(await client.message(quoted))
    items = [i for i in _before(items, msg.message_id) if i.message_id != msg.message_id and i.chat_id in (None, msg.channel)]
    messages = [_convert(item, config) for item in items if not item.deleted]
    return ThreadContext(messages=[m for m in messages if m.text or m.files], not_fetched=1 if left_unread else 0)


def _before(items: list[Any], message_id: str) -> list[Any]:
    """Oldest first, and only what was posted before the message (a topic lists later replies too)."""
    ordered = sorted(items, key=lambda item: int(item.create_time or 0))
    ids = [item.message_id for item in ordered]
    return ordered[: ids.index(message_id)] if message_id in ids else ordered


def _convert(item: Any, config: FeishuConfig) -> EarlierMessage:
    sender = item.sender
    kind: AuthorKind = "person"
    author = str(getattr(sender, "id", None) or "someone")
    if sender is not None and sender.sender_type == "app":
        kind = "self" if sender.id == config.app_id else "bot"
    try:
        content = json.loads(item.body.content if item.body is not None and item.body.content else "{}")
    except json.JSONDecodeError:
        content = {}
    names = {m.key: m.name for m in item.mentions or [] if m.key and m.name}
    text, files = readable(config, item.msg_type or "", content if isinstance(content, dict) else {}, names)
    return EarlierMessage(message_id=str(item.message_id), author=author, kind=kind, text=text, files=files)
