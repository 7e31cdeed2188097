"""Parse Feishu event payloads (already decrypted and verified) into InboundMessages.

Handled: schema 2.0 `im.message.receive_v1` with message types text, post, image, file, audio and
media. Everything else (other event types, messages from bots, group messages that do not
mention the bot, stale redeliveries) becomes `Ignored(reason)`; card action callbacks are read
by `card_actions` instead (the pipeline routes them there).
"""

from __future__ import annotations

import json
import logging
import mimetypes
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator

from adapters.base import PlatformId
from adapters.feishu.config import FeishuConfig
from agent_core.messages import Attachment, InboundMessage, ThreadKey

log = logging.getLogger(__name__)

PLATFORM = "feishu"
MESSAGE_RECEIVED = "im.message.receive_v1"
CARD_ACTION = "card.action.trigger"
URL_VERIFICATION = "url_verification"
# The conversation of a DM's top-level messages (ThreadKey.root).
DM_MAIN_ROOT = "main"

_AT_ALL = "@_all"
# Mention placeholders in message text: "@_user_1", "@_user_12", "@_all", and the spaces after them.
_PLACEHOLDER = re.compile(r"(@_user_\d+|@_all)([ \t]*)")
# Preferred locales of a locale-wrapped post, best first; any other locale is used as a last resort.
_POST_LOCALES = ("zh_cn", "en_us", "ja_jp")


class MalformedEvent(ValueError):
    """The payload is not a well-formed Feishu event."""


@dataclass(frozen=True)
class Ignored:
    """A valid event the bot does not answer, and why. `topic`: the conversation a file posted
    without a mention would continue; answered after all if the bot is part of it."""

    reason: str
    topic: ThreadKey | None = None


KnownThread = Callable[[ThreadKey], Awaitable[bool]]


async def parse_event_in_context(
    payload: dict[str, Any], *, config: FeishuConfig, bot_open_id: str, known_thread: KnownThread
) -> InboundMessage | Ignored:
    """`parse_event`, plus: a file posted in a topic the bot is already part of needs no mention
    (a file message cannot carry one). The one extra lookup happens only for such messages."""
    result = parse_event(payload, config=config, bot_open_id=bot_open_id)
    if isinstance(result, Ignored) and result.topic is not None and await known_thread(result.topic):
        return parse_event(payload, config=config, bot_open_id=bot_open_id, in_known_topic=True)
    return result


class UrlVerification(BaseModel):
    """Feishu's challenge when a request URL is configured."""

    challenge: str
    token: str | None = None


class _UserId(BaseModel):
    open_id: PlatformId | None = None
    user_id: PlatformId | None = None
    union_id: PlatformId | None = None


class _Sender(BaseModel):
    sender_id: _UserId = Field(default_factory=_UserId)
    sender_type: PlatformId = ""
    tenant_key: PlatformId | None = None


class _Mention(BaseModel):
    key: str
    id: _UserId = Field(default_factory=_UserId)
    name: str = ""


class _Message(BaseModel):
    message_id: PlatformId
    root_id: PlatformId | None = None
    parent_id: PlatformId | None = None
    thread_id: PlatformId | None = None
    create_time: int  # milliseconds since the epoch (a string on the wire)
    chat_id: PlatformId
    chat_type: PlatformId
    message_type: PlatformId
    content: str = "{}"
    mentions: list[_Mention] = Field(default_factory=list)

    @field_validator("root_id", "parent_id", "thread_id", mode="before")
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        return value or None


class _MessageEvent(BaseModel):
    sender: _Sender
    message: _Message


class _Header(BaseModel):
    event_id: PlatformId
    event_type: PlatformId
    token: str | None = None
    app_id: PlatformId | None = None
    tenant_key: PlatformId | None = None


def url_verification(payload: dict[str, Any]) -> UrlVerification | None:
    """The challenge if `payload` is a url_verification request (schema 1.0 shape)."""
    if payload.get("type") != URL_VERIFICATION:
        return None
    try:
        return UrlVerification.model_validate(payload)
    except ValidationError as exc:
        raise MalformedEvent("url_verification without a challenge") from exc


def payload_token(payload: dict[str, Any]) -> str | None:
    """The verification token the payload carries (schema 2.0 header.token, or 1.0 token)."""
    header = payload.get("header")
    token = header.get("token") if isinstance(header, dict) else payload.get("token")
    return token if isinstance(token, str) else None


