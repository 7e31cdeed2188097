"""Service configuration from the environment or a `.env` file (pydantic-settings).

Every setting names the environment variable it reads; an invalid value stops start-up with a
message naming that variable. Secrets are `SecretStr` so they never show up in logs or reprs.
`Settings` holds the gateway's own fields on top of the agent core's (`AgentConfig`); each chat
platform reads its own variables with its own settings class (`adapters.base.Platform`), and
`load_settings` reads them all.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, PrivateAttr, ValidationError, field_validator
from pydantic_settings import NoDecode, SettingsConfigDict

from agent_core.config import DEFAULT_MODEL, AgentConfig
from agent_core.monitors.model import Monitor

if TYPE_CHECKING:
    from adapters.base import Platform

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

    schedule_admins: Annotated[list[str], NoDecode] = Field(default_factory=list, validation_alias="BA_SCHEDULE_ADMINS")
    file_ttl_hours: float = Field(24.0, gt=0, validation_alias="BA_FILE_TTL_HOURS")
    data_size_cap_gb: float = Field(10.0, gt=0, validation_alias="BA_DATA_SIZE_CAP_GB")
    idle_after_minutes: int = Field(120, ge=1, validation_alias="BA_IDLE_AFTER_MINUTES")
    # Metric monitors written by operators (YAML, agent_core.monitors.loader): read and checked
    # here, so an invalid file stops start-up naming its lines.
    monitors: Annotated[list[Monitor], NoDecode] = Field(default_factory=list, validation_alias="BA_MONITORS_FILE")

    # What a person opening the agent (Slack's messages tab) is offered to ask, "|"-separated;
    # empty: examples built from the governed metrics they may see.
    suggested_prompts: Annotated[list[str], NoDecode] = Field(
        default_factory=list, validation_alias="BA_SUGGESTED_PROMPTS"
    )

    max_concurrent_turns: int = Field(8, ge=1, le=256, validation_alias="BA_MAX_CONCURRENT_TURNS")
    worker_processes: int = Field(1, ge=0, le=64, validation_alias="BA_WORKER_PROCESSES")
    lease_seconds: float = Field(60.0, gt=0, validation_alias="BA_LEASE_SECONDS")
    poll_interval_s: float = Field(1.0, gt=0, validation_alias="BA_POLL_INTERVAL")
    # What an acknowledged event survives. "commit": a crash of the gateway and a clean restart
    # of the database, not a crash of the database server or the machine in the fraction of a
    # second before its log reaches the disk. "flush": those too, and every acknowledgement
    # waits for the disk's flush (tens of milliseconds at p99 on a disk with fsync stalls).
    inbox_durability: Literal["commit", "flush"] = Field("commit", validation_alias="BA_INBOX_DURABILITY")

    _platforms: tuple[Platform[Any], ...] = PrivateAttr(default=())

    @field_validator("schedule_admins", mode="before")
    @classmethod
    def _comma_separated(cls, value: object) -> object:
        return [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else value

    @field_validator("suggested_prompts", mode="before")
    @classmethod
    def _prompts(cls, value: object) -> object:
        if not isinstance(value, str):
            return value
        prompts = [p.strip() for p in value.split("|") if p.strip()]
        if len(prompts) > 4:
            raise ValueError(f"at most 4 prompts, got {len(prompts)}")
        return prompts

    @field_validator("monitors", mode="before")
    @classmethod
    def _load_monitors(cls, value: object) -> object:
        if not isinstance(value, str | Path):
            return value
        from agent_core.monitors.loader import load_monitors  # MonitorFileError is a ValueError

        return load_monitors(Path(value)) if str(value).strip() else []

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
    def platforms(self) -> tuple[Platform[Any], ...]:
        """The registered chat platforms with their settings (read by `load_settings`)."""
        return self._platforms

    def missing(self) -> list[str]:
        """Names of variables that would enable more of the service, for the start-up log."""
        missing = [] if self.model_configured else ["ANTHROPIC_API_KEY"]
        for platform in self._platforms:
            missing += platform.settings.missing()
        return missing


def load_settings(*, platforms: Iterable[type[Platform[Any]]] | None = None, **overrides: Any) -> Settings:
    """Read the gateway's settings and every platform's, turning validation errors into one
    message that names each variable.

    `platforms` defaults to every registered one (`adapters.registry`); a command that answers
    no chat passes none. `overrides` are keyed by environment variable name (``BA_PORT``,
    ``SLACK_MODE``) and win over the environment; ``_env_file`` replaces the `.env` file (None:
    read none).
    """
    if platforms is None:
        from adapters.registry import PLATFORMS

        platforms = PLATFORMS
    env_file = overrides.pop("_env_file", ".env")
    problems: list[str] = []
    loaded: list[Platform[Any]] = []
    for platform in platforms:
        try:
            loaded.append(platform.load(overrides, env_file))
        except ValidationError as exc:
            problems += [_problem(err, platform.env_name) for err in exc.errors()]
    try:
        settings = Settings(_env_file=env_file, **overrides)
    except ValidationError as exc:
        problems[:0] = [_problem(err, str.upper) for err in exc.errors()]
    if problems:
        raise ConfigError("invalid configuration: " + "; ".join(problems))
    settings._platforms = tuple(loaded)
    if not settings.data_dir.exists():
        _say_new_data_dir(settings.data_dir)
    return settings


def _say_new_data_dir(data_dir: Path) -> None:
    """A relative ``BA_DATA_DIR`` (``./data`` by default) is read from the working directory, so a
    command run from elsewhere would quietly start a second database and workspace: say where,
    before anything is written, whenever the directory is not there yet."""
    print(
        f"ba-agent: {data_dir} (BA_DATA_DIR) does not exist yet; a command that stores data creates it "
        "there (a relative BA_DATA_DIR is read from the working directory)",
        file=sys.stderr,
    )


def _problem(err: Any, env_name: Callable[[str], str]) -> str:
    """"NAME: message" for one validation error; a check across fields names its variables
    in its message."""
    field = ".".join(str(part) for part in err["loc"])
    message = str(err["msg"]).removeprefix("Value error, ")  # pydantic's wording, not ours
    return f"{env_name(field)}: {message}" if field else message
