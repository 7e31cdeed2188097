"""Slack as a gateway platform plugin (see `adapters.base.Platform`).

Light to import: slack-bolt and slack-sdk load in `build`, only when Slack is configured.
"""

from __future__ import annotations

from adapters.base import GatewayServices, Platform, PlatformAdapter, Route
from adapters.slack.config import SlackConfig


class SlackPlatform(Platform[SlackConfig]):
    name = "slack"
    title = "Slack"
    settings_class = SlackConfig
    setup_hint = "SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET (or SLACK_MODE=socket and SLACK_APP_TOKEN)"
    routes = (Route("POST", "/slack/events"),)  # answers 404 in socket mode
    # slack-bolt logs rejected requests at INFO with their whole body, and resets its loggers'
    # levels when an app is built.
    quiet_loggers = ("slack_bolt", "slack_sdk")

    def build(self, services: GatewayServices) -> PlatformAdapter:
        from adapters.slack.app import SlackAdapter

        return SlackAdapter(self.settings, services)
