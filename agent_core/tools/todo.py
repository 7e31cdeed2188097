"""`todo`: the agent's own checklist for a multi-step analysis, kept with the thread."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from agent_core.run_context import RunContext
from agent_core.state import Todo, TodoStatus
from agent_core.toolkit.protocol import Tool

if TYPE_CHECKING:
    from agent_core.tools.deps import ToolDeps

MAX_TODOS = 30


def build(deps: ToolDeps) -> list[Tool]:
    return [TodoTool()]


class TodoItem(BaseModel):
    content: str = Field(..., min_length=1, max_length=300)
    status: TodoStatus = "pending"


class TodoInput(BaseModel):
    todos: list[TodoItem] = Field(
        ...,
        max_length=MAX_TODOS,
        description="The complete, updated list (it replaces the previous one). Mark the item you "
        "are working on in_progress and finished ones done.",
    )


class TodoTool(Tool[TodoInput]):
    name = "todo"
    description = (
        "Plan and track a multi-step analysis: write the list of steps, then update statuses "
        "as you go. Use it when a request needs three or more steps."
    )
    Input = TodoInput

    async def run(self, args: TodoInput, ctx: RunContext) -> str:
        ctx.turn.thread.todos = [Todo(id=i + 1, content=t.content, status=t.status) for i, t in enumerate(args.todos)]
        marks = {"pending": "[ ]", "in_progress": "[~]", "done": "[x]"}
        return "\n".join(f"{marks[t.status]} {t.id}. {t.content}" for t in ctx.turn.thread.todos) or "(no todos)"
