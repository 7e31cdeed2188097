"""The Slack Events API endpoint: slack-bolt verifies and parses, the inbox stores.

Bolt runs with `process_before_response=True` so the listener — which commits the message to
the inbox — finishes before Slack gets its 200. The listener does nothing slow: no Web API call
happens on this path (bolt's own auth.test is made once and cached).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web
from pydantic import BaseModel, SecretStr
from slack_bolt.adapter.aiohttp import to_aiohttp_response, to_bolt_request
from slack_bolt.async_app import AsyncApp
from slack_bolt.context.async_context import AsyncBoltContext
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.web.async_client import AsyncWebClient

from adapters.base import AcceptMessage
from adapters.slack.events import Ignored, candidate_thread, parse_event
from adapters.slack.responder import SlackResponder
from agent_core.messages import ThreadKey

log = logging.getLogger(__name__)

KnownThread = Callable[[ThreadKey], Awaitable[bool]]


class SlackConfig(BaseModel):
    bot_token: SecretStr
    signing_secret: SecretStr
    api_url: str = "https://slack.com/api/"
    require_mention_in_threads: bool = False


class SlackAdapter:
    """Slack over HTTP: the `/slack/events` handler and the responder."""

    platform = "slack"

    def __init__(self, config: SlackConfig, accept: AcceptMessage, known_thread: KnownThread) -> None:
        self.config = config
        self._accept = accept
        self._known_thread = known_thread
        self.client = AsyncWebClient(token=config.bot_token.get_secret_value(), base_url=config.api_url)
        self.client.retry_handlers.append(AsyncRateLimitErrorRetryHandler(max_retry_count=3))
        self.responder = SlackResponder(self.client)
        self.bolt = AsyncApp(
            client=self.client,
            signing_secret=config.signing_secret.get_secret_value(),
            process_before_response=True,
        )
        self.bolt.event("app_mention")(self._on_message)
        self.bolt.event("message")(self._on_message)
        # Bolt answers 404 to events without a listener, and Slack retries those: acknowledge
        # every other subscribed event explicitly.
        self.bolt.event(re.compile(".*"))(self._on_other_event)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """aiohttp handler for POST /slack/events."""
        bolt_response = await self.bolt.async_dispatch(await to_bolt_request(request))
        return await to_aiohttp_response(bolt_response)

    async def _on_message(self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext) -> None:
        team_id = body.get("team_id") or context.team_id or ""
        key = candidate_thread(team_id, event)
        in_known_thread = bool(key) and await self._known_thread(key)
        parsed = parse_event(
            event_id=body.get("event_id") or f"{event.get('channel')}:{event.get('ts')}",
            team_id=team_id,
            event=event,
            bot_user_id=context.bot_user_id or "",
            bot_id=context.bot_id,
            in_known_thread=in_known_thread,
            require_mention_in_threads=self.config.require_mention_in_threads,
        )
        if isinstance(parsed, Ignored):
            log.debug("slack event %s ignored: %s", body.get("event_id"), parsed.reason)
            return
        outcome = await self._accept(parsed)
        log.info("slack event %s %s (thread %s)", body.get("event_id"), outcome.value, parsed.thread)

    async def _on_other_event(self, body: dict[str, Any]) -> None:
        log.debug("slack event %s acknowledged without action", body.get("event", {}).get("type"))
