"""Settings of the Feishu / Lark adapter: the FEISHU_* environment variables (and `.env`)."""

from __future__ import annotations

from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import SettingsConfigDict

from adapters.base import PlatformSettings

FEISHU_DOMAIN = "https://open.feishu.cn"
LARK_DOMAIN = "https://open.larksuite.com"

_LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1"}


class FeishuConfig(PlatformSettings):
    """One Feishu/Lark custom app; configured once its id and secret are set.

    Env vars: FEISHU_APP_ID, FEISHU_APP_SECRET, FEISHU_VERIFICATION_TOKEN, FEISHU_ENCRYPT_KEY,
    FEISHU_DOMAIN, FEISHU_MODE. The other fields tune the adapter; they read FEISHU_<FIELD>
    like every field of a settings class, but are not part of the documented configuration.
    """

    model_config = SettingsConfigDict(env_prefix="FEISHU_", frozen=True)

    app_id: str = ""
    app_secret: SecretStr = SecretStr("")
    verification_token: SecretStr | None = None
    encrypt_key: SecretStr | None = None
    # https://open.feishu.cn (Feishu, China) or https://open.larksuite.com (Lark, international).
    domain: str = FEISHU_DOMAIN
    # "webhook": Feishu POSTs events to /feishu/events; "websocket": the app dials out instead
    # (long connection, no public URL needed).
    mode: Literal["webhook", "websocket"] = "webhook"

    # A top-level group mention is answered as a topic reply (a thread) rather than a quote reply.
    reply_in_thread: bool = True
    # Whether "@all" in a group counts as addressing the bot.
    respond_to_at_all: bool = False
    # Messages created longer ago than this are dropped (redeliveries after a long outage).
    max_event_age_s: int = Field(default=1800, gt=0)
    # Accepted clock skew of X-Lark-Request-Timestamp on signed webhook requests.
    timestamp_window_s: int = Field(default=300, gt=0)

    # Answers as interactive cards (Markdown, tables); off → rich-text posts.
    cards_enabled: bool = True
    # Stream answers live into a CardKit card (needs cards_enabled and cardkit:card:write).
    streaming_cards: bool = True
    # Minimum gap between two streaming updates of one card (Feishu allows 10 card ops/s per card).
    stream_update_interval_ms: int = Field(default=300, ge=100)

    # Outbound pacing per chat (Feishu: 5 messages/s to one chat).
    sends_per_second_per_chat: float = Field(default=5.0, gt=0)
    # Long connection: restart the client when no frame (pong, event) arrived for this long.
    # Feishu pings every 120 s by default, so a healthy connection is never silent that long.
    ws_silence_timeout_s: float = Field(default=300.0, gt=0)

    @field_validator("verification_token", "encrypt_key", mode="before")
    @classmethod
    def _empty_is_unset(cls, value: object) -> object:
        # An env var set to "" means "not configured", not "an empty secret".
        return None if value == "" else value

    @field_validator("domain")
    @classmethod
    def _origin_only(cls, value: str) -> str:
        # The domain receives the app secret: accept an https origin only (http for loopback fakes).
        value = value.rstrip("/")
        parts = urlsplit(value)
        loopback_http = parts.scheme == "http" and (parts.hostname or "") in _LOOPBACK_HOSTS
        if not (parts.scheme == "https" or loopback_http):
            raise ValueError(f"domain must be an https origin, got {value!r}")
        if not parts.netloc or "@" in parts.netloc or parts.path or parts.query or parts.fragment:
            raise ValueError(f"domain must be scheme://host[:port] only, got {value!r}")
        return value

    @model_validator(mode="after")
    def _webhook_needs_a_secret(self) -> FeishuConfig:
        # Without a verification token or an encrypt key anyone could post events to the webhook.
        unverifiable = self.verification_token is None and self.encrypt_key is None
        if self.configured and self.mode == "webhook" and unverifiable:
            raise ValueError(
                "webhook mode needs FEISHU_VERIFICATION_TOKEN or FEISHU_ENCRYPT_KEY "
                "(preferably both)"
            )
        return self

    @property
    def configured(self) -> bool:
        return bool(self.app_id and self.app_secret.get_secret_value())

    def missing(self) -> list[str]:
        return [] if self.configured else ["FEISHU_APP_ID/FEISHU_APP_SECRET"]

    def describe(self) -> str:
        return self.mode if self.configured else "off"

    @property
    def stream_enabled(self) -> bool:
        """Whether answers are streamed into CardKit cards."""
        return self.cards_enabled and self.streaming_cards
