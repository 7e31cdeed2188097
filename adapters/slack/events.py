"""Slack event payloads → `InboundMessage`, or the reason an event is not for the bot.

Rules: a top-level channel message reaches us as `app_mention`; follow-ups in a channel thread
the bot is already part of come as `message` (unless mentions are required); DMs come as
`message` with `channel_type: im`. One mention is delivered as both `app_mention` and `message`:
the `message` copy is dropped here (the inbox's message dedupe catches anything left).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Strict, StrictInt, StrictStr, ValidationError

from adapters.base import CONTROL_CHARACTERS, PlatformId
from agent_core.messages import Attachment, InboundMessage, ThreadKey

PLATFORM = "slack"
DM_ROOT = "main"
_ALLOWED_SUBTYPES = {None, "file_share"}


@dataclass(frozen=True)
class Ignored:
    reason: str


class MalformedEvent(ValueError):
    """A (verified) payload without the shape of a Slack event; the message names the problem
    and never quotes the payload."""


_HAS_CONTROL_CHARACTER = re.compile(f"[{CONTROL_CHARACTERS}]")
_Name = Annotated[PlatformId, Strict()]  # an id, a ts, a type name (see `PlatformId`)


class _File(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: _Name | None = None
    name: _Name | None = None
    title: StrictStr | None = None
    mimetype: StrictStr | None = None
    size: StrictInt | None = None
    url_private: StrictStr | None = None
    url_private_download: StrictStr | None = None


class _MessageShape(BaseModel):
    """The fields of a `message` / `app_mention` event that bolt and `parse_event` read."""

    model_config = ConfigDict(extra="allow")

    type: _Name
    channel: _Name
    ts: _Name
    user: _Name | None = None
    text: StrictStr | None = None
    thread_ts: _Name | None = None
    channel_type: _Name | None = None
    subtype: _Name | None = None
    bot_id: _Name | None = None
    team: _Name | None = None
    files: list[_File] | None = None


# Envelope fields bolt reads as "a string, or an object with an id" (team, user …).
_ID_OR_OBJECT = ("team", "enterprise", "user", "channel")
_STRING_FIELDS = ("type", "team_id", "enterprise_id", "api_app_id", "event_id", "context_team_id")


def check_envelope(body: dict[str, Any]) -> None:
    """Raise MalformedEvent unless a parsed request body has the shape that slack-bolt's request
    handling and our listeners index into: strings where strings are read, objects where keys
    are looked up, lists where items are taken. A payload passing this cannot make bolt or
    `parse_event` fail with a TypeError/KeyError half-way through (an answer of 500)."""
    for key in _STRING_FIELDS:
        if body.get(key) is not None and not isinstance(body[key], str):
            raise MalformedEvent(f"field {key!r} is not a string")
        _check_name(body.get(key), key, "payload")
    _check_ids(body, "payload")
    authorizations = body.get("authorizations")
    if authorizations is not None and not (
        isinstance(authorizations, list) and all(isinstance(a, dict) for a in authorizations)
    ):
        raise MalformedEvent("field 'authorizations' is not a list of objects")
    for authorization in authorizations or []:
        _check_ids(authorization, "authorization")
    if body.get("type") == "url_verification" and not isinstance(body.get("challenge"), str):
        raise MalformedEvent("url_verification without a challenge")
    _check_interaction(body)
    if "event" not in body:
        return
    event = body["event"]
    if not isinstance(event, dict):
        raise MalformedEvent("field 'event' is not an object")
    if not isinstance(event.get("type"), str):
        raise MalformedEvent("the event has no type")
    _check_ids(event, "event")
    if event["type"] in ("message", "app_mention"):
        try:
            _MessageShape.model_validate(event)
        except ValidationError as exc:
            fields = sorted({".".join(str(p) for p in e["loc"]) for e in exc.errors()})
            raise MalformedEvent(f"{event['type']} event with bad fields: {', '.join(fields)}") from None


def _check_ids(payload: dict[str, Any], where: str) -> None:
    for key in _ID_OR_OBJECT:
        value = payload.get(key)
        if value is not None and not isinstance(value, (str, dict)):
            raise MalformedEvent(f"field {key!r} of the {where} is neither a string nor an object")
        _check_name(value, key, where)


# What the interaction listeners read of a button click or a modal submission (besides the
# envelope's ids above), by the object it is in: ids, timestamps, a button's value, a modal's
# private metadata. All of them are the app's own or Slack's, never typed by a person.
_INTERACTION_NAMES = {
    "payload": ("trigger_id",),
    "user": ("id", "username", "name", "team_id"),
    "container": ("type", "message_ts", "channel_id", "thread_ts"),
    "view": ("type", "id", "callback_id", "private_metadata"),
    "action": ("type", "action_id", "block_id", "value", "action_ts"),
}


def _check_interaction(body: dict[str, Any]) -> None:
    """A button click (`actions`) or a modal submission (`view`): the objects the listeners
    look into are objects, and what they read as ids holds no control character (PostgreSQL
    refuses a NUL in a query's text parameter: the click would have been a 500)."""
    objects: list[tuple[str, object]] = [("payload", body)]
    # A user given as a plain id string was checked with the envelope's ids.
    objects += [(key, body[key]) for key in ("user", "container", "view")
                if body.get(key) is not None and not (key == "user" and isinstance(body[key], str))]
    actions = body.get("actions")
    if actions is not None and not isinstance(actions, list):
        raise MalformedEvent("field 'actions' is not a list")
    objects += [("action", action) for action in actions or []]
    for where, obj in objects:
        if not isinstance(obj, dict):
            raise MalformedEvent(f"the {where} is not an object")
        for key in _INTERACTION_NAMES[where]:
            value = obj.get(key)
            if value is not None and not isinstance(value, str):
                raise MalformedEvent(f"field {key!r} of the {where} is not a string")
            _check_name(value, key, where)
    if body.get("type") == "view_submission" and not isinstance((body.get("view") or {}).get("type"), str):
        raise MalformedEvent("view_submission without a view type")


def _check_name(value: object, key: str, where: str) -> None:
    if isinstance(value, str) and _HAS_CONTROL_CHARACTER.search(value):
        raise MalformedEvent(f"field {key!r} of the {where} holds a control character")


def strip_mention(text: str, bot_user_id: str) -> str:
    """Remove the bot's own mention(s) (`<@U123>` or `<@U123|name>`) and tidy whitespace."""
    return re.sub(rf"<@{re.escape(bot_user_id)}(\|[^>]*)?>", "", text).strip()


def mentions(text: str, bot_user_id: str) -> bool:
    return re.search(rf"<@{re.escape(bot_user_id)}(\|[^>]*)?>", text or "") is not None


def _attachments(event: dict[str, Any]) -> list[Attachment]:
    return [
        Attachment(
            file_id=f["id"],
            name=f.get("name") or f.get("title") or f["id"],
            mime_type=f.get("mimetype") or "application/octet-stream",
            size=f.get("size"),
            url=f.get("url_private_download") or f.get("url_private"),
        )
        for f in event.get("files") or []
        if f.get("id")
    ]


def thread_key_for(team: str, channel: str, root: str) -> ThreadKey:
    return ThreadKey(platform=PLATFORM, workspace=team, channel=channel, root=root)


def parse_event(
    event_id: str,
    team_id: str,
    event: dict[str, Any],
    bot_user_id: str,
    bot_id: str | None,
    in_known_thread: bool,
    require_mention_in_threads: bool,
) -> InboundMessage | Ignored:
    """Decide whether an Events API `event` is a message for the bot and parse it.

    `in_known_thread`: a reply in a channel thread, without a mention, is for the bot (the
    adapter has the inbox store it only if the bot is part of that thread)."""
    kind = event.get("type")
    if kind not in ("app_mention", "message"):
        return Ignored(f"event type {kind}")
    if event.get("subtype") not in _ALLOWED_SUBTYPES:
        return Ignored(f"subtype {event.get('subtype')}")
    if event.get("bot_id") or event.get("user") in (None, bot_user_id) or (bot_id and event.get("bot_id") == bot_id):
        return Ignored("not from a person")

    channel: str = event["channel"]
    ts: str = event["ts"]
    thread_ts: str | None = event.get("thread_ts")
    text = event.get("text") or ""
    team = event.get("team") or team_id
    is_dm = kind == "message" and event.get("channel_type") == "im"

    if is_dm:
        reply_in = thread_ts if thread_ts and thread_ts != ts else None
        root = reply_in or DM_ROOT
    elif kind == "app_mention" or mentions(text, bot_user_id):
        # A mention may arrive as app_mention, as a message (file_share among them), or both
        # (slack-bolt issues #925, #1451): either one starts the answer, and the inbox's
        # per-message dedupe key (channel + ts) admits the second one never.
        root = thread_ts or ts
        reply_in = root
    else:
        if not thread_ts or thread_ts == ts:
            return Ignored("top-level channel message without a mention")
        if require_mention_in_threads or not in_known_thread:
            return Ignored("thread message not addressed to the bot")
        root = thread_ts
        reply_in = thread_ts

    return InboundMessage(
        platform=PLATFORM,
        event_id=event_id,
        message_id=ts,
        workspace=team,
        channel=channel,
        thread=thread_key_for(team, channel, root),
        reply_in_thread=reply_in,
        user=event["user"],
        text=strip_mention(text, bot_user_id),
        is_dm=is_dm,
        attachments=_attachments(event),
    )


def candidate_thread(team_id: str, event: dict[str, Any], bot_user_id: str) -> ThreadKey | None:
    """The thread a channel `message` event would continue, if whether the bot is in it decides
    whether the message is for the bot; None when that changes nothing: a message that mentions
    the bot is for it either way (the companion of an `app_mention` in a thread is one)."""
    thread_ts = event.get("thread_ts")
    if event.get("type") != "message" or not thread_ts or event.get("channel_type") == "im":
        return None
    if mentions(event.get("text") or "", bot_user_id):
        return None
    return thread_key_for(event.get("team") or team_id, event["channel"], thread_ts)


def parse_stop(event_id: str, team_id: str, event: dict[str, Any]) -> InboundMessage | Ignored:
    """An `agent_session_stopped` event (a person clicked Stop while the bot was working in a
    thread) as the Stop of that thread's conversation."""
    channel, thread_ts, user = event.get("channel"), event.get("thread_ts"), event.get("user")
    if not (isinstance(channel, str) and isinstance(thread_ts, str) and isinstance(user, str)):
        return Ignored("agent_session_stopped without channel, thread or user")
    stopped_at = str(event.get("event_ts") or event_id)
    return InboundMessage(
        platform=PLATFORM,
        event_id=event_id,
        message_id=f"stop:{thread_ts}:{stopped_at}",
        workspace=team_id,
        channel=channel,
        thread=thread_key_for(team_id, channel, thread_ts),
        reply_in_thread=thread_ts,
        user=user,
        text="",
        is_dm=channel.startswith("D"),
        stop=True,
    )
