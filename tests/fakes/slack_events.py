"""Build and sign Slack Events API deliveries the way Slack sends them.

::

    payload = app_mention("<@UBOT> why did GMV drop?", "U1", "C1", ts="1700000001.000100")
    body, headers = signed_request(payload, signing_secret="secret")
    # POST body/headers to the app's /slack/events endpoint, or hand them to Bolt

Envelope fields follow https://api.slack.com/apis/events-api#callback-field (event_callback
with ``authorizations``); events carry ``rich_text`` blocks like real user messages.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
import string
import time
import uuid
from typing import Any, Literal
from urllib.parse import urlencode

__all__ = [
    "app_mention",
    "app_uninstalled",
    "block_actions",
    "encode",
    "message",
    "sign",
    "signed_interaction",
    "signed_request",
    "url_verification",
]

ChannelType = Literal["im", "channel", "group", "mpim"]

# The legacy verification token Slack still includes in every payload.
VERIFICATION_TOKEN = "fake-verification-token"
_MENTION = re.compile(r"<@([A-Z0-9]+)>")


def sign(
    body: bytes,
    signing_secret: str,
    timestamp: int | None = None,
    *,
    retry_num: int | None = None,
    retry_reason: str | None = None,
) -> dict[str, str]:
    """Headers Slack sends with ``body``: v0 HMAC-SHA256 signature over ``v0:{ts}:{body}``.

    ``timestamp`` defaults to now (Bolt rejects ones older than five minutes).
    ``retry_num`` / ``retry_reason`` add the headers of Slack's redeliveries
    (e.g. ``1``, ``"http_timeout"``).
    """
    ts = str(int(time.time()) if timestamp is None else timestamp)
    digest = hmac.new(
        signing_secret.encode(), b"v0:" + ts.encode() + b":" + body, hashlib.sha256
    ).hexdigest()
    headers = {
        "Content-Type": "application/json",
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": f"v0={digest}",
    }
    if retry_num is not None:
        headers["X-Slack-Retry-Num"] = str(retry_num)
    if retry_reason is not None:
        headers["X-Slack-Retry-Reason"] = retry_reason
    return headers


def encode(payload: dict[str, Any]) -> bytes:
    """Serialize a payload compactly, as Slack does (the signature covers these exact bytes)."""
    return json.dumps(payload, separators=(",", ":")).encode()


def signed_request(
    payload: dict[str, Any],
    signing_secret: str,
    timestamp: int | None = None,
    *,
    retry_num: int | None = None,
    retry_reason: str | None = None,
) -> tuple[bytes, dict[str, str]]:
    """``(body, headers)`` ready to POST; arguments as for :func:`sign`."""
    body = encode(payload)
    headers = sign(body, signing_secret, timestamp, retry_num=retry_num, retry_reason=retry_reason)
    return body, headers


def url_verification(challenge: str) -> dict[str, Any]:
    """The handshake Slack sends when the events URL is configured."""
    return {"token": VERIFICATION_TOKEN, "challenge": challenge, "type": "url_verification"}


def _rich_text_blocks(text: str) -> list[dict[str, Any]]:
    """A ``rich_text`` block as Slack's composer produces, with ``<@U..>`` as user elements."""
    elements: list[dict[str, Any]] = []
    position = 0
    for match in _MENTION.finditer(text):
        if match.start() > position:
            elements.append({"type": "text", "text": text[position : match.start()]})
        elements.append({"type": "user", "user_id": match.group(1)})
        position = match.end()
    if position < len(text):
        elements.append({"type": "text", "text": text[position:]})
    block_id = "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(5))
    return [
        {
            "type": "rich_text",
            "block_id": block_id,
            "elements": [{"type": "rich_text_section", "elements": elements}],
        }
    ]


