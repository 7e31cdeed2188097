"""Builders for Feishu event callbacks: v2 message events, card action callbacks,
url_verification, encryption and signature headers."""

from __future__ import annotations

import base64
import json
import os
import time
import uuid
from typing import Any

from Crypto.Cipher import AES
from Crypto.Util.Padding import pad

from adapters.feishu.crypto import aes_key, signature

VERIFICATION_TOKEN = "v-token-123"
ENCRYPT_KEY = "e-key-456"
TENANT_KEY = "tenant_1"
BOT_OPEN_ID = "ou_bot"
USER_OPEN_ID = "ou_alice"


def mention(key: str, open_id: str, name: str) -> dict[str, Any]:
    """An entry of message.mentions (key is the placeholder in the text, e.g. "@_user_1")."""
    return {
        "key": key,
        "id": {"open_id": open_id, "union_id": f"on_{open_id}", "user_id": None},
        "name": name,
        "tenant_key": TENANT_KEY,
    }


def bot_mention(key: str = "@_user_1") -> dict[str, Any]:
    return mention(key, BOT_OPEN_ID, "BA Agent")


def message_event(
    content: dict[str, Any],
    *,
    msg_type: str = "text",
    chat_type: str = "group",
    chat_id: str = "oc_group",
    message_id: str | None = None,
    root_id: str | None = None,
    parent_id: str | None = None,
    thread_id: str | None = None,
    mentions: list[dict[str, Any]] | None = None,
    sender_open_id: str = USER_OPEN_ID,
    sender_type: str = "user",
    event_id: str | None = None,
    create_time_ms: int | None = None,
    token: str = VERIFICATION_TOKEN,
    tenant_key: str = TENANT_KEY,
) -> dict[str, Any]:
    """A schema 2.0 im.message.receive_v1 event."""
    created = create_time_ms if create_time_ms is not None else int(time.time() * 1000)
    message: dict[str, Any] = {
        "message_id": message_id or f"om_{uuid.uuid4().hex[:16]}",
        "create_time": str(created),
        "update_time": str(created),
        "chat_id": chat_id,
        "chat_type": chat_type,
        "message_type": msg_type,
        "content": json.dumps(content, ensure_ascii=False),
        "user_agent": "test",
    }
    if root_id:
        message["root_id"] = root_id
    if root_id or parent_id:
        message["parent_id"] = parent_id or root_id
    if thread_id:
        message["thread_id"] = thread_id
    if mentions:
        message["mentions"] = mentions
    return {
        "schema": "2.0",
        "header": {
            "event_id": event_id or uuid.uuid4().hex,
            "event_type": "im.message.receive_v1",
            "create_time": str(created),
            "token": token,
            "app_id": "cli_test",
            "tenant_key": tenant_key,
        },
        "event": {
            "sender": {
                "sender_id": {"open_id": sender_open_id, "union_id": f"on_{sender_open_id}"},
                "sender_type": sender_type,
                "tenant_key": tenant_key,
            },
            "message": message,
        },
    }


def text_event(text: str, **kwargs: Any) -> dict[str, Any]:
    return message_event({"text": text}, msg_type="text", **kwargs)


