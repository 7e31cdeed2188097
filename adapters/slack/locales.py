"""Slack users' locales, for the language of the bot's own texts (`InboundMessage.locale`).

``users.info`` with ``include_locale`` gives a user's locale ("zh-CN", "en-US"). The worker
that answers asks it before the turn (never the process that acknowledges events), so it must
cost little: each answer is kept for a day (a failed lookup for minutes, so an unreachable API
is not asked per message), and a lookup is cut short after a second.
Without a locale the message's own language decides (`agent_core.i18n.reply_language`).
"""

from __future__ import annotations

import asyncio
import logging
import time

import aiohttp
from slack_sdk.errors import SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

log = logging.getLogger(__name__)

LOCALE_TTL_S = 24 * 3600.0
MISS_TTL_S = 10 * 60.0
LOOKUP_TIMEOUT_S = 1.0
MAX_USERS = 10_000


class UserLocales:
    """The locale of each Slack user, looked up with ``users.info`` and cached."""

    def __init__(self, client: AsyncWebClient) -> None:
        self._client = client
        self._known: dict[str, tuple[str | None, float]] = {}  # user → (locale, valid until)

    async def of(self, user: str) -> str | None:
        """``user``'s locale, or None when Slack does not say (or could not be asked in time)."""
        now = time.monotonic()
        known = self._known.get(user)
        if known is not None and known[1] > now:
            return known[0]
        locale = await self._look_up(user)
        if len(self._known) >= MAX_USERS:  # forget the oldest entry (dicts keep insertion order)
            self._known.pop(next(iter(self._known)))
        self._known.pop(user, None)
        self._known[user] = (locale, now + (LOCALE_TTL_S if locale else MISS_TTL_S))
        return locale

    async def _look_up(self, user: str) -> str | None:
        try:
            async with asyncio.timeout(LOOKUP_TIMEOUT_S):
                response = await self._client.users_info(user=user, include_locale=True)
        except (SlackClientError, aiohttp.ClientError, TimeoutError) as exc:
            log.info("slack users.info for a locale failed (%s); the message's language decides", type(exc).__name__)
            return None
        profile = response.get("user") or {}
        locale = profile.get("locale") if isinstance(profile, dict) else None
        return locale if isinstance(locale, str) and locale else None
