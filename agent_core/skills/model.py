"""Skill data: frontmatter schema, loaded skills, activation payloads and errors.

A skill is a folder ``skills/<name>/`` holding ``SKILL.md`` (YAML frontmatter + Markdown
instructions) and optional level-3 files under ``references/``, ``assets/`` and ``scripts/``.

Frontmatter keys (hyphenated, as in the Agent Skills format):

===========================  ==========  =================================================
key                          required    meaning
===========================  ==========  =================================================
name                         yes         lowercase letters/digits/hyphens, <= 64, = folder
description                  yes         what the skill does and when to use it, <= 1024
allowed-tools                no          tool names usable while the skill is active
model                        no          model override while the skill is active
max-depth                    no          activation-chain length cap (1-10), see activation
disable-model-invocation     no          true: hidden from the model, user-activated only
metadata                     no          free-form mapping (author, version, ...)
license, compatibility       no          informational strings from the open skill format
===========================  ==========  =================================================

Unknown keys are **rejected**, not warned about: a typo such as ``allowed_tools`` would
otherwise silently drop a tool restriction.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent_core.units import human_size

NAME_PATTERN = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
MAX_DEPTH_CEILING = 10
_TOOL_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")

SKILL_URI_SCHEME = "skill://"


def skill_uri(name: str, relpath: str) -> str:
    """Virtual path of a level-3 file, e.g. ``skill://attribution/references/methods.md``."""
    return f"{SKILL_URI_SCHEME}{name}/{relpath}"


class SkillFrontmatter(BaseModel):
    """The validated YAML header of a SKILL.md (level-1 data plus execution settings)."""

    # No populate_by_name: "allowed_tools" must be rejected as unknown, not accepted as an alias.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    name: str = Field(max_length=MAX_NAME_CHARS)
    description: str = Field(max_length=MAX_DESCRIPTION_CHARS)
    allowed_tools: tuple[str, ...] | None = Field(None, alias="allowed-tools")
    model: str | None = Field(None, min_length=1)
    max_depth: int | None = Field(None, alias="max-depth", ge=1, le=MAX_DEPTH_CEILING)
    disable_model_invocation: bool = Field(False, alias="disable-model-invocation")
    metadata: dict[str, Any] = Field(default_factory=dict)
    license: str | None = None
    compatibility: str | None = Field(None, max_length=500)

    @field_validator("name")
    @classmethod
    def _name_pattern(cls, value: str) -> str:
        if not NAME_PATTERN.fullmatch(value):
            raise ValueError(
                "must be lowercase letters, digits and single hyphens (e.g. 'sales-report')"
            )
        return value

    @field_validator("description")
    @classmethod
    def _description_not_blank(cls, value: str) -> str:
        value = value.strip()
        if not value:
            raise ValueError("must not be empty")
        return value

    @field_validator("allowed_tools", mode="before")
    @classmethod
    def _split_tool_list(cls, value: object) -> object:
        # Accept the "Read, Grep" string form used by other skill hosts as well as a YAML list.
        if isinstance(value, str):
            value = [part for part in re.split(r"[,\s]+", value) if part]
        if isinstance(value, list):
            return tuple(value)
        return value

    @field_validator("allowed_tools")
    @classmethod
    def _tool_names(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        if value is None:
            return None
        bad = [tool for tool in value if not _TOOL_NAME.fullmatch(tool)]
        if bad:
            raise ValueError(f"invalid tool name(s): {', '.join(map(repr, bad))}")
        return tuple(dict.fromkeys(value))  # drop duplicates, keep order


class SkillResource(BaseModel):
    """A level-3 file. Text files up to the loader's cap are held in memory; others are listed
    (so the model knows they exist) but not readable through the catalog."""

    model_config = ConfigDict(frozen=True)

    relpath: str  # e.g. "references/metric-definitions.md", always '/'-separated
    size: int
    text: str | None = None

    @property
    def readable(self) -> bool:
        """Whether read_resource can return this file's content."""
        return self.text is not None


class Skill(BaseModel):
    """A validated skill: frontmatter, instructions (level 2) and resources (level 3)."""

    model_config = ConfigDict(frozen=True)

    frontmatter: SkillFrontmatter
    instructions: str
    directory: Path  # real location, for operators and the CLI only; never shown to the model
    resources: dict[str, SkillResource] = Field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.frontmatter.name

    @property
    def description(self) -> str:
        return self.frontmatter.description

    @property
    def allowed_tools(self) -> tuple[str, ...] | None:
        return self.frontmatter.allowed_tools

    @property
    def model(self) -> str | None:
        return self.frontmatter.model

    @property
    def max_depth(self) -> int | None:
        return self.frontmatter.max_depth

    @property
    def model_invocable(self) -> bool:
        """False when the skill may only be activated by a user, never by the model itself."""
        return not self.frontmatter.disable_model_invocation


class SkillResourceInfo(BaseModel):
    """A level-3 file as announced to the model."""

    uri: str
    size: int
    readable: bool


class ActivationPayload(BaseModel):
    """Level 2 of a skill: its full instructions plus the list of level-3 files."""

    name: str
    description: str
    instructions: str
    resources: list[SkillResourceInfo] = Field(default_factory=list)
    allowed_tools: tuple[str, ...] | None = None
    model: str | None = None

    def render(self) -> str:
        """The payload as tool-result text for the model."""
        parts = [f'<skill name="{self.name}">', self.instructions.strip()]
        if self.resources:
            lines = ["", "Skill files (read on demand with read_skill_file):"]
            for res in self.resources:
                note = "" if res.readable else ", binary or too large to read"
                lines.append(f"- {res.uri} ({human_size(res.size)}{note})")
            parts.append("\n".join(lines))
        parts.append("</skill>")
        return "\n".join(parts)


# --------------------------------------------------------------------------------------------
# Errors. Messages raised at activation/read time name skills and skill:// paths only.
# --------------------------------------------------------------------------------------------


class SkillError(Exception):
    """Base class of skill failures."""


class SkillIssue(BaseModel):
    """One problem found while loading a skill: the frontmatter field (or 'body', 'file', ...)
    and what is wrong with it."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class SkillValidationError(SkillError):
    """A skill folder failed validation; lists every problem found, not just the first."""

    def __init__(self, path: Path, issues: list[SkillIssue]) -> None:
        self.path = path
        self.issues = issues
        super().__init__(self.describe())

    @property
    def folder_name(self) -> str:
        """Name of the skill folder (the would-be skill name)."""
        return (self.path.parent if self.path.name == "SKILL.md" else self.path).name

    def describe(self) -> str:
        """Multi-line report: the file, then one line per problem naming the field."""
        lines = [f"invalid skill {self.path}:"]
        lines += [f"  - {issue}" for issue in self.issues]
        return "\n".join(lines)


class SkillNotFound(SkillError):
    """No skill (or no such level-3 file) by that name."""


class SkillActivationError(SkillError):
    """Activation refused; the message explains why in model-facing terms."""


class SkillCycleError(SkillActivationError):
    """The skill is already on the activation stack."""


class SkillDepthError(SkillActivationError):
    """Activating would make the chain longer than its depth cap."""


class SkillInvocationDenied(SkillActivationError):
    """The model tried to activate a skill marked disable-model-invocation."""


class SkillStackError(SkillError):
    """pop() did not match the stack (empty, or another skill on top)."""
