"""The per-thread skill activation stack: nesting, cycles, depth, injection and tool scope.

The stack is plain data (a pydantic model, JSON round-trip) so it can be persisted with the
thread; it does no I/O and needs no lock -- every mutation is synchronous, and the gateway runs
one turn per thread at a time (cross-replica safety is the persistence layer's job, e.g. a
version column).

Rules, in the order they are checked by :meth:`SkillActivationStack.activate`:

1. **Cycle** -- a skill already on the stack cannot be activated again; the error names the
   whole path, e.g. ``report-generation → attribution → report-generation``.
2. **Depth** -- the stack may hold at most *cap* skills. Each skill may declare ``max-depth``;
   a declaration overrides the stack default (3) and when several skills on the chain declare
   one, the smallest wins: ``cap = min(declared max-depths on the chain incl. the new skill)``,
   or the default when none declares. So an orchestrating skill can allow deeper chains
   (``max-depth: 5``) and a skill that must run alone can forbid nesting (``max-depth: 1``).
3. **Injection once** -- the first activation in a thread returns the full instructions and
   records the skill as *injected*; a later re-activation (after it was popped) is pushed again
   but returns only a short "already loaded" note. Whoever compacts or drops history that
   contained the instructions must call :meth:`forget_injected` so they are sent again.

Effective settings for the dispatcher, from the frames on the stack:

* ``allowed_tools``: the **intersection** of the lists of every frame that declares one (a
  nested skill can never widen what its caller allowed); ``None`` means no skill restricts.
* ``model``: the innermost declared override, else ``None``.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field

from agent_core.skills.model import (
    ActivationPayload,
    Skill,
    SkillCycleError,
    SkillDepthError,
    SkillStackError,
)

if TYPE_CHECKING:
    from agent_core.skills.loader import SkillCatalog  # the catalog is passed in, never built here

DEFAULT_MAX_DEPTH = 3
CHAIN_ARROW = " → "


def _now() -> datetime:
    return datetime.now(UTC)


class ActivationFrame(BaseModel):
    """One active skill. Settings are snapshotted at activation so a persisted stack keeps
    meaning the same thing even if the skill files change before the thread resumes."""

    model_config = ConfigDict(frozen=True)

    name: str
    activation_id: str = Field(default_factory=lambda: uuid.uuid4().hex)
    allowed_tools: tuple[str, ...] | None = None
    model: str | None = None
    max_depth: int | None = None
    activated_at: datetime = Field(default_factory=_now)


class SkillActivation(BaseModel):
    """Outcome of a successful activation, ready to become the tool result."""

    name: str
    chain: list[str]
    already_loaded: bool
    payload: ActivationPayload

    def render(self) -> str:
        """Tool-result text: the instructions, or a short note when they were sent before."""
        chain = CHAIN_ARROW.join(self.chain)
        if self.already_loaded:
            return (
                f"Skill '{self.name}' is already loaded: its instructions appear earlier in "
                f"this conversation — follow them. Active skills: {chain}."
            )
        return f"{self.payload.render()}\nActive skills: {chain}."


class SkillActivationStack(BaseModel):
    """The chain of currently active skills of one thread, plus which skills' instructions
    the thread already contains."""

    version: Literal[1] = 1
    frames: list[ActivationFrame] = Field(default_factory=list)
    injected: list[str] = Field(default_factory=list)
    # Configuration, not state: not persisted, supplied again when the stack is restored.
    default_max_depth: int = Field(DEFAULT_MAX_DEPTH, ge=1, exclude=True)

    # ---- inspection

    @property
    def chain(self) -> list[str]:
        """Names of the active skills, outermost first."""
        return [f.name for f in self.frames]

    @property
    def depth(self) -> int:
        return len(self.frames)

    @property
    def top(self) -> ActivationFrame | None:
        """The innermost (currently running) skill, if any."""
        return self.frames[-1] if self.frames else None

    def is_injected(self, name: str) -> bool:
        """Whether the thread already contains this skill's instructions."""
        return name in self.injected

    def depth_cap(self, incoming: Skill | None = None) -> int:
        """The chain length allowed with the current frames (plus `incoming`, if given)."""
        declared = [f.max_depth for f in self.frames if f.max_depth is not None]
        if incoming is not None and incoming.max_depth is not None:
            declared.append(incoming.max_depth)
        return min(declared) if declared else self.default_max_depth

    def effective_allowed_tools(self) -> frozenset[str] | None:
        """Tools usable now: the intersection over all frames that declare a list; None when
        no active skill restricts tools."""
        allowed: frozenset[str] | None = None
        for frame in self.frames:
            if frame.allowed_tools is not None:
                tools = frozenset(frame.allowed_tools)
                allowed = tools if allowed is None else allowed & tools
        return allowed

    def effective_model(self) -> str | None:
        """The model override of the innermost skill that declares one, else None."""
        for frame in reversed(self.frames):
            if frame.model is not None:
                return frame.model
        return None

    # ---- mutation

    def push(self, skill: Skill) -> ActivationFrame:
        """Put `skill` on top of the stack after the cycle and depth checks.

        Raises SkillCycleError / SkillDepthError (messages name the chain); the stack is left
        unchanged on error.
        """
        if skill.name in self.chain:
            path = CHAIN_ARROW.join([*self.chain, skill.name])
            raise SkillCycleError(
                f"skill cycle: {path}. '{skill.name}' is already active; finish "
                f"'{self.chain[-1]}' and continue with the instructions already loaded."
            )
        cap = self.depth_cap(skill)
        if self.depth + 1 > cap:
            current = CHAIN_ARROW.join(self.chain) or "(none)"
            raise SkillDepthError(
                f"skill depth limit {cap} reached: cannot activate '{skill.name}' on top of "
                f"{current}. Finish the current skill first."
            )
        frame = ActivationFrame(
            name=skill.name,
            allowed_tools=skill.allowed_tools,
            model=skill.model,
            max_depth=skill.max_depth,
        )
        self.frames.append(frame)
        return frame

    def pop(self, name: str | None = None) -> ActivationFrame:
        """Remove the innermost skill (it is done). With `name`, it must be the one on top."""
        if not self.frames:
            raise SkillStackError("no skill is active")
        if name is not None and self.frames[-1].name != name:
            raise SkillStackError(
                f"'{name}' is not the innermost active skill "
                f"(active: {CHAIN_ARROW.join(self.chain)})"
            )
        return self.frames.pop()

    def clear(self) -> None:
        """Deactivate every skill (e.g. at the end of a turn). Injection records are kept: the
        instructions are still in the thread's history."""
        self.frames.clear()

    def mark_injected(self, name: str) -> None:
        """Record that the thread now contains `name`'s instructions."""
        if name not in self.injected:
            self.injected.append(name)

    def forget_injected(self, names: list[str] | None = None) -> None:
        """Forget injections (all, or `names`) after the history holding them was compacted,
        so the next activation sends the instructions again."""
        self.injected = [] if names is None else [n for n in self.injected if n not in names]

    def activate(
        self, catalog: SkillCatalog, name: str, *, by_model: bool = True
    ) -> SkillActivation:
        """Activate `name`: validate, push, and decide whether to inject its instructions.

        Raises SkillNotFound, SkillInvocationDenied, SkillCycleError or SkillDepthError, all
        with model-safe messages; the stack is unchanged on error.
        """
        payload = catalog.activate(name, by_model=by_model)
        self.push(catalog.get(name))
        already_loaded = self.is_injected(name)
        self.mark_injected(name)
        return SkillActivation(
            name=name, chain=self.chain, already_loaded=already_loaded, payload=payload
        )

    # ---- persistence

    def to_json(self) -> str:
        """Serialize the state (frames and injections) for storage with the thread."""
        return self.model_dump_json()

    @classmethod
    def from_json(
        cls, data: str | bytes, *, default_max_depth: int = DEFAULT_MAX_DEPTH
    ) -> SkillActivationStack:
        """Restore a stack saved by :meth:`to_json`, with the current configuration."""
        state = json.loads(data)
        if not isinstance(state, dict):
            raise ValueError("activation stack JSON must be an object")
        return cls.model_validate({**state, "default_max_depth": default_max_depth})
