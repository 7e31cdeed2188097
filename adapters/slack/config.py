"""Settings of the Slack adapter: the SLACK_* environment variables (and `.env`)."""

from __future__ import annotations

from typing import Literal

from pydantic import SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from adapters.base import PlatformSettings


class SlackConfig(PlatformSettings):
    """One Slack app. `mode` picks how events arrive; each mode needs its own credential.

    SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET, SLACK_APP_TOKEN, SLACK_MODE, SLACK_API_URL,
    SLACK_REQUIRE_MENTION_IN_THREADS.
    """

    model_config = SettingsConfigDict(env_prefix="SLACK_", frozen=True)

    bot_token: SecretStr = SecretStr("")
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

    @field_validator("api_url")
    @classmethod
    def _api_url_ends_in_slash(cls, value: str) -> str:
        if not value.endswith("/api/"):
            raise ValueError("must end in /api/ (e.g. https://slack.com/api/)")
        return value

    @model_validator(mode="after")
    def _socket_mode_needs_an_app_token(self) -> SlackConfig:
        # Checked once Slack is on in socket mode: a bot token in the app-token slot would be
        # sent to apps.connections.open and refused there, with a less helpful message.
        if self.mode == "socket" and self.bot_token.get_secret_value() and self.app_token is not None:
            if not self.app_token.get_secret_value().startswith("xapp-"):
                raise ValueError("socket mode needs an app-level token, xapp-… (SLACK_APP_TOKEN)")
        return self

    @property
    def credential(self) -> SecretStr | None:
        """The secret events are received with in this mode."""
        return self.app_token if self.mode == "socket" else self.signing_secret

    @property
    def configured(self) -> bool:
        return bool(self.bot_token.get_secret_value() and self.credential)

    def missing(self) -> list[str]:
        missing = [] if self.bot_token.get_secret_value() else ["SLACK_BOT_TOKEN"]
        if self.credential is None:
            missing.append("SLACK_APP_TOKEN" if self.mode == "socket" else "SLACK_SIGNING_SECRET")
        return missing

    def describe(self) -> str:
        return self.mode if self.configured else "off"
