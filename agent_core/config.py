"""Settings the agent core needs, handed in by whoever runs it (gateway, CLI, tests)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field, SecretStr

from agent_core.context.compression import CompressionConfig
from agent_core.hooks.refocus import RefocusConfig
from agent_core.tokens import BudgetConfig


class AgentConfig(BaseModel):
    api_key: SecretStr | None = None
    base_url: str | None = None
    model: str
    max_tokens: int = 8192
    max_iterations: int = 20
    model_retries: int = 3
    model_timeout_s: float = 300.0
    data_dir: Path
    skills_dir: Path | None = None  # operator skills; override bundled ones by name
    compression: CompressionConfig = Field(default_factory=CompressionConfig)
    refocus: RefocusConfig = Field(default_factory=RefocusConfig)
    budgets: BudgetConfig = Field(default_factory=BudgetConfig)