def app_uninstalled(team: str = "T1", *, api_app_id: str = "A1", event_id: str | None = None) -> dict[str, Any]:
    """The ``app_uninstalled`` event_callback Slack sends when a workspace removes the app."""
    return {
        "token": VERIFICATION_TOKEN,
        "team_id": team,
        "api_app_id": api_app_id,
        "event": {"type": "app_uninstalled"},
        "type": "event_callback",
        "event_id": event_id or "Ev" + secrets.token_hex(5).upper(),
        "event_time": int(time.time()),
    }


def _envelope(
    event: dict[str, Any],
    *,
    team: str,
    event_id: str | None,
    bot_user_id: str,
    api_app_id: str,
    enterprise: str | None = None,
    org_wide: bool = False,
) -> dict[str, Any]:
    """An event_callback; `enterprise` for a workspace of an Enterprise Grid org, `org_wide`
    when the app is installed for the whole org (its authorization then names no team)."""
    return {
        "token": VERIFICATION_TOKEN,
        "team_id": team,
        "context_team_id": team,
        **({"enterprise_id": enterprise, "context_enterprise_id": enterprise} if enterprise else {}),
        "api_app_id": api_app_id,
        "event": event,
        "type": "event_callback",
        "event_id": event_id or "Ev" + secrets.token_hex(5).upper(),
        "event_time": int(float(event["event_ts"])),
        "authorizations": [
            {
                "enterprise_id": enterprise,
                "team_id": None if org_wide else team,
                "user_id": bot_user_id,
                "is_bot": True,
                "is_enterprise_install": org_wide,
            }
        ],
        "is_ext_shared_channel": False,
    }


def app_mention(
    text: str,
    user: str,
    channel: str,
    ts: str,
    thread_ts: str | None = None,
    team: str = "T1",
    event_id: str | None = None,
    *,
    bot_user_id: str = "UBOT",
    api_app_id: str = "A1",
    enterprise: str | None = None,
    org_wide: bool = False,
) -> dict[str, Any]:
    """An ``app_mention`` event_callback, e.g. for text ``"<@UBOT> why did GMV drop?"``."""
    event = {
        "type": "app_mention",
        "client_msg_id": str(uuid.uuid4()),
        "text": text,
        "user": user,
        "ts": ts,
        "blocks": _rich_text_blocks(text),
        "team": team,
        "channel": channel,
        "event_ts": ts,
        **({"thread_ts": thread_ts} if thread_ts else {}),
    }
    return _envelope(
        event, team=team, event_id=event_id, bot_user_id=bot_user_id, api_app_id=api_app_id,
        enterprise=enterprise, org_wide=org_wide,
    )  # fmt: skip


def message(
    text: str,
    user: str,
    channel: str,
    ts: str,
    channel_type: ChannelType = "im",
    thread_ts: str | None = None,
    subtype: str | None = None,
    bot_id: str | None = None,
    files: list[dict[str, Any]] | None = None,
    team: str = "T1",
    event_id: str | None = None,
    *,
    bot_user_id: str = "UBOT",
    api_app_id: str = "A1",
) -> dict[str, Any]:
    """A ``message`` event_callback.

    With ``files`` (Slack file objects, e.g. from ``FakeSlack.add_file``) the subtype
    defaults to ``file_share`` as Slack sends it. ``bot_id`` marks a bot's message
    (the app's own posts come back this way and must be ignored).
    """
    if files and subtype is None:
        subtype = "file_share"
    event: dict[str, Any] = {
        "type": "message",
        "text": text,
        "user": user,
        "ts": ts,
        "team": team,
        "channel": channel,
        "event_ts": ts,
        "channel_type": channel_type,
    }
    if bot_id is None:
        # Only messages typed by people carry a client_msg_id and composer blocks.
        event["client_msg_id"] = str(uuid.uuid4())
        event["blocks"] = _rich_text_blocks(text)
    else:
        event["bot_id"] = bot_id
    if subtype:
        event["subtype"] = subtype
    if thread_ts:
        event["thread_ts"] = thread_ts
    if files:
        event["files"] = files
        event["upload"] = False
    return _envelope(
        event, team=team, event_id=event_id, bot_user_id=bot_user_id, api_app_id=api_app_id
    )


