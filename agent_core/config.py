"""Settings the agent core needs, handed in by whoever runs it (gateway, CLI, tests)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, SecretStr


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
