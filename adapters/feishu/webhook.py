"""POST /feishu/events: verify, decrypt and parse Feishu event callbacks; hand them to the inbox.

Order of checks, each failing closed:
1. The body is JSON (else 400).
2. With an encrypt key, the body must be `{"encrypt": …}` and decrypt with it (else 401).
3. With an encrypt key, X-Lark-Signature must match and X-Lark-Request-Timestamp be within the
   window (else 401). The url_verification challenge may come unsigned; if signed, it is checked.
4. With a verification token, the payload's token must equal it (else 401).
5. url_verification → {"challenge": …} at once (no API call, so it works right after start-up).
6. Anything else is parsed: a message for the bot is committed with `await accept(msg)` before
   answering 200; ignorable events are answered 200 without touching the inbox.

A failed check answers 401 and stores nothing. lark-oapi's EventDispatcherHandler is not used: it
has no timestamp window and answers 500 on a failed check, which makes Feishu retry.

Every refusal (400/401) logs one WARNING line naming the reason, never the body; no input makes
this handler answer 500 with a traceback (only a failure to store an accepted message does).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from adapters.base import AcceptMessage
from adapters.feishu import crypto
from adapters.feishu.config import FeishuConfig
from adapters.feishu.events import (
    Ignored,
    KnownThread,
    MalformedEvent,
    parse_event_in_context,
    payload_token,
    url_verification,
)

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Lark-Signature"
TIMESTAMP_HEADER = "X-Lark-Request-Timestamp"
NONCE_HEADER = "X-Lark-Request-Nonce"

# Unix seconds: a few digits more than today's ten, never hundreds (which would overflow the
# float arithmetic of the window check).
_TIMESTAMP = re.compile(r"[0-9]{1,12}")

BotOpenIdProvider = Callable[[], Awaitable[str]]
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class _Rejected(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def make_feishu_handler(
    config: FeishuConfig,
    accept: AcceptMessage,
    bot_open_id_provider: BotOpenIdProvider,
    known_thread: KnownThread,
) -> Handler:
    """The aiohttp handler for Feishu's event subscription URL (mount at POST /feishu/events).

    `bot_open_id_provider` returns the bot's open_id (e.g. `FeishuClient.bot_open_id`); it is
    awaited only for message events, never for the url_verification challenge.
    """
    encrypt_key = config.encrypt_key.get_secret_value() if config.encrypt_key else None
    token = config.verification_token.get_secret_value() if config.verification_token else None

    def authenticate(request: web.Request, raw: bytes) -> dict[str, Any]:
        """The verified, decrypted payload; raises _Rejected."""
        envelope = _json_object(raw)
        if encrypt_key is None:
            if "encrypt" in envelope:
                raise _Rejected(400, "encrypted event but no encrypt key is configured")
            payload = envelope
        else:
            encrypted = envelope.get("encrypt")
            if not isinstance(encrypted, str):
                raise _Rejected(401, "plaintext event while an encrypt key is configured")
            try:
                payload = _json_object(crypto.decrypt(encrypted, encrypt_key).encode())
            except crypto.DecryptionError as exc:
                raise _Rejected(401, str(exc)) from exc
            signed = SIGNATURE_HEADER in request.headers
            if signed or url_verification(payload) is None:
                for header in (TIMESTAMP_HEADER, NONCE_HEADER, SIGNATURE_HEADER):
                    if len(request.headers.getall(header, [])) > 1:
                        raise _Rejected(401, f"duplicate {header} header")
                timestamp = request.headers.get(TIMESTAMP_HEADER)
                if timestamp and not _TIMESTAMP.fullmatch(timestamp):
                    raise _Rejected(401, "request timestamp is not a Unix time")
                try:
                    crypto.verify_signature(
                        request.headers.get(TIMESTAMP_HEADER),
                        request.headers.get(NONCE_HEADER),
                        request.headers.get(SIGNATURE_HEADER),
                        encrypt_key,
                        raw,
                    )
                    crypto.check_timestamp(
                        request.headers.get(TIMESTAMP_HEADER), config.timestamp_window_s
                    )
                except crypto.FeishuCryptoError as exc:
                    raise _Rejected(401, str(exc)) from exc
        if token is not None:
            sent = payload_token(payload)
            if sent is None or not crypto.constant_time_equals(sent, token):
                raise _Rejected(401, "verification token mismatch")
        return payload

    async def handle(request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            payload = authenticate(request, raw)
            challenge = url_verification(payload)
        except _Rejected as exc:
            return _reject(exc.status, exc.reason)
        except MalformedEvent as exc:
            return _reject(400, str(exc))
        if challenge is not None:
            return web.json_response({"challenge": challenge.challenge})

        try:
            bot_open_id = await bot_open_id_provider()
        except Exception:
            # Without the bot's identity mentions cannot be judged; Feishu retries a non-200.
            log.exception("feishu webhook: bot identity unavailable")
            return web.json_response({"msg": "bot identity unavailable"}, status=503)
        try:
            result = await parse_event_in_context(
                payload, config=config, bot_open_id=bot_open_id, known_thread=known_thread
            )
        except MalformedEvent as exc:
            return _reject(400, f"malformed event: {exc}")
        if isinstance(result, Ignored):
            log.debug("feishu webhook: ignored: %s", result.reason)
            return web.json_response({})
        outcome = await accept(result)
        log.info("feishu webhook: message %s %s", result.message_id, outcome)
        return web.json_response({})

    return handle


def _reject(status: int, reason: str) -> web.Response:
    log.warning("feishu webhook: rejected (%s): %s", status, reason)
    return web.json_response({"msg": reason}, status=status)


def _json_object(raw: bytes) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError, UnicodeDecodeError, nesting
        raise _Rejected(400, "body is not JSON") from exc
    if not isinstance(value, dict):
        raise _Rejected(400, "body is not a JSON object")
    return value
