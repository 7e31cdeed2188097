"""POST /feishu/events: verify, decrypt and parse Feishu event callbacks; hand them to the inbox.

Order of checks, each failing closed:
1. The body is JSON (else 400).
2. With an encrypt key, the body must be `{"encrypt": …}` and decrypt with it (else 401).
3. With an encrypt key, X-Lark-Signature must match and X-Lark-Request-Timestamp be within the
   window (else 401). The url_verification challenge may come unsigned; if signed, it is checked.
4. With a verification token, the payload's token must equal it (else 401).
5. url_verification → {"challenge": …} at once (no API call, so it works right after start-up).
6. Anything else goes through the `FeishuEventPipeline` the long connection uses too: a message
   for the bot is committed before answering 200; ignorable events are answered 200 without
   touching the inbox; a malformed one 400; without the bot's identity 503 (Feishu retries).
   A card action callback (an approval card's button) is checked the same way (steps 1-4, as
   Feishu encrypts and signs callbacks like events) and answered with its callback response.

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
from adapters.feishu.card_actions import CardActions
from adapters.feishu.config import FeishuConfig
from adapters.feishu.events import KnownThread, MalformedEvent, payload_token, url_verification
from adapters.feishu.pipeline import BotIdentityUnavailable, BotOpenIdProvider, FeishuEventPipeline

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-Lark-Signature"
TIMESTAMP_HEADER = "X-Lark-Request-Timestamp"
NONCE_HEADER = "X-Lark-Request-Nonce"

# Unix seconds: a few digits more than today's ten, never hundreds (which would overflow the
# float arithmetic of the window check).
_TIMESTAMP = re.compile(r"[0-9]{1,12}")

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
    card_actions: CardActions | None = None,
) -> Handler:
    """The aiohttp handler for Feishu's event subscription URL (mount at POST /feishu/events),
    also the card callback URL.

    `bot_open_id_provider` returns the bot's open_id (e.g. `FeishuClient.bot_open_id`); it is
    awaited only for message events, never for the url_verification challenge. `card_actions`
    acts on card clicks (None: clicks are answered as unknown).
    """
    pipeline = FeishuEventPipeline(config, accept, bot_open_id_provider, known_thread, card_actions)
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
            answer = await pipeline.process(payload, transport="webhook")
        except BotIdentityUnavailable:
            return web.json_response({"msg": "bot identity unavailable"}, status=503)
        except MalformedEvent as exc:
            return _reject(400, f"malformed event: {exc}")
        return web.json_response(answer)

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
