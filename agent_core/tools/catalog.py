"""The standard tool set and the prompt section that describes the data it reaches."""

from __future__ import annotations

from agent_core.config import AgentConfig
from agent_core.data.demo import DEMO_DESCRIPTION, ensure_demo_database
from agent_core.tools.base import Tool, ToolContext
from agent_core.tools.sql import SqlQueryTool, demo_database


def default_tools(config: AgentConfig) -> list[Tool]:
    """Tools every conversation gets. Builds the demo database if it is missing."""
    ensure_demo_database(demo_database(ToolContext(thread_id="-", data_dir=config.data_dir)))
    return [SqlQueryTool()]


def tools_prompt_section(_config: AgentConfig) -> str:
    return "## Data you can query\n" + DEMO_DESCRIPTION
