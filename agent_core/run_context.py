"""What a run of the agent works with: its fixed dependencies and the state of its turn.

As pydantic-ai separates a run's ``deps`` from its state:

- `RunDeps` -- who and where the conversation is (thread, workspace root, channel, user, the
  chat it came from). The caller builds it once per run; nothing changes it afterwards.
- `TurnState` -- what the turn changes as it runs: the thread's stored working state, the
  usage its model calls count in, how full the context is, the files tools made, the data
  they read, the memory loaded for the prompt. Every field is typed and says who writes it.
- `RunContext` -- both together: what tools and hooks receive. It *is* the run's deps (tools
  read ``ctx.thread_id``, ``ctx.data_dir``… directly) and carries the turn as ``ctx.turn``.

This module sits low in agent_core (it imports only data types), so the tool protocol, the
hooks and the loop all import it without an import running back up.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING

from agent_core.i18n import Language
from agent_core.messages import InboundMessage, OutboundFile
from agent_core.provenance import DataAccess
from agent_core.state import ThreadState, ThreadUsage

if TYPE_CHECKING:
    from agent_core.memory import ConversationScope


@dataclass(frozen=True, kw_only=True)
class ChatOrigin:
    """Where a chat conversation lives on its platform (absent outside chats: the CLI)."""

    platform: str
    workspace: str
    user_name: str | None = None
    thread_root: str | None = None  # the platform thread the bot answers in, if any

    @classmethod
    def of(cls, msg: InboundMessage) -> ChatOrigin:
        return cls(
            platform=msg.platform,
            workspace=msg.workspace,
            user_name=msg.user_name,
            thread_root=msg.reply_in_thread,
        )


@dataclass(frozen=True, kw_only=True)
class RunDeps:
    """What a run depends on, fixed from its first step to its last."""

    thread_id: str
    data_dir: Path  # root of every conversation's workspace
    channel: str = ""
    user: str = ""
    is_dm: bool = False
    chat: ChatOrigin | None = None
    language: Language = Language.EN  # what the bot's own texts to the user are written in
    # A scheduled run's id ("report:7", "monitor:gmv_drop"): `user` is its creator, not a
    # person asking, and the access policy joins their access with the channel's.
    scheduled_run: str | None = None


@dataclass(frozen=True)
class MemoryInPrompt:
    """The conversation's durable memory, as looked up once per turn."""

    scope: ConversationScope | None  # None: the conversation has no stored thread (a sub-agent's)
    section: str = ""  # the memory block sent after the base prompt ("" when there is none)


@dataclass(frozen=True)
class HistoryView:
    """Which stored messages a request was built from, rendered under which context version."""

    messages: int
    context_version: int


@dataclass(eq=False, kw_only=True)
class TurnState:
    """What a turn changes as it runs; built by the loop at the start of each turn."""

    # The conversation's stored working state (skills, todos, context marks, usage): loaded at
    # the start of the turn, saved after each step.
    thread: ThreadState = field(default_factory=ThreadState)
    # A sub-agent's turn is billed to its parent thread's usage, so its tokens reach the
    # conversation's usage and budgets; None: the thread's own (see `usage`).
    billed_to: ThreadUsage | None = None
    # How full the model's context window was at the last model call (0..1; compression hook);
    # over the pressure threshold every tool result is shown BRIEF.
    context_fill: float = 0.0
    # Files a tool made for the user (charts, reports): posted beside the turn's answer.
    produced_files: list[OutboundFile] = field(default_factory=list)
    # The queries whose rows the model read (the tools that ran them record them): the
    # answer's provenance line and its SQL are built from these, never from the model's text.
    data_used: list[DataAccess] = field(default_factory=list)
    # The memory of the conversation (memory hook, or the memory tool where no hook runs).
    memory: MemoryInPrompt | None = None
    # What the request in flight was built from (compression hook, before and after the call).
    in_flight: HistoryView | None = None
    model_calls: int = 0
    tool_calls: int = 0
    # The model said the context was too long once already: a second time ends the turn.
    overflow_retried: bool = False

    @property
    def usage(self) -> ThreadUsage:
        """Where this turn's model calls are counted (usage hook) and budgets look."""
        return self.billed_to if self.billed_to is not None else self.thread.usage


@dataclass(frozen=True, kw_only=True)
class RunContext(RunDeps):
    """A run's dependencies and its turn's state: what tools and hooks receive."""

    turn: TurnState = field(default_factory=TurnState)
    # The model's id of the tool call being run (set by the tool pipeline for each call), so
    # what a tool records -- the data-access audit -- names the call it served.
    tool_call_id: str = ""
    # The tool that call runs (or "monitor" for a monitor's run), so a query made on a tool's
    # behalf -- a push-down cube, a monitor's series -- is audited under the tool's own name.
    tool_name: str = ""
    # The approval that let this call run (set by the loop on the call it was granted for), so
    # the audit can name it.
    approval_id: str | None = None

    @classmethod
    def start(cls, deps: RunDeps, turn: TurnState) -> RunContext:
        """The context of a turn run with `deps`."""
        return cls(**{f.name: getattr(deps, f.name) for f in fields(RunDeps)}, turn=turn)
