"""Skill tools: progressive disclosure (level 2 on activation, level 3 on demand)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from agent_core.run_context import RunContext
from agent_core.skills.loader import SkillCatalog
from agent_core.skills.model import SkillActivationError, SkillNotFound, SkillStackError
from agent_core.toolkit.protocol import ErrorType, Tool, ToolError

if TYPE_CHECKING:
    from agent_core.tools.deps import ToolDeps


class ActivateSkillInput(BaseModel):
    name: str = Field(..., max_length=64, description="Name of the skill, as listed under Skills.")


class ActivateSkillTool(Tool[ActivateSkillInput]):
    name = "activate_skill"
    description = (
        "Load a skill's full instructions before doing the kind of work it covers. The result "
        "lists the skill's reference files, which you can read with read_skill_file. While a "
        "skill is active only the tools it allows can be used; call finish_skill when done."
    )
    Input = ActivateSkillInput

    def __init__(self, catalog: SkillCatalog) -> None:
        self._catalog = catalog

    async def run(self, args: ActivateSkillInput, ctx: RunContext) -> str:
        try:
            return ctx.turn.thread.skills.activate(self._catalog, args.name).render()
        except SkillNotFound as exc:
            raise ToolError(str(exc), ErrorType.INVALID_PARAMETERS) from exc
        except SkillActivationError as exc:
            raise ToolError(str(exc), ErrorType.PERMISSION_DENIED) from exc


class FinishSkillInput(BaseModel):
    name: str | None = Field(None, description="The skill to finish; defaults to the innermost active one.")


class FinishSkillTool(Tool[FinishSkillInput]):
    name = "finish_skill"
    description = "Finish the active skill (the innermost one) when its work is done."
    Input = FinishSkillInput

    async def run(self, args: FinishSkillInput, ctx: RunContext) -> str:
        try:
            frame = ctx.turn.thread.skills.pop(args.name)
        except SkillStackError as exc:
            raise ToolError(str(exc), ErrorType.INVALID_PARAMETERS) from exc
        remaining = " → ".join(ctx.turn.thread.skills.chain) or "none"
        return f"Finished skill {frame.name}. Still active: {remaining}."


class ReadSkillFileInput(BaseModel):
    path: str = Field(
        ...,
        max_length=300,
        description="A skill file as listed on activation, e.g. skill://attribution/references/metric-definitions.md",
    )


class ReadSkillFileTool(Tool[ReadSkillFileInput]):
    name = "read_skill_file"
    description = "Read a reference, asset or script file that belongs to a skill."
    Input = ReadSkillFileInput

    def __init__(self, catalog: SkillCatalog) -> None:
        self._catalog = catalog

    async def run(self, args: ReadSkillFileInput, ctx: RunContext) -> str:
        try:
            return self._catalog.read_uri(args.path)
        except (SkillNotFound, ValueError) as exc:
            raise ToolError(str(exc), ErrorType.INVALID_PARAMETERS) from exc


def build(deps: ToolDeps) -> list[Tool]:
    """The skill tools over ``deps.skills`` (none without a skill catalog)."""
    if deps.skills is None:
        return []
    return [ActivateSkillTool(deps.skills), FinishSkillTool(), ReadSkillFileTool(deps.skills)]
