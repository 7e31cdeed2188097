"""The operator's data sources as configured (``BA_DATASOURCES``), and who may use them.

Kept apart from the query engine (`agent_core.data.sources`) so that reading the configuration
imports no database driver: every command validates it at start-up.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from agent_core.data.errors import DataSourceConfigError

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

SourceKind = Literal["postgresql", "mysql", "duckdb"]

_NAME_PATTERN = re.compile(r"^[a-z][a-z0-9_-]{0,63}$")


# Refused as a source name: the bundled demo data is the source ``demo`` of the metrics.
RESERVED_NAMES = frozenset({"demo"})
# sqlglot's name for the SQL of each kind of data source.
SQL_DIALECTS = {"postgresql": "postgres", "mysql": "mysql", "duckdb": "duckdb"}


class DataSourceConfig(BaseModel):
    """One operator-configured data source."""

    # An unknown key is a typo of a known one (``allowed_chanels``): ignoring it would open the
    # source wider than configured.
    model_config = ConfigDict(extra="forbid")

    name: str
    url: str
    description: str | None = None
    allowed_channels: list[str] | None = None  # None: every channel
    allowed_users: list[str] | None = None  # None: every user
    row_cap: int | None = Field(default=None, gt=0)
    statement_timeout_s: float | None = Field(default=None, gt=0)
    # Accept a database role that can do more than read (superuser, FILE, write grants …);
    # the start-up privilege check then logs a WARNING instead of refusing the source.
    allow_privileged: bool = False

    @field_validator("name")
    @classmethod
    def _check_name(cls, name: str) -> str:
        if not _NAME_PATTERN.match(name):
            raise ValueError(
                "the name must start with a lower-case letter and contain only a-z, 0-9, '_' or '-'"
            )
        if name in RESERVED_NAMES:
            raise ValueError(f"the name {name!r} is the bundled demo data's; choose another")
        return name

    @field_validator("url")
    @classmethod
    def _check_url(cls, url: str) -> str:
        _classify(url)  # raises ValueError with a readable message
        return url

    @property
    def kind(self) -> SourceKind:
        return _classify(self.url)[0]

    @property
    def safe_url(self) -> str:
        """The URL with any password masked, for logs and messages."""
        kind, target = _classify(self.url)
        return str(target) if kind == "duckdb" else target.render_as_string(hide_password=True)


def parse_datasources(raw: str | None) -> dict[str, DataSourceConfig]:
    """Parse the ``BA_DATASOURCES`` JSON (see module docstring); empty or None means none.

    Raises :class:`DataSourceConfigError` naming the offending source.
    """
    if raw is None or not raw.strip():
        return {}
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as error:
        raise DataSourceConfigError(f"BA_DATASOURCES is not valid JSON: {error}") from error
    if not isinstance(data, dict):
        raise DataSourceConfigError("BA_DATASOURCES must be a JSON object of name -> source.")
    sources: dict[str, DataSourceConfig] = {}
    for name, settings in data.items():
        if isinstance(settings, str):
            settings = {"url": settings}
        if not isinstance(settings, dict):
            raise DataSourceConfigError(
                f"Data source {name!r}: expected a URL string or an object with a 'url'."
            )
        if "name" in settings and settings["name"] != name:
            raise DataSourceConfigError(f"Data source {name!r}: 'name' differs from its key.")
        try:
            sources[name] = DataSourceConfig.model_validate({**settings, "name": name})
        except ValidationError as error:
            problems = "; ".join(_problem(e) for e in error.errors())
            raise DataSourceConfigError(f"Data source {name!r}: {problems}") from error
    return sources


def _problem(error: Any) -> str:
    """One validation error of a source's settings, in words (no pydantic labels or links)."""
    key = ".".join(str(p) for p in error["loc"]) or "value"
    if error["type"] == "extra_forbidden":
        valid = ", ".join(n for n in DataSourceConfig.model_fields if n != "name")
        return f"unknown setting {key!r} (valid settings: {valid})"
    return f"{key}: {str(error['msg']).removeprefix('Value error, ')}"


def is_allowed(cfg: DataSourceConfig, channel: str | None, user: str | None) -> bool:
    """True if ``user`` in ``channel`` may use the source (both allowlists must pass)."""
    if cfg.allowed_channels is not None and channel not in cfg.allowed_channels:
        return False
    return cfg.allowed_users is None or user in cfg.allowed_users


def _classify(url: str) -> tuple[SourceKind, Any]:
    """Return (kind, SQLAlchemy URL or DuckDB path); ValueError with a readable message."""
    if url.startswith("duckdb:"):
        path = url.removeprefix("duckdb:").removeprefix("//")
        if not path.startswith("/"):
            raise ValueError("a DuckDB URL needs an absolute path: duckdb:///path/to/file.duckdb")
        return "duckdb", Path(path)
    if "://" not in url and url.endswith((".duckdb", ".db")):
        return "duckdb", Path(url)
    from sqlalchemy.engine import make_url  # the driver-neutral URL parser, loaded on first use
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError as error:
        raise ValueError(
            "not a valid database URL (expected postgresql://, mysql:// or duckdb:///path)"
        ) from error
    backend = parsed.get_backend_name()
    if backend == "postgresql":
        return "postgresql", parsed
    if backend in ("mysql", "mariadb"):
        return "mysql", parsed
    raise ValueError(f"unsupported database type {backend!r} (use PostgreSQL, MySQL or DuckDB)")


def _sqlalchemy_url(cfg: DataSourceConfig) -> URL:
    return _classify(cfg.url)[1]