def parse_event(
    payload: dict[str, Any],
    *,
    config: FeishuConfig,
    bot_open_id: str,
    now: float | None = None,
    in_known_topic: bool = False,
) -> InboundMessage | Ignored:
    """Turn a decrypted event payload into an InboundMessage for the bot, or Ignored(reason).

    `bot_open_id` is the bot's own open_id (from /open-apis/bot/v3/info): it tells the bot's
    mention apart from other users' and drops the bot's own messages. Raises MalformedEvent on
    payloads that are not Feishu events.
    """
    header_raw = payload.get("header")
    if not isinstance(header_raw, dict):
        kind = payload.get("type")
        if kind == URL_VERIFICATION:
            return Ignored("url_verification is answered by the webhook")
        return Ignored(f"schema 1.0 event {kind!r} is not handled")
    try:
        header = _Header.model_validate(header_raw)
    except ValidationError as exc:
        raise MalformedEvent(f"bad event header: {exc.error_count()} errors") from exc
    if header.event_type == CARD_ACTION:
        return Ignored("card action callbacks are read by card_actions")
    if header.event_type != MESSAGE_RECEIVED:
        return Ignored(f"event type {header.event_type!r} is not handled")
    try:
        event = _MessageEvent.model_validate(payload.get("event"))
    except ValidationError as exc:
        raise MalformedEvent(f"bad {MESSAGE_RECEIVED} event: {exc.error_count()} errors") from exc
    try:
        return _parse_message(
            header, event, config, bot_open_id, time.time() if now is None else now, in_known_topic
        )
    except MalformedEvent:
        raise
    except (TypeError, AttributeError, KeyError, ValueError, OverflowError, RecursionError) as exc:
        # A field of an unexpected type or size inside the message content (e.g. a number
        # where a key string belongs): the event is not one Feishu sends.
        raise MalformedEvent(f"bad {MESSAGE_RECEIVED} event ({type(exc).__name__})") from None


def _parse_message(
    header: _Header,
    event: _MessageEvent,
    config: FeishuConfig,
    bot_open_id: str,
    now: float,
    in_known_topic: bool,
) -> InboundMessage | Ignored:
    message, sender = event.message, event.sender
    sender_open_id = sender.sender_id.open_id
    if sender.sender_type != "user":
        return Ignored(f"sender is a {sender.sender_type or 'non-user'}, not a user")
    if not sender_open_id:
        return Ignored("sender has no open_id")
    if sender_open_id == bot_open_id:
        return Ignored("message from the bot itself")

    age_s = now - message.create_time / 1000
    if age_s > config.max_event_age_s:
        log.info(
            "feishu: dropping message %s created %.0fs ago (max age %ss)",
            message.message_id,
            age_s,
            config.max_event_age_s,
        )
        return Ignored(f"message is {age_s:.0f}s old")

    try:
        content = json.loads(message.content)
    except (json.JSONDecodeError, RecursionError) as exc:
        raise MalformedEvent("message content is not JSON") from exc
    if not isinstance(content, dict):
        raise MalformedEvent("message content is not a JSON object")
    rendered = _render_content(message, content, config, bot_open_id)
    if isinstance(rendered, Ignored):
        return rendered
    raw_text, attachments = rendered

    is_dm = message.chat_type == "p2p"
    bot_keys = {m.key for m in message.mentions if m.id.open_id and m.id.open_id == bot_open_id}
    at_all = _AT_ALL in raw_text or any(m.key == _AT_ALL for m in message.mentions)
    workspace = header.tenant_key or sender.tenant_key or "default"
    posted_in_topic = bool(attachments) and message.root_id is not None
    if not (is_dm or bot_keys or (config.respond_to_at_all and at_all) or (in_known_topic and posted_in_topic)):
        root, _ = _thread_of(message, is_dm, config)
        topic = ThreadKey(platform=PLATFORM, workspace=workspace, channel=message.chat_id, root=root)
        return Ignored("group message does not mention the bot", topic=topic if posted_in_topic else None)

    # "@all" that addressed the bot is an address, like the bot's mention: both are stripped.
    strip_all = config.respond_to_at_all and not bot_keys
    text = _resolve_mentions(raw_text, message.mentions, bot_keys, strip_all)
    if not text and not attachments:
        return Ignored("empty message")

    if message.parent_id and not attachments:
        # "@bot what is the total in this file?" as a reply to a file: a file message cannot
        # carry a mention, so the question quotes it. The responder resolves the quoted
        # message into its file when the answer starts (no API call on the ack path).
        attachments = [_quoted(config, message.parent_id)]
    root, reply_root = _thread_of(message, is_dm, config)
    return InboundMessage(
        platform=PLATFORM,
        event_id=header.event_id,
        message_id=message.message_id,
        workspace=workspace,
        channel=message.chat_id,
        thread=ThreadKey(
            platform=PLATFORM, workspace=workspace, channel=message.chat_id, root=root
        ),
        reply_in_thread=reply_root,
        user=sender_open_id,
        text=text,
        is_dm=is_dm,
        attachments=attachments,
    )


