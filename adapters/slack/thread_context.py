"""A Slack thread before a message, as `agent_core.thread_context.ThreadContext`.

``conversations.replies`` of the message's own channel and thread only (scopes
``channels:history``, ``groups:history``, ``im:history``, ``mpim:history``: what the people in
that conversation read already), up to the message, oldest first. Each message becomes text:
its ``text``, the text of its blocks that the text does not already hold (another app's alert
often carries only a fallback line in ``text``), its legacy ``attachments`` (pretext, author,
title, text, fields, footer; the fallback when they have nothing else), and the names of its
files.
"""

from __future__ import annotations

import logging
from typing import Any

from slack_sdk.errors import SlackApiError

from agent_core.thread_context import AuthorKind, EarlierMessage, ThreadContext

log = logging.getLogger(__name__)

PAGE = 200  # conversations.replies' page size (Slack's maximum is 1000; 200 is its advice)
MAX_PAGES = 10  # a longer thread's oldest replies after its first message are not fetched
_MAX_DEPTH = 6  # nesting of blocks and elements read for text


async def fetch_thread(web: Any, channel: str, root: str, before: str, bot_user_id: str, bot_id: str | None) -> ThreadContext:
    """The thread ``root`` of ``channel`` up to (not including) the message ``before``.
    ``web`` is a slack_sdk AsyncWebClient; API errors propagate."""
    raw: list[dict[str, Any]] = []
    cursor: str | None = None
    pages = 0
    while True:
        try:
            response = await web.conversations_replies(
                channel=channel, ts=root, latest=before, inclusive=False, limit=PAGE, cursor=cursor
            )
        except SlackApiError as exc:
            if not raw:
                raise
            # A later page refused (e.g. rate-limited): the pages read so far still help.
            log.info("slack conversations.replies stopped after %d messages: %s", len(raw), exc.response.get("error"))
            break
        raw += [m for m in response.get("messages") or [] if isinstance(m, dict)]
        pages += 1
        cursor = (response.get("response_metadata") or {}).get("next_cursor") or None
        if not response.get("has_more") or cursor is None or pages >= MAX_PAGES:
            break
    earlier = [m for m in raw if _before(m, before)]
    not_fetched = 0
    if cursor is not None and raw:  # stopped at the page bound: count what was not read
        reply_count = raw[0].get("reply_count")
        if isinstance(reply_count, int):
            not_fetched = max(0, reply_count + 1 - len(raw))
    messages = [_convert(m, bot_user_id, bot_id) for m in earlier]
    return ThreadContext(messages=[m for m in messages if m.text or m.files], not_fetched=not_fetched)


def _before(message: dict[str, Any], ts: str) -> bool:
    try:
        return float(str(message.get("ts"))) < float(ts)
    except ValueError:
        return False


def _convert(message: dict[str, Any], bot_user_id: str, bot_id: str | None) -> EarlierMessage:
    user = str(message.get("user") or "")
    kind: AuthorKind
    own = user == bot_user_id or (bot_id is not None and message.get("bot_id") == bot_id)
    if own:
        kind, author = "self", "BA-Agent"
    elif message.get("bot_id") or message.get("subtype") == "bot_message":
        profile = message.get("bot_profile") or {}
        author = str(message.get("username") or profile.get("name") or message.get("bot_id") or "a bot")
        kind = "bot"
    else:
        profile = message.get("user_profile") or {}
        name = profile.get("display_name") or profile.get("real_name") if isinstance(profile, dict) else None
        author = f"{name} (<@{user}>)" if name else f"<@{user}>"
        kind = "person"
    return EarlierMessage(
        message_id=str(message.get("ts")),
        author=author,
        kind=kind,
        text=message_text(message),
        files=[str(f.get("name") or f.get("title")) for f in message.get("files") or [] if isinstance(f, dict)],
    )


def message_text(message: dict[str, Any]) -> str:
    """Everything a person sees written in a Slack message, as plain lines."""
    text = str(message.get("text") or "").strip()
    parts = [text] if text else []
    for line in _blocks_text(message.get("blocks")):
        if line and line not in text:
            parts.append(line)
    for attachment in message.get("attachments") or []:
        if isinstance(attachment, dict):
            parts.append(_attachment_text(attachment))
    return "\n".join(p for p in parts if p)


def _attachment_text(attachment: dict[str, Any]) -> str:
    lines = [str(attachment[key]) for key in ("pretext", "author_name", "title", "text") if attachment.get(key)]
    for field in attachment.get("fields") or []:
        if isinstance(field, dict) and (field.get("title") or field.get("value")):
            lines.append(f"{field.get('title', '')}: {field.get('value', '')}".strip(": "))
    lines += [line for line in _blocks_text(attachment.get("blocks")) if line]
    if attachment.get("footer"):
        lines.append(str(attachment["footer"]))
    if not lines and attachment.get("fallback"):
        lines.append(str(attachment["fallback"]))
    return "\n".join(lines)


def _blocks_text(blocks: Any) -> list[str]:
    """The text of Block Kit blocks: section text and fields, headers, context, rich text."""
    if not isinstance(blocks, list):
        return []
    lines: list[str] = []
    for block in blocks:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "rich_text":
            lines.append("".join(_rich_text(block.get("elements"), 0)))
            continue
        if isinstance(block.get("text"), dict) and block["text"].get("text"):
            lines.append(str(block["text"]["text"]))
        for item in block.get("fields") or []:
            if isinstance(item, dict) and item.get("text"):
                lines.append(str(item["text"]))
        if block.get("type") == "context":
            lines += [str(e["text"]) for e in block.get("elements") or [] if isinstance(e, dict) and e.get("text")]
    return [line.strip() for line in lines]


def _rich_text(elements: Any, depth: int) -> list[str]:
    if not isinstance(elements, list) or depth > _MAX_DEPTH:
        return []
    out: list[str] = []
    for element in elements:
        if not isinstance(element, dict):
            continue
        kind = element.get("type")
        if kind in ("text", "link"):
            out.append(str(element.get("text") or element.get("url") or ""))
        elif kind == "user":
            out.append(f"<@{element.get('user_id', '')}>")
        elif kind == "emoji":
            out.append(f":{element.get('name', '')}:")
        else:
            out += _rich_text(element.get("elements"), depth + 1)
            if kind in ("rich_text_section", "rich_text_preformatted", "rich_text_quote"):
                out.append("\n")
    return out
