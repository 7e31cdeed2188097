"""Slack as a gateway platform plugin (see `adapters.base.Platform`).

Light to import: slack-bolt and slack-sdk load in `build`, only when Slack is configured.
"""

from __future__ import annotations

from adapters.base import GatewayServices, Platform, PlatformAdapter, Route
from adapters.slack.config import INSTALL_PATH, REDIRECT_PATH, SlackConfig


class SlackPlatform(Platform[SlackConfig]):
    name = "slack"
    title = "Slack"
    settings_class = SlackConfig
    setup_hint = (
        "SLACK_BOT_TOKEN (or SLACK_CLIENT_ID and SLACK_CLIENT_SECRET) and SLACK_SIGNING_SECRET "
        "(or SLACK_MODE=socket and SLACK_APP_TOKEN)"
    )
    routes = (
        Route("POST", "/slack/events"),  # answers 404 in socket mode
        Route("GET", INSTALL_PATH),  # answer 404 without SLACK_CLIENT_ID / SLACK_CLIENT_SECRET
        Route("GET", REDIRECT_PATH),
    )
    # slack-bolt logs rejected requests at INFO with their whole body, and resets its loggers'
    # levels when an app is built.
    quiet_loggers = ("slack_bolt", "slack_sdk")

    def build(self, services: GatewayServices) -> PlatformAdapter:
        from adapters.slack.app import SlackAdapter

        return SlackAdapter(self.settings, services)
