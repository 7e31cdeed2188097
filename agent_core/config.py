"""Every setting the agent core reads, in one typed object (pydantic-settings).

Each field names the environment variable it comes from, so `serve`, its workers, `chat` and
`tool run` all get the same core configuration without the gateway copying fields across: the
gateway's own settings class extends this one. Tests and benches build it with keyword
arguments (`AgentConfig(model="m", data_dir=tmp)`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from agent_core.data.errors import DataSourceConfigError
from agent_core.data.source_config import SQL_DIALECTS, DataSourceConfig, parse_datasources
from agent_core.governance.policy import AccessPolicy

DEFAULT_MODEL = "claude-sonnet-5-5"


class CompressionConfig(BaseModel):
    """Knobs of context compression (fractions are of the model's context window)."""

    model_config = ConfigDict(frozen=True)

    threshold: float = Field(0.8, gt=0, le=1)  # compress when the next request would be this full
    keep_budget: float = Field(0.35, gt=0, lt=1)  # most the verbatim recent rounds may take
    base_keep_rounds: int = Field(5, ge=1)
    min_keep_rounds: int = Field(3, ge=1)
    max_keep_rounds: int = Field(15, ge=1)
    cache_ttl_s: float = Field(300.0, ge=0)  # the prompt cache's lifetime (5-minute breakpoints)
    cold_prune_fill: float = Field(0.5, ge=0, le=1)  # prune on a cold cache from this fill on
    prune_min_chars: int = Field(2000, ge=100)  # smaller tool results are never pruned
    prune_input_chars: int = Field(500, ge=50)  # longer strings in old tool inputs are cut
    summary_model: str | None = None  # None: the conversation's model
    summary_words: int = Field(700, ge=100)  # length the summarizer is asked to stay under
    summary_chunk_tokens: int = Field(60_000, ge=1000)  # transcript tokens per summarizer call
    excerpt_chars: int = Field(1500, ge=100)  # of each tool result, shown to the summarizer
    max_listed_requests: int = Field(40, ge=1)  # user requests carried verbatim
    max_listed_errors: int = Field(15, ge=0)


class RefocusConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    every_calls: int = Field(5, ge=1)  # a reminder every this many model calls
    max_goal_chars: int = Field(1500, ge=100)


class BudgetConfig(BaseModel):
    """Optional token budgets (counted by `budget_tokens`); None means unlimited."""

    per_conversation_tokens: int | None = Field(None, gt=0)
    per_user_daily_tokens: int | None = Field(None, gt=0)
    timezone: str = "UTC"  # where the daily budget's day starts


class AgentConfig(BaseSettings):
    model_config = SettingsConfigDict(extra="ignore", populate_by_name=True)

    api_key: SecretStr | None = Field(None, validation_alias="ANTHROPIC_API_KEY")
    base_url: str | None = Field(None, validation_alias="ANTHROPIC_BASE_URL")
    model: str = Field(DEFAULT_MODEL, validation_alias="BA_MODEL")
    max_tokens: int = Field(8192, ge=256, validation_alias="BA_MAX_TOKENS")
    max_iterations: int = Field(20, ge=1, le=200, validation_alias="BA_MAX_ITERATIONS")
    model_retries: int = Field(3, ge=0, le=10, validation_alias="BA_MODEL_RETRIES")
    model_timeout_s: float = Field(300.0, gt=0, validation_alias="BA_MODEL_TIMEOUT")
    data_dir: Path = Field(Path("./data"), validation_alias="BA_DATA_DIR")
    skills_dir: Path | None = Field(None, validation_alias="BA_SKILLS_DIR")
    # Conversation workspaces (uploads, charts, reports, uploaded tables) on S3-compatible object
    # storage, s3://bucket/prefix, so replicas share no filesystem; None: under data_dir.
    workspace_url: str | None = Field(None, validation_alias="BA_WORKSPACE_URL")
    s3_endpoint_url: str | None = Field(None, validation_alias="BA_S3_ENDPOINT_URL")
    datasources: Annotated[dict[str, DataSourceConfig], NoDecode] = Field(
        default_factory=dict, validation_alias="BA_DATASOURCES"
    )
    # The schema catalog behind search_schema: re-read each source this often; verified
    # question → SQL examples (YAML, see agent_core.catalog.examples).
    catalog_refresh_hours: float = Field(24.0, gt=0, validation_alias="BA_CATALOG_REFRESH_HOURS")
    examples_file: Path | None = Field(None, validation_alias="BA_EXAMPLES_FILE")
    # Governed metrics: dbt Semantic Layer YAML, <dir>/<source>/*.yml (agent_core.semantic);
    # None: the bundled demo model over the demo data.
    semantic_dir: Path | None = Field(None, validation_alias="BA_SEMANTIC_DIR")
    # Who may read which rows and columns of the sources (a YAML file, agent_core.governance);
    # read and checked here, so an invalid file stops start-up. Declared after `datasources`:
    # its row filters are checked in their source's SQL dialect.
    access_policy: Annotated[AccessPolicy | None, NoDecode] = Field(
        None, validation_alias="BA_ACCESS_POLICY"
    )
    # A query the engine estimates (EXPLAIN) to scan more rows than this waits for an approval
    # in the thread (None: no row threshold); a pending approval expires after the TTL.
    approval_rows: int | None = Field(None, ge=0, validation_alias="BA_APPROVAL_ROWS")
    approval_ttl_minutes: float = Field(60.0, gt=0, validation_alias="BA_APPROVAL_TTL_MINUTES")
    max_upload_mb: int = Field(50, ge=1, le=2048, validation_alias="BA_MAX_UPLOAD_MB")
    compress_at: float = Field(0.8, gt=0.1, lt=1.0, validation_alias="BA_COMPRESS_AT")
    refocus_every: int = Field(5, ge=1, validation_alias="BA_REFOCUS_EVERY")
    conversation_token_budget: int | None = Field(
        None, gt=0, validation_alias="BA_CONVERSATION_TOKEN_BUDGET"
    )
    user_daily_token_budget: int | None = Field(
        None, gt=0, validation_alias="BA_USER_DAILY_TOKEN_BUDGET"
    )
    # The data-access audit (agent_core.governance.audit): rows each user's queries on the
    # sources may return per UTC day (None: no limit), and how long its records are kept.
    user_daily_rows: int | None = Field(None, gt=0, validation_alias="BA_USER_DAILY_ROWS")
    audit_retention_days: int = Field(365, ge=1, validation_alias="BA_AUDIT_RETENTION_DAYS")

    @field_validator("data_dir")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        # Workers, tools and file cleanup must agree on one place whatever their cwd.
        return value.resolve()

    @field_validator("workspace_url")
    @classmethod
    def _object_store_url(cls, value: str | None) -> str | None:
        if not value:
            return None
        from agent_core.workspace.s3 import parse_workspace_url

        parse_workspace_url(value)  # ValueError names the expected form
        return value

    @field_validator("base_url")
    @classmethod
    def _base_url_without_v1(cls, value: str | None) -> str | None:
        if value and value.rstrip("/").endswith("/v1"):
            raise ValueError("is the SDK's base URL and must not end in /v1")
        return value

    @field_validator("datasources", mode="before")
    @classmethod
    def _parse_datasources(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return parse_datasources(value)
            except DataSourceConfigError as exc:
                raise ValueError(str(exc)) from None
        return value

    @field_validator("access_policy", mode="before")
    @classmethod
    def _load_access_policy(cls, value: Any, info: ValidationInfo) -> Any:
        if not isinstance(value, str | Path):
            return value
        if not str(value).strip():
            return None
        from agent_core.governance.loader import load_policy  # the SQL parser loads only if set

        sources = info.data.get("datasources")
        dialects = (
            {name: SQL_DIALECTS[cfg.kind] for name, cfg in sources.items()}
            if isinstance(sources, dict)
            else None
        )
        return load_policy(Path(value), dialects)  # PolicyFileError is a ValueError

    @property
    def model_configured(self) -> bool:
        return self.api_key is not None or self.base_url is not None

    @property
    def compression(self) -> CompressionConfig:
        return CompressionConfig(threshold=self.compress_at)

    @property
    def refocus(self) -> RefocusConfig:
        return RefocusConfig(every_calls=self.refocus_every)

    @property
    def budgets(self) -> BudgetConfig:
        return BudgetConfig(
            per_conversation_tokens=self.conversation_token_budget,
            per_user_daily_tokens=self.user_daily_token_budget,
        )
