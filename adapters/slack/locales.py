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
from collections.abc import Awaitable, Callable

import aiohttp
from slack_sdk.errors import SlackClientError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.installations import WorkspaceNotInstalled

log = logging.getLogger(__name__)

LOCALE_TTL_S = 24 * 3600.0
MISS_TTL_S = 10 * 60.0
LOOKUP_TIMEOUT_S = 1.0
MAX_USERS = 10_000


class UserLocales:
    """The locale of each Slack user, looked up with ``users.info`` and cached."""

    def __init__(self, client_of: Callable[[str], Awaitable[AsyncWebClient]]) -> None:
        self._client_of = client_of  # the client that may ask in a workspace
        # (workspace, user) → (locale, valid until)
        self._known: dict[tuple[str, str], tuple[str | None, float]] = {}

    async def of(self, user: str, workspace: str) -> str | None:
        """``user``'s locale, or None when Slack does not say (or could not be asked in time)."""
        now = time.monotonic()
        key = (workspace, user)
        known = self._known.get(key)
        if known is not None and known[1] > now:
            return known[0]
        locale = await self._look_up(user, workspace)
        if len(self._known) >= MAX_USERS:  # forget the oldest entry (dicts keep insertion order)
            self._known.pop(next(iter(self._known)))
        self._known.pop(key, None)
        self._known[key] = (locale, now + (LOCALE_TTL_S if locale else MISS_TTL_S))
        return locale

    async def _look_up(self, user: str, workspace: str) -> str | None:
        try:
            async with asyncio.timeout(LOOKUP_TIMEOUT_S):
                client = await self._client_of(workspace)
                response = await client.users_info(user=user, include_locale=True)
        except (SlackClientError, aiohttp.ClientError, TimeoutError, WorkspaceNotInstalled) as exc:
            log.info("slack users.info for a locale failed (%s); the message's language decides", type(exc).__name__)
            return None
        profile = response.get("user") or {}
        locale = profile.get("locale") if isinstance(profile, dict) else None
        return locale if isinstance(locale, str) and locale else None
