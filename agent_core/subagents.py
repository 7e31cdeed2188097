"""Sub-agents: the `task` tool hands a self-contained job to a fresh agent.

A sub-agent starts from the task description alone — no parent messages, no todos, no active
skills — with its own tool set and iteration limit, and returns its last non-empty text. It
cannot start sub-agents of its own (one level of nesting). Several `task` calls in one model
turn run in parallel (the tool is concurrency-safe).

A sub-agent's model calls are billed to its parent's thread: the usage hook it shares with
the agent counts them in the conversation's usage, and the conversation's budget check runs
before each of its steps too.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, Field, create_model

from agent_core.hooks import Hook
from agent_core.loop import AgentLoop, BudgetCheck, ToolGate, TurnEnd
from agent_core.messages import Role, StandardMessage, TextBlock, new_id
from agent_core.model import ModelClient
from agent_core.prompts import system_prompt
from agent_core.run_context import RunContext, RunDeps
from agent_core.store.ephemeral_threads import EphemeralThreadStore
from agent_core.toolkit.pipeline import ToolPipeline
from agent_core.toolkit.protocol import ErrorType, Tool, ToolError


class SubAgentSpec(BaseModel):
    name: str
    description: str
    tools: list[str]
    max_iterations: int = 12
    instructions: str


DEFAULT_SUBAGENTS = [
    SubAgentSpec(
        name="data-analyst",
        description="Answers one well-defined data question with SQL and returns the figures.",
        tools=["list_tables", "describe_table", "sql_query"],
        instructions=(
            "You are a data analyst working on one task for a colleague. Query the data, check "
            "your numbers, and reply with a compact answer: the figures (a small Markdown table "
            "is fine), the SQL you relied on, and any caveat. Do not ask questions back."
        ),
    ),
    SubAgentSpec(
        name="general-purpose",
        description="Any self-contained research or analysis task that needs several steps.",
        tools=["list_tables", "describe_table", "sql_query", "detect_anomalies", "attribute_change",
               "ls", "read_file", "grep", "glob"],
        max_iterations=20,
        instructions=(
            "You are working on one self-contained task for a colleague. Use the tools, then reply "
            "with a complete, concise result. Do not ask questions back."
        ),
    ),
]


class TaskInput(BaseModel):
    description: str = Field(..., min_length=10, max_length=8000, description="The complete task.")
    # Narrowed to a Literal of the configured sub-agent names by `TaskTool`.
    subagent_type: str = Field(..., description="Which sub-agent to use.")


class TaskTool(Tool[TaskInput]):
    """Declared per configuration: `subagent_type` is an enum of the configured sub-agents."""

    name = "task"
    concurrency_safe = True

    def __init__(
        self,
        model: ModelClient,
        parent_tools: ToolPipeline,
        specs: list[SubAgentSpec],
        hooks: Callable[[], list[Hook]] = list,
        budget: BudgetCheck | None = None,
        gate: ToolGate | None = None,
    ) -> None:
        self._model = model
        self._specs = {spec.name: spec for spec in specs}
        self._hooks = hooks
        self._budget = budget
        self._gate = gate  # a query that needs an approval is refused in a sub-agent
        self._registries = {
            spec.name: ToolPipeline([t for t in (parent_tools.get(n) for n in spec.tools) if t is not None])
            for spec in specs
        }
        listing = "; ".join(f"{s.name}: {s.description}" for s in specs)
        self.description = (
            "Hand a self-contained task to a sub-agent that starts fresh (it sees only your "
            "description, so include every detail it needs) and returns its result. Several "
            f"task calls in one turn run in parallel. Sub-agents: {listing}."
        )
        # A Literal of names known only at run time: a valid pydantic annotation, but not a type
        # mypy can check statically, hence Any.
        names: Any = Literal[tuple(self._specs)]
        self.Input = create_model(
            "TaskInput",
            __base__=TaskInput,
            subagent_type=(names, Field(..., description="Which sub-agent to use.")),
        )

    async def run(self, args: TaskInput, ctx: RunContext) -> str:
        spec = self._specs[args.subagent_type]
        store = EphemeralThreadStore()
        agent = AgentLoop(
            model=self._model,
            tools=self._registries[spec.name],
            store=store,
            system_prompt=system_prompt(spec.instructions),
            max_iterations=spec.max_iterations,
            hooks=self._hooks(),
            budget=self._budget,
            gate=self._gate,
        )
        thread_id = f"{ctx.thread_id}/task-{new_id()[:8]}"
        deps = RunDeps(
            thread_id=ctx.thread_id,  # same workspace: the sub-agent sees the conversation's files
            data_dir=ctx.data_dir,
            channel=ctx.channel,
            user=ctx.user,
            is_dm=ctx.is_dm,
            chat=ctx.chat,  # the asker's identity: the access policy applies as in the parent turn
            language=ctx.language,
        )
        task = StandardMessage(thread_id=thread_id, role=Role.USER, content=[TextBlock(text=args.description)])
        result = await agent.run_turn(thread_id, task, "task", deps, billed_to=ctx.turn.usage)
        if result.end is TurnEnd.MODEL_UNAVAILABLE:
            raise ToolError(result.text, ErrorType.RESOURCE_ERROR)
        if result.provenance is not None:  # the parent's answer shows the data its sub-agent read
            ctx.turn.data_used.extend(result.provenance.accesses)
        for message in reversed(await store.history(thread_id)):
            if message.role is Role.ASSISTANT and message.text.strip():
                return message.text
        return "(the sub-agent returned no text)"
