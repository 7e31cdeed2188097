"""Building the agent: model client, tools and prompt, from an `AgentConfig`."""

from __future__ import annotations

import anthropic

from agent_core.config import AgentConfig
from agent_core.loop import AgentLoop
from agent_core.model import ModelClient
from agent_core.prompts import system_prompt
from agent_core.store.threads import ThreadStore
from agent_core.tools.base import ToolRegistry
from agent_core.tools.catalog import default_tools, tools_prompt_section


def build_agent(config: AgentConfig, store: ThreadStore) -> AgentLoop:
    """An agent loop on the Anthropic Messages API with the standard tool set."""
    client = anthropic.AsyncAnthropic(
        api_key=config.api_key.get_secret_value() if config.api_key else "not-set",
        base_url=config.base_url,
        max_retries=config.model_retries,
        timeout=config.model_timeout_s,
    )
    tools = ToolRegistry(default_tools(config))
    return AgentLoop(
        model=ModelClient(client, config.model, config.max_tokens),
        tools=tools,
        store=store,
        system_prompt=system_prompt(tools_prompt_section(config)),
        max_iterations=config.max_iterations,
    )