def _thread_of(message: _Message, is_dm: bool, config: FeishuConfig) -> tuple[str, str | None]:
    """(conversation root, thread root to answer in or None for the top level / a quote reply).

    Replies inside a topic carry root_id = the topic's first message, which is also the id a
    top-level group mention gets as its root, so the mention and its follow-ups share a key.
    """
    in_topic = message.thread_id is not None
    if is_dm:
        if not in_topic:
            return DM_MAIN_ROOT, None
        root = message.root_id or message.message_id
        return root, root
    root = message.root_id or message.message_id
    return root, root if (in_topic or config.reply_in_thread) else None


def _render_content(
    message: _Message, content: dict[str, Any], config: FeishuConfig, bot_open_id: str
) -> tuple[str, list[Attachment]] | Ignored:
    """Text (with mention placeholders still in it) and attachments of one message."""
    kind = message.message_type
    if kind == "text":
        return str(content.get("text", "")), []
    if kind == "post":
        return _render_post(message, content, config, bot_open_id)
    if kind == "image":
        key = content.get("image_key")
        if not key:
            raise MalformedEvent("image message without image_key")
        return "", [_attachment(config, message.message_id, key, "image", f"image-{key[-12:]}")]
    if kind in ("file", "audio", "media"):
        key = content.get("file_key")
        if not key:
            raise MalformedEvent(f"{kind} message without file_key")
        default_name = f"{kind}-{key[-12:]}" + (".opus" if kind == "audio" else "")
        name = content.get("file_name") or default_name
        return "", [_attachment(config, message.message_id, key, "file", name)]
    return Ignored(f"message type {kind!r} is not handled")


def _render_post(
    message: _Message, content: dict[str, Any], config: FeishuConfig, bot_open_id: str
) -> tuple[str, list[Attachment]]:
    post = _unwrap_post(content)
    attachments: list[Attachment] = []
    lines: list[str] = []
    title = str(post.get("title") or "").strip()
    if title:
        lines.append(title)
    for paragraph in post.get("content") or []:
        if not isinstance(paragraph, list):
            continue
        parts: list[str] = []
        for element in paragraph:
            if isinstance(element, dict):
                parts.append(
                    _render_post_element(message, element, attachments, config, bot_open_id)
                )
        lines.append("".join(parts))
    return "\n".join(lines).strip(), attachments


def _unwrap_post(content: dict[str, Any]) -> dict[str, Any]:
    """Received posts are flat {"title", "content"}; sent ones are wrapped in a locale."""
    if "content" in content:
        return content
    for locale in _POST_LOCALES:
        if isinstance(content.get(locale), dict):
            return content[locale]
    for value in content.values():
        if isinstance(value, dict) and "content" in value:
            return value
    return {}


def _render_post_element(
    message: _Message,
    element: dict[str, Any],
    attachments: list[Attachment],
    config: FeishuConfig,
    bot_open_id: str,
) -> str:
    tag = element.get("tag")
    if tag == "md":
        return str(element.get("text", ""))
    if tag == "text":
        return _styled(str(element.get("text", "")), element.get("style") or [])
    if tag == "a":
        text, href = element.get("text") or element.get("href", ""), element.get("href")
        return f"[{text}]({href})" if href else str(text)
    if tag == "at":
        user_id = str(element.get("user_id", ""))
        if user_id.startswith("@_"):
            return user_id  # a placeholder, resolved with the other mentions
        if user_id == "all":
            return _AT_ALL
        if user_id and user_id == bot_open_id:
            return ""
        return f"@{element.get('user_name') or user_id}"
    if tag == "img" and element.get("image_key"):
        key = element["image_key"]
        attachments.append(
            _attachment(config, message.message_id, key, "image", f"image-{key[-12:]}")
        )
        return ""
    if tag in ("media", "file") and element.get("file_key"):
        key = element["file_key"]
        name = element.get("file_name") or f"{tag}-{key[-12:]}"
        attachments.append(_attachment(config, message.message_id, key, "file", name))
        return ""
    if tag == "code_block":
        return f"\n```{element.get('language', '').lower()}\n{element.get('text', '')}\n```\n"
    if tag == "emotion":
        return f":{element.get('emoji_type', '')}:"
    if tag == "hr":
        return "\n---\n"
    return ""


def _styled(text: str, styles: list[str]) -> str:
    """A post text run with its styles as Markdown (what the user wrote, for the model)."""
    if not text.strip():
        return text
    for style, mark in (("bold", "**"), ("italic", "*"), ("lineThrough", "~~")):
        if style in styles:
            text = f"{mark}{text}{mark}"
    return text


