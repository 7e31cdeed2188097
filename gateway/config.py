"""Service configuration from the environment or a `.env` file (pydantic-settings).

Every setting names the environment variable it reads; an invalid value stops start-up with a
message naming that variable. Secrets are `SecretStr` so they never show up in logs or reprs.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, SecretStr, ValidationError, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from agent_core.config import DEFAULT_MODEL, AgentConfig

if TYPE_CHECKING:
    from adapters.feishu.config import FeishuConfig
    from adapters.slack.app import SlackConfig

__all__ = ["DEFAULT_MODEL", "ConfigError", "Settings", "load_settings"]


class ConfigError(Exception):
    """The configuration is invalid; the message names the offending variables."""


class Settings(AgentConfig):
    """The gateway's settings on top of the agent core's own (`AgentConfig`), which the
    runtime hands to the core as they are."""

    model_config = SettingsConfigDict(
        env_file=".env", env_file_encoding="utf-8", extra="ignore", populate_by_name=True
    )

    host: str = Field("127.0.0.1", validation_alias="BA_HOST")
    port: int = Field(8080, ge=1, le=65535, validation_alias="BA_PORT")
    database_url: str | None = Field(None, validation_alias="DATABASE_URL")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "INFO", validation_alias="BA_LOG_LEVEL"
    )

    log_format: Literal["text", "json"] = Field("text", validation_alias="BA_LOG_FORMAT")
    service_name: str = Field("ba-agent-gateway", validation_alias="BA_SERVICE_NAME")
    environment: str = Field("development", validation_alias="BA_ENVIRONMENT")
    otel_endpoint: str | None = Field(None, validation_alias="BA_OTEL_ENDPOINT")
    otel_sample_rate: float = Field(1.0, ge=0.0, le=1.0, validation_alias="BA_OTEL_SAMPLE_RATE")


    slack_bot_token: SecretStr | None = Field(None, validation_alias="SLACK_BOT_TOKEN")
    slack_signing_secret: SecretStr | None = Field(None, validation_alias="SLACK_SIGNING_SECRET")
    slack_api_url: str = Field("https://slack.com/api/", validation_alias="SLACK_API_URL")
    slack_app_token: SecretStr | None = Field(None, validation_alias="SLACK_APP_TOKEN")
    slack_mode: Literal["http", "socket"] = Field("http", validation_alias="SLACK_MODE")
    slack_require_mention_in_threads: bool = Field(
        False, validation_alias="SLACK_REQUIRE_MENTION_IN_THREADS"
    )

    feishu_app_id: str | None = Field(None, validation_alias="FEISHU_APP_ID")
    feishu_app_secret: SecretStr | None = Field(None, validation_alias="FEISHU_APP_SECRET")
    feishu_verification_token: SecretStr | None = Field(None, validation_alias="FEISHU_VERIFICATION_TOKEN")
    feishu_encrypt_key: SecretStr | None = Field(None, validation_alias="FEISHU_ENCRYPT_KEY")
    feishu_domain: str = Field("https://open.feishu.cn", validation_alias="FEISHU_DOMAIN")
    feishu_mode: Literal["webhook", "websocket"] = Field("webhook", validation_alias="FEISHU_MODE")

    schedule_admins: Annotated[list[str], NoDecode] = Field(default_factory=list, validation_alias="BA_SCHEDULE_ADMINS")
    file_ttl_hours: float = Field(24.0, gt=0, validation_alias="BA_FILE_TTL_HOURS")
    data_size_cap_gb: float = Field(10.0, gt=0, validation_alias="BA_DATA_SIZE_CAP_GB")
    idle_after_minutes: int = Field(120, ge=1, validation_alias="BA_IDLE_AFTER_MINUTES")

    max_concurrent_turns: int = Field(8, ge=1, le=256, validation_alias="BA_MAX_CONCURRENT_TURNS")
    worker_processes: int = Field(1, ge=0, le=64, validation_alias="BA_WORKER_PROCESSES")
    lease_seconds: float = Field(60.0, gt=0, validation_alias="BA_LEASE_SECONDS")
    poll_interval_s: float = Field(1.0, gt=0, validation_alias="BA_POLL_INTERVAL")

    @field_validator("slack_api_url")
    @classmethod
    def _api_url_ends_in_slash(cls, value: str) -> str:
        if not value.endswith("/api/"):
            raise ValueError("must end in /api/ (e.g. https://slack.com/api/)")
        return value

    @field_validator("schedule_admins", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        return [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else value

    @field_validator("database_url")
    @classmethod
    def _supported_database(cls, value: str | None) -> str | None:
        if value is None:
            return None
        # The scheme alone decides (SQLAlchemy's URL parser would cost every command its import).
        scheme, separator, _ = value.partition("://")
        if not separator or not re.fullmatch(r"[a-z][a-z0-9]*(\+[a-z0-9_]+)?", scheme):
            raise ValueError("is not a database URL (e.g. sqlite:///data/ba.db)")
        backend = scheme.split("+")[0]
        if backend not in ("sqlite", "postgresql", "postgres"):
            raise ValueError(f"database {backend!r} is not supported (use sqlite or postgresql)")
        return value

    @property
    def effective_database_url(self) -> str:
        return self.database_url or f"sqlite:///{(self.data_dir / 'ba_agent.db').resolve()}"

    @property
    def slack_configured(self) -> bool:
        credential = self.slack_app_token if self.slack_mode == "socket" else self.slack_signing_secret
        return bool(self.slack_bot_token and credential)

    @property
    def feishu_configured(self) -> bool:
        return bool(self.feishu_app_id and self.feishu_app_secret)

    def missing(self) -> list[str]:
        """Names of variables that would enable more of the service, for the start-up log."""
        missing = []
        if not self.model_configured:
            missing.append("ANTHROPIC_API_KEY")
        if not self.slack_bot_token:
            missing.append("SLACK_BOT_TOKEN")
        if self.slack_mode == "http" and not self.slack_signing_secret:
            missing.append("SLACK_SIGNING_SECRET")
        if self.slack_mode == "socket" and not self.slack_app_token:
            missing.append("SLACK_APP_TOKEN")
        if not self.feishu_configured:
            missing.append("FEISHU_APP_ID/FEISHU_APP_SECRET")
        return missing

    def slack(self) -> SlackConfig | None:
        """The Slack adapter's settings, or None when Slack is not configured."""
        if not self.slack_configured:
            return None
        from adapters.slack.app import SlackConfig  # the Slack SDK loads only when Slack is on

        try:
            return SlackConfig(
                bot_token=self.slack_bot_token,
                mode=self.slack_mode,
                signing_secret=self.slack_signing_secret,
                app_token=self.slack_app_token,
                api_url=self.slack_api_url,
                require_mention_in_threads=self.slack_require_mention_in_threads,
            )
        except ValidationError as exc:
            problems = "; ".join(err["msg"] for err in exc.errors())
            raise ConfigError(f"invalid configuration: SLACK_* ({problems})") from None

    def feishu(self) -> FeishuConfig | None:
        """The Feishu adapter's settings, or None when Feishu is not configured."""
        if not self.feishu_configured:
            return None
        from adapters.feishu.config import FeishuConfig

        try:
            return FeishuConfig(
                app_id=self.feishu_app_id,
                app_secret=self.feishu_app_secret,
                verification_token=self.feishu_verification_token,
                encrypt_key=self.feishu_encrypt_key,
                domain=self.feishu_domain,
                mode=self.feishu_mode,
            )
        except ValidationError as exc:
            problems = "; ".join(err["msg"] for err in exc.errors())
            raise ConfigError(
                "invalid configuration: FEISHU_* (FEISHU_DOMAIN, FEISHU_VERIFICATION_TOKEN or "
                f"FEISHU_ENCRYPT_KEY): {problems}"
            ) from None


def load_settings(**overrides: Any) -> Settings:
    """Read settings, turning validation errors into one message that names each variable."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            name = ".".join(str(part) for part in err["loc"]) or "configuration"
            problems.append(f"{name.upper()}: {err['msg']}")
        raise ConfigError("invalid configuration: " + "; ".join(problems)) from None