def post_event(post: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    return message_event(post, msg_type="post", **kwargs)


def image_event(image_key: str, **kwargs: Any) -> dict[str, Any]:
    return message_event({"image_key": image_key}, msg_type="image", **kwargs)


def file_event(file_key: str, file_name: str, **kwargs: Any) -> dict[str, Any]:
    return message_event({"file_key": file_key, "file_name": file_name}, msg_type="file", **kwargs)


def bot_menu_event(
    event_key: str,
    *,
    open_id: str = USER_OPEN_ID,
    name: str = "Alice",
    event_id: str | None = None,
    token: str = VERIFICATION_TOKEN,
) -> dict[str, Any]:
    """A schema 2.0 application.bot.menu_v6 event (lark-oapi's P2ApplicationBotMenuV6):
    `open_id` chose the bot menu item whose key is `event_key`. It names no chat."""
    now = time.time()
    return {
        "schema": "2.0",
        "header": {
            "event_id": event_id or uuid.uuid4().hex,
            "event_type": "application.bot.menu_v6",
            "create_time": str(int(now * 1000)),
            "token": token,
            "app_id": "cli_test",
            "tenant_key": TENANT_KEY,
        },
        "event": {
            "operator": {
                "operator_name": name,
                "operator_id": {"union_id": f"on_{open_id}", "user_id": f"u_{open_id}", "open_id": open_id},
            },
            "event_key": event_key,
            "timestamp": int(now),
        },
    }


def url_verification(challenge: str, token: str = VERIFICATION_TOKEN) -> dict[str, Any]:
    return {"challenge": challenge, "token": token, "type": "url_verification"}


def card_action(
    value: dict[str, Any] | None = None,
    *,
    open_id: str = USER_OPEN_ID,
    message_id: str = "om_card",
    chat_id: str = "oc_group",
    tag: str = "button",
    event_id: str | None = None,
    token: str = VERIFICATION_TOKEN,
    form_value: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A schema 2.0 card.action.trigger callback: `open_id` clicked a component whose callback
    value is `value`, on the card message `message_id` (`form_value`: the inputs of the form
    whose submit button it was, by name)."""
    return {
        "schema": "2.0",
        "header": {
            "event_id": event_id or uuid.uuid4().hex,
            "token": token,
            "create_time": str(int(time.time() * 1_000_000)),
            "event_type": "card.action.trigger",
            "tenant_key": TENANT_KEY,
            "app_id": "cli_test",
        },
        "event": {
            "operator": {
                "tenant_key": TENANT_KEY,
                "user_id": f"u_{open_id}",
                "open_id": open_id,
                "union_id": f"on_{open_id}",
            },
            "token": f"c-{uuid.uuid4().hex}",  # for a delayed card update; the bot does not use it
            "action": {"value": value or {}, "tag": tag, **({"form_value": form_value} if form_value is not None else {})},
            "host": "im_message",
            "context": {"open_message_id": message_id, "open_chat_id": chat_id},
        },
    }


def card_click(
    card: dict[str, Any], element_id: str, open_id: str, *, message_id: str, chat_id: str
) -> dict[str, Any]:
    """The callback of `open_id` clicking the button `element_id` of `card` (card JSON 2.0, as
    the bot sent it): the button's callback behaviour's value comes back, as Feishu sends it."""
    button = _find_element(card.get("body", {}).get("elements", []), element_id)
    if button is None or button.get("tag") != "button":
        raise AssertionError(f"the card has no button {element_id!r}")
    [value] = [b["value"] for b in button.get("behaviors", []) if b.get("type") == "callback"]
    return card_action(value, open_id=open_id, message_id=message_id, chat_id=chat_id)


def form_submit(
    card: dict[str, Any], button_id: str, open_id: str, values: dict[str, Any], *, message_id: str, chat_id: str
) -> dict[str, Any]:
    """The callback of `open_id` filling a form of `card` with `values` (input name → text) and
    clicking its submit button `button_id`."""
    button = _find_element(card.get("body", {}).get("elements", []), button_id)
    if button is None or button.get("form_action_type") != "submit":
        raise AssertionError(f"the card has no submit button {button_id!r}")
    [value] = [b["value"] for b in button.get("behaviors", []) if b.get("type") == "callback"]
    return card_action(value, open_id=open_id, message_id=message_id, chat_id=chat_id, form_value=values)


def _find_element(elements: Any, element_id: str) -> dict[str, Any] | None:
    for element in elements if isinstance(elements, list) else []:
        if not isinstance(element, dict):
            continue
        if element.get("element_id") == element_id:
            return element
        for nested in ("elements", "columns"):
            found = _find_element(element.get(nested), element_id)
            if found is not None:
                return found
    return None


def encrypt(payload: dict[str, Any], encrypt_key: str = ENCRYPT_KEY) -> str:
    """What Feishu puts in {"encrypt": …}: base64(iv || AES-256-CBC(PKCS7(json)))."""
    iv = os.urandom(16)
    cipher = AES.new(aes_key(encrypt_key), AES.MODE_CBC, iv)
    data = pad(json.dumps(payload, ensure_ascii=False).encode(), AES.block_size, style="pkcs7")
    return base64.b64encode(iv + cipher.encrypt(data)).decode()


def encrypted_body(payload: dict[str, Any], encrypt_key: str = ENCRYPT_KEY) -> bytes:
    return json.dumps({"encrypt": encrypt(payload, encrypt_key)}).encode()


def signed_headers(
    body: bytes,
    encrypt_key: str = ENCRYPT_KEY,
    *,
    timestamp: int | None = None,
    nonce: str = "nonce-1",
) -> dict[str, str]:
    """The X-Lark-* headers Feishu sends with a body (header names as Feishu spells them)."""
    ts = str(int(time.time()) if timestamp is None else timestamp)
    return {
        "X-Lark-Request-Timestamp": ts,
        "X-Lark-Request-Nonce": nonce,
        "X-Lark-Signature": signature(ts, nonce, encrypt_key, body),
        "Content-Type": "application/json",
    }
