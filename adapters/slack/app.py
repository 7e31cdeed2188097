"""Slack events in: slack-bolt verifies and parses, the inbox stores.

Events arrive either over HTTP (POST /slack/events, `SlackAdapter.handle`) or over Socket Mode
(`adapters.slack.socket_mode.SlackSocketMode`, which feeds the same bolt app). Bolt runs with
`process_before_response=True` so the listener — which commits the message to the inbox —
finishes before Slack gets its 200 or its envelope ack. The listener does nothing slow: no Web
API call happens on this path (bolt's own auth.test is made once and cached).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any, Literal

from aiohttp import web
from pydantic import BaseModel, SecretStr, field_validator, model_validator
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
    """One Slack app. `mode` picks how events arrive; each mode needs its own credential."""

    bot_token: SecretStr
    # "http": Slack POSTs events to /slack/events, verified with `signing_secret`.
    # "socket": the app dials out over Socket Mode with the app-level `app_token` (no public URL).
    mode: Literal["http", "socket"] = "http"
    signing_secret: SecretStr | None = None
    app_token: SecretStr | None = None
    api_url: str = "https://slack.com/api/"
    require_mention_in_threads: bool = False

    @field_validator("signing_secret", "app_token", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        # An env var set to "" means "not configured", not "an empty secret".
        return None if value == "" else value

    @model_validator(mode="after")
    def _credential_for_mode(self) -> SlackConfig:
        if self.mode == "http" and self.signing_secret is None:
            raise ValueError("http mode needs the signing secret (SLACK_SIGNING_SECRET)")
        if self.mode == "socket":
            token = self.app_token.get_secret_value() if self.app_token else ""
            if not token.startswith("xapp-"):
                raise ValueError("socket mode needs an app-level token, xapp-… (SLACK_APP_TOKEN)")
        return self


class SlackAdapter:
    """Slack: the bolt app with the event listeners, the `/slack/events` handler (HTTP mode) and
    the responder. In socket mode `SlackSocketMode` delivers events to `bolt` instead."""

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
            # Socket mode has no signing secret: "" (not None, which makes bolt read the
            # environment); `handle` refuses HTTP deliveries in that mode.
            signing_secret=config.signing_secret.get_secret_value() if config.signing_secret else "",
            process_before_response=True,
        )
        self.bolt.event("app_mention")(self._on_message)
        self.bolt.event("message")(self._on_message)
        # Bolt answers 404 to events without a listener, and Slack retries those: acknowledge
        # every other subscribed event explicitly.
        self.bolt.event(re.compile(".*"))(self._on_other_event)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """aiohttp handler for POST /slack/events."""
        if self.config.mode != "http":
            # Without a signing secret nothing posted here can be verified.
            return web.json_response({"ok": False, "error": "slack runs in socket mode"}, status=404)
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