def _resolve_mentions(
    text: str, mentions: list[_Mention], bot_keys: set[str], strip_all: bool
) -> str:
    """Replace @_user_N placeholders with @name; drop the bot's own mention (and @all if asked)."""
    names = {m.key: m.name for m in mentions}

    def replace(match: re.Match[str]) -> str:
        key, spacing = match.group(1), match.group(2)
        if key in bot_keys or (key == _AT_ALL and strip_all):
            return ""
        if key == _AT_ALL:
            return "@all" + spacing
        if key in names:
            return f"@{names[key]}" + spacing
        return match.group(0)

    return _PLACEHOLDER.sub(replace, text).strip()


def _attachment(
    config: FeishuConfig, message_id: str, key: str, kind: str, name: str
) -> Attachment:
    # The url is the authenticated resource endpoint; `kind` ("image" or "file") is its `type`
    # query parameter, which the download needs to pick the right resource. An image's format is
    # only known once downloaded (the download names the file after its Content-Type).
    return Attachment(
        file_id=key,
        name=name,
        mime_type=mimetypes.guess_type(name)[0] or "application/octet-stream",
        url=f"{config.domain}/open-apis/im/v1/messages/{message_id}/resources/{key}?type={kind}",
    )


QUOTED_PREFIX = "quoted:"


def _quoted(config: FeishuConfig, message_id: str) -> Attachment:
    """Stands for the file or image of the message being replied to (see `is_quoted`)."""
    return Attachment(
        file_id=f"{QUOTED_PREFIX}{message_id}",
        name="quoted message",
        url=f"{config.domain}/open-apis/im/v1/messages/{message_id}",
    )


def quoted_message_id(attachment: Attachment) -> str | None:
    """The quoted message's id if `attachment` stands for one, else None."""
    return attachment.file_id.removeprefix(QUOTED_PREFIX) if attachment.file_id.startswith(QUOTED_PREFIX) else None


def attachments_of(config: FeishuConfig, message_id: str, message_type: str, content: dict[str, Any]) -> list[Attachment]:
    """The file or image a stored message holds (for a quoted message fetched by id)."""
    if message_type == "image" and content.get("image_key"):
        key = str(content["image_key"])
        return [_attachment(config, message_id, key, "image", f"image-{key[-12:]}")]
    if message_type in ("file", "media") and content.get("file_key"):
        key = str(content["file_key"])
        return [_attachment(config, message_id, key, "file", str(content.get("file_name") or f"file-{key[-12:]}"))]
    return []


def readable(
    config: FeishuConfig, message_type: str, content: dict[str, Any], mention_names: dict[str, str]
) -> tuple[str, list[str]]:
    """What a person sees in a stored message (text, post, card, file), as text, and the names of
    its files: for the earlier messages of a thread (`adapters.feishu.thread_context`)."""
    placeholder = _Message(message_id="", create_time=0, chat_id="", chat_type="", message_type=message_type)
    if message_type == "text":
        text = str(content.get("text", ""))
        return _PLACEHOLDER.sub(lambda m: f"@{mention_names.get(m.group(1), m.group(1))}{m.group(2)}", text), []
    if message_type == "post":
        attachments: list[Attachment] = []
        lines: list[str] = []
        post = _unwrap_post(content)
        if str(post.get("title") or "").strip():
            lines.append(str(post["title"]).strip())
        for paragraph in post.get("content") or []:
            if isinstance(paragraph, list):
                lines.append("".join(_render_post_element(placeholder, e, attachments, config, "")
                                     for e in paragraph if isinstance(e, dict)))  # fmt: skip
        text = _PLACEHOLDER.sub(lambda m: f"@{mention_names.get(m.group(1), m.group(1))}{m.group(2)}", "\n".join(lines))
        return text.strip(), [a.name for a in attachments]
    if message_type == "interactive":
        return "\n".join(_card_strings(content, 0)), []
    if message_type in ("file", "media", "audio"):
        return "", [str(content.get("file_name") or message_type)]
    if message_type == "image":
        return "", ["image"]
    return "", []


def _card_strings(node: Any, depth: int) -> list[str]:
    """The visible strings of a card (titles, markdown, plain text), in order."""
    if depth > 12:
        return []
    if isinstance(node, list):
        return [s for item in node for s in _card_strings(item, depth + 1)]
    if not isinstance(node, dict):
        return []
    found: list[str] = []
    for key, value in node.items():
        if key in ("content", "text", "title") and isinstance(value, str) and value.strip():
            found.append(value.strip())
        elif isinstance(value, (dict, list)):
            found += _card_strings(value, depth + 1)
    return found
