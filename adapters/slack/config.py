"""Settings of the Slack adapter: the SLACK_* environment variables (and `.env`), and the paths of
the OAuth install flow they configure."""

from __future__ import annotations

from typing import Literal

from pydantic import SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from adapters.base import PlatformSettings
from adapters.slack.scopes import bot_scopes

# slack-bolt's default paths of the OAuth install flow ("Add to Slack" and Slack's redirect back).
INSTALL_PATH = "/slack/install"
REDIRECT_PATH = "/slack/oauth_redirect"


class SlackConfig(PlatformSettings):
    """One Slack app. `mode` picks how events arrive; each mode needs its own credential.
    The bot token is either the one workspace's (`bot_token`) or, with `client_id` and
    `client_secret`, each workspace's own, stored when the workspace installs the app by OAuth.

    SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET, SLACK_APP_TOKEN, SLACK_MODE, SLACK_API_URL,
    SLACK_REQUIRE_MENTION_IN_THREADS, SLACK_CLIENT_ID, SLACK_CLIENT_SECRET, SLACK_SCOPES,
    SLACK_REDIRECT_URI.
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
    # OAuth installs ("Add to Slack", several workspaces, Enterprise Grid org-wide installs).
    client_id: str = ""
    client_secret: SecretStr | None = None
    scopes: str = ",".join(bot_scopes())  # comma-separated bot scopes the install asks for
    # The public URL of /slack/oauth_redirect, as listed under the app's redirect URLs (unset:
    # Slack uses the app's only one).
    redirect_uri: str | None = None

    @field_validator("signing_secret", "app_token", "client_secret", "redirect_uri", mode="before")
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
        if self.mode == "socket" and (self.bot_token.get_secret_value() or self.oauth) and self.app_token is not None:
            if not self.app_token.get_secret_value().startswith("xapp-"):
                raise ValueError("socket mode needs an app-level token, xapp-… (SLACK_APP_TOKEN)")
        return self

    @model_validator(mode="after")
    def _one_source_of_bot_tokens(self) -> SlackConfig:
        # Fail closed: with both, which workspace the single token answers would be a guess.
        if self.client_id and self.bot_token.get_secret_value():
            raise ValueError(
                "set either SLACK_BOT_TOKEN (one workspace) or SLACK_CLIENT_ID and SLACK_CLIENT_SECRET "
                "(workspaces install the app by OAuth), not both"
            )
        if bool(self.client_id) != (self.client_secret is not None):
            raise ValueError("OAuth installs need both SLACK_CLIENT_ID and SLACK_CLIENT_SECRET")
        return self

    @property
    def oauth(self) -> bool:
        """Workspaces install the app by OAuth; each is answered with its own bot token."""
        return bool(self.client_id and self.client_secret is not None)

    @property
    def scope_list(self) -> list[str]:
        return [scope.strip() for scope in self.scopes.split(",") if scope.strip()]

    @property
    def authorize_url(self) -> str:
        """Slack's OAuth authorize page, on the same host as the Web API."""
        return self.api_url.removesuffix("api/") + "oauth/v2/authorize"

    @property
    def credential(self) -> SecretStr | None:
        """The secret events are received with in this mode."""
        return self.app_token if self.mode == "socket" else self.signing_secret

    @property
    def configured(self) -> bool:
        return bool((self.bot_token.get_secret_value() or self.oauth) and self.credential)

    def missing(self) -> list[str]:
        missing = [] if self.bot_token.get_secret_value() or self.oauth else ["SLACK_BOT_TOKEN"]
        if self.credential is None:
            missing.append("SLACK_APP_TOKEN" if self.mode == "socket" else "SLACK_SIGNING_SECRET")
        return missing

    def describe(self) -> str:
        if not self.configured:
            return "off"
        return f"{self.mode}, OAuth installs" if self.oauth else self.mode