def agent_session_stopped(
    channel: str,
    thread_ts: str,
    user: str,
    *,
    streaming_message_ts: list[str] | None = None,
    team: str = "T1",
    event_id: str | None = None,
    bot_user_id: str = "UBOT",
    api_app_id: str = "A1",
) -> dict[str, Any]:
    """``user`` clicked the native Stop of the agent session in ``channel``/``thread_ts``
    (https://docs.slack.dev/reference/events/agent_session_stopped): ``streaming_message_ts``
    lists the app's streams Slack stopped (``FakeSlack.click_stop`` returns them)."""
    event = {
        "type": "agent_session_stopped",
        "channel": channel,
        "thread_ts": thread_ts,
        "user": user,
        "streaming_message_ts": streaming_message_ts or [],
        "event_ts": f"{time.time():.6f}",
    }
    return _envelope(event, team=team, event_id=event_id, bot_user_id=bot_user_id, api_app_id=api_app_id)


def assistant_thread_started(
    user: str,
    channel: str,
    thread_ts: str,
    *,
    context_channel: str | None = None,
    team: str = "T1",
    event_id: str | None = None,
    bot_user_id: str = "UBOT",
    api_app_id: str = "A1",
) -> dict[str, Any]:
    """``user`` opened the app's messages tab / AI container, which started the assistant thread
    ``channel``/``thread_ts`` (https://docs.slack.dev/reference/events/assistant_thread_started);
    ``context_channel``: the channel they were viewing."""
    context: dict[str, Any] = {"team_id": team, "enterprise_id": None}
    if context_channel:
        context["channel_id"] = context_channel
    event = {
        "type": "assistant_thread_started",
        "assistant_thread": {"user_id": user, "context": context, "channel_id": channel, "thread_ts": thread_ts},
        "event_ts": f"{time.time():.6f}",
    }
    return _envelope(event, team=team, event_id=event_id, bot_user_id=bot_user_id, api_app_id=api_app_id)


