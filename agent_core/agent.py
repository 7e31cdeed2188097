"""Building the agent: model client, tools, skills, hooks and prompt, from an `AgentConfig`."""

from __future__ import annotations

import anthropic
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from agent_core.config import AgentConfig
from agent_core.hooks import Hook
from agent_core.hooks.caching import PromptCachingHook
from agent_core.hooks.compression import CompressionHook
from agent_core.hooks.dangling import DanglingToolCallPatch
from agent_core.hooks.memory import MemoryHook
from agent_core.hooks.metrics import MetricsHook
from agent_core.hooks.refocus import RefocusHook
from agent_core.hooks.skills import SkillPolicyHook
from agent_core.hooks.usage import UsageHook
from agent_core.loop import AgentLoop
from agent_core.memory import MemoryStore
from agent_core.model import ModelClient
from agent_core.prompts import system_prompt
from agent_core.run_context import RunContext
from agent_core.scheduled_work import ScheduledWork
from agent_core.skills.loader import load_skill_catalog
from agent_core.store.threads import ThreadStore
from agent_core.subagents import DEFAULT_SUBAGENTS, TaskTool
from agent_core.telemetry import TelemetryHook
from agent_core.tokens.budget import check_budget
from agent_core.tokens.estimate import TokenCounter, shared_cl100k
from agent_core.tokens.prices import ModelTable
from agent_core.toolkit.approval_gate import ApprovalGate
from agent_core.toolkit.pipeline import ToolPipeline
from agent_core.tools import memory_tool, monitor_tools, schedule_tools, skill_tools, todo
from agent_core.tools.deps import ToolDeps
from agent_core.tools.standard import default_tools, tools_prompt_section
from agent_core.tracing import TracingHook
from agent_core.workspace.local import use_object_storage


def build_agent(
    config: AgentConfig,
    store: ThreadStore,
    sessions: async_sessionmaker[AsyncSession],
    scheduled: ScheduledWork | None = None,
) -> AgentLoop:
    """An agent loop on the Anthropic Messages API with the standard tools, skills and hooks."""
    use_object_storage(config.workspace_url, config.s3_endpoint_url)
    client = anthropic.AsyncAnthropic(
        api_key=config.api_key.get_secret_value() if config.api_key else "not-set",
        base_url=config.base_url,
        max_retries=config.model_retries,
        timeout=config.model_timeout_s,
    )
    model = ModelClient(client, config.model, config.max_tokens)
    catalog = load_skill_catalog(config.skills_dir)
    memory = MemoryStore(config.data_dir / "memory")
    deps = ToolDeps.of(config, sessions, skills=catalog, memory=memory, scheduled=scheduled)
    conversation_tools = (todo, skill_tools, memory_tool, schedule_tools, monitor_tools)
    tools = ToolPipeline([*default_tools(deps), *(tool for module in conversation_tools for tool in module.build(deps))])
    models = ModelTable()
    usage = UsageHook(models)
    telemetry = TelemetryHook(sessions)
    metrics = MetricsHook()

    async def budget(ctx: RunContext) -> str | None:
        return await check_budget(
            config.budgets, usage=ctx.turn.usage, user=ctx.user, sessions=sessions, language=ctx.language
        )

    def subagent_hooks() -> list[Hook]:
        return [PromptCachingHook(), usage, telemetry, metrics]

    gate = ApprovalGate(tools, config.access_policy, config.approval_rows)
    tools.register(TaskTool(model, tools, DEFAULT_SUBAGENTS, hooks=subagent_hooks, budget=budget, gate=gate))
    hooks: list[Hook] = [  # the order documented in agent_core.hooks
        MemoryHook(memory, sessions),
        SkillPolicyHook(),
        # The encoding is loaded (and hash-checked) here, at start-up, not in the first turn.
        CompressionHook(
            model,
            config=config.compression,
            counter=TokenCounter(shared_cl100k()),
            models=models,
            store=store,
            summary_observers=[usage, telemetry, metrics],
        ),
        RefocusHook(config.refocus),
        PromptCachingHook(),
        DanglingToolCallPatch(store),
        usage,
        telemetry,
        metrics,
        TracingHook(),  # a no-op unless a tracer provider is configured
    ]

    return AgentLoop(
        model=model,
        tools=tools,
        store=store,
        system_prompt=system_prompt(tools_prompt_section(config), catalog.system_prompt_section()),
        max_iterations=config.max_iterations,
        hooks=hooks,
        budget=budget,
        gate=gate,
    )
