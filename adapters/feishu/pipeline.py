"""What happens to a verified Feishu event, whichever transport brought it: parse → accept → answer.

The webhook (webhook.py) and the long connection (longconn.py) differ only in how an event
arrives and how it is acknowledged; both hand the decrypted payload to `FeishuEventPipeline`,
as slack-bolt runs one dispatch for HTTP and Socket Mode. The pipeline parses the event (with the
one lookup a file in a known topic needs), commits a message for the bot to the inbox — which
deduplicates redeliveries — and returns only then, so the transport acknowledges what is stored.
A card action callback (a click on an approval card or a monitor alert) is acted on by
`CardActions`; its answer is the callback response (a toast) both transports send back.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from adapters.base import AcceptMessage
from adapters.feishu.card_actions import CardActions, is_card_action
from adapters.feishu.config import FeishuConfig
from adapters.feishu.events import Ignored, KnownThread, parse_event_in_context
from adapters.feishu.menu import BOT_MENU, parse_menu

log = logging.getLogger(__name__)

BotOpenIdProvider = Callable[[], Awaitable[str]]


class BotIdentityUnavailable(Exception):
    """The bot's open_id could not be fetched: mentions cannot be judged, so the event waits for
    Feishu's redelivery."""


class FeishuEventPipeline:
    """Parses one event payload and commits its message; shared by both transports."""

    def __init__(
        self,
        config: FeishuConfig,
        accept: AcceptMessage,
        bot_open_id_provider: BotOpenIdProvider,
        known_thread: KnownThread,
        card_actions: CardActions | None = None,
    ) -> None:
        self._config = config
        self._accept = accept
        self._bot_open_id = bot_open_id_provider
        self._known_thread = known_thread
        self._card_actions = card_actions or CardActions(accept)

    async def process(self, payload: dict[str, Any], *, transport: str) -> dict[str, Any]:
        """Commit the payload's message (if it is one for the bot); returns the body to answer
        Feishu with: empty for events, the callback response for a card action.

        Raises `MalformedEvent` (answer it, redelivery would not help), `BotIdentityUnavailable`,
        and whatever `accept` raises (the message is not stored: let Feishu redeliver).
        """
        if is_card_action(payload):
            return await self._card_actions.answer(payload, transport)
        try:
            bot_open_id = await self._bot_open_id()
        except Exception as exc:
            log.exception("feishu %s: bot identity unavailable", transport)
            raise BotIdentityUnavailable from exc
        header = payload.get("header")
        if isinstance(header, dict) and header.get("event_type") == BOT_MENU:
            result = parse_menu(str(header.get("event_id") or ""), header.get("tenant_key"), payload.get("event"))
        else:
            result = await parse_event_in_context(
                payload, config=self._config, bot_open_id=bot_open_id, known_thread=self._known_thread
            )
        if isinstance(result, Ignored):
            log.debug("feishu %s: ignored: %s", transport, result.reason)
            return {}
        outcome = await self._accept(result)
        log.info("feishu %s: message %s %s", transport, result.message_id, outcome)
        return {}