def block_actions(
    message: dict[str, Any],
    action_id: str,
    user: str,
    *,
    team: str = "T1",
    api_app_id: str = "A1",
    action_ts: str | None = None,
) -> dict[str, Any]:
    """The ``block_actions`` interactive payload of ``user`` clicking the button ``action_id``
    in ``message`` (a bot message as ``FakeSlack.posted`` returns it, with its blocks).

    Slack posts it to the request URL form-encoded (``payload=<json>``): send it with
    :func:`signed_interaction`."""
    button = next(
        element
        for block in message.get("blocks", [])
        if block.get("type") == "actions"
        for element in block.get("elements", [])
        if element.get("action_id") == action_id
    )
    block_id = next(b.get("block_id") for b in message["blocks"] if button in b.get("elements", []))
    ts = action_ts or f"{time.time():.6f}"
    container = {
        "type": "message",
        "message_ts": message["ts"],
        "channel_id": message["channel"],
        "is_ephemeral": False,
        **({"thread_ts": message["thread_ts"]} if message.get("thread_ts") else {}),
    }
    return {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": team},
        "api_app_id": api_app_id,
        "token": VERIFICATION_TOKEN,
        "container": container,
        "trigger_id": f"{secrets.randbelow(10**10)}.{secrets.randbelow(10**10)}.{uuid.uuid4().hex}",
        "team": {"id": team, "domain": "fake"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": message["channel"], "name": "channel"},
        "message": {k: message[k] for k in ("type", "ts", "text", "blocks", "thread_ts") if k in message},
        "response_url": f"https://hooks.slack.com/actions/{team}/{secrets.randbelow(10**12)}/{uuid.uuid4().hex}",
        "actions": [
            {
                "action_id": action_id,
                "block_id": block_id,
                "text": button["text"],
                "value": button.get("value"),
                "style": button.get("style"),
                "type": "button",
                "action_ts": ts,
            }
        ],
        "state": {"values": {}},
    }


def feedback_click(
    message: dict[str, Any],
    positive: bool,
    user: str,
    *,
    team: str = "T1",
    api_app_id: str = "A1",
) -> dict[str, Any]:
    """The ``block_actions`` payload of ``user`` clicking 👍 (``positive``) or 👎 of the
    ``feedback_buttons`` in ``message``'s ``context_actions`` block (send it with
    :func:`signed_interaction`)."""
    element, block_id = next(
        (element, block.get("block_id"))
        for block in message.get("blocks", [])
        if block.get("type") == "context_actions"
        for element in block.get("elements", [])
        if element.get("type") == "feedback_buttons"
    )
    button = element["positive_button" if positive else "negative_button"]
    payload = _interaction(message, user, team=team, api_app_id=api_app_id)
    payload["actions"] = [
        {
            "type": "feedback_buttons",
            "action_id": element["action_id"],
            "block_id": block_id,
            "text": button["text"],
            "value": button["value"],
            "action_ts": f"{time.time():.6f}",
        }
    ]
    return payload


def view_submission(view: dict[str, Any], user: str, values: dict[str, dict[str, str]], *, team: str = "T1") -> dict[str, Any]:
    """``user`` submitting the modal ``view`` (as ``FakeSlack.views`` holds it) with
    ``values``: {block_id: {action_id: text}} for its plain-text inputs."""
    state = {
        block_id: {action_id: {"type": "plain_text_input", "value": text} for action_id, text in inputs.items()}
        for block_id, inputs in values.items()
    }
    return {
        "type": "view_submission",
        "team": {"id": team, "domain": "fake"},
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": team},
        "api_app_id": "A1",
        "token": VERIFICATION_TOKEN,
        "trigger_id": f"{secrets.randbelow(10**10)}.{secrets.randbelow(10**10)}.{uuid.uuid4().hex}",
        "view": {**view, "state": {"values": state}, "hash": uuid.uuid4().hex[:16]},
        "response_urls": [],
        "is_enterprise_install": False,
        "enterprise": None,
    }


def _interaction(message: dict[str, Any], user: str, *, team: str, api_app_id: str) -> dict[str, Any]:
    container = {
        "type": "message",
        "message_ts": message["ts"],
        "channel_id": message["channel"],
        "is_ephemeral": False,
        **({"thread_ts": message["thread_ts"]} if message.get("thread_ts") else {}),
    }
    return {
        "type": "block_actions",
        "user": {"id": user, "username": user.lower(), "name": user.lower(), "team_id": team},
        "api_app_id": api_app_id,
        "token": VERIFICATION_TOKEN,
        "container": container,
        "trigger_id": f"{secrets.randbelow(10**10)}.{secrets.randbelow(10**10)}.{uuid.uuid4().hex}",
        "team": {"id": team, "domain": "fake"},
        "enterprise": None,
        "is_enterprise_install": False,
        "channel": {"id": message["channel"], "name": "channel"},
        "message": {k: message[k] for k in ("type", "ts", "text", "blocks", "thread_ts") if k in message},
        "response_url": f"https://hooks.slack.com/actions/{team}/{secrets.randbelow(10**12)}/{uuid.uuid4().hex}",
        "state": {"values": {}},
    }


def signed_interaction(
    payload: dict[str, Any], signing_secret: str, timestamp: int | None = None
) -> tuple[bytes, dict[str, str]]:
    """``(body, headers)`` of an interactive payload as Slack posts it: form-encoded."""
    body = urlencode({"payload": json.dumps(payload, separators=(",", ":"))}).encode()
    headers = sign(body, signing_secret, timestamp)
    headers["Content-Type"] = "application/x-www-form-urlencoded"
    return body, headers
