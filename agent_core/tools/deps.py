"""`ToolDeps`: everything a tool module's ``build`` may construct its tools from."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import async_sessionmaker
    from sqlmodel.ext.asyncio.session import AsyncSession

    from agent_core.config import AgentConfig
    from agent_core.governance.access import SourceAccess
    from agent_core.memory import MemoryStore
    from agent_core.scheduled_work import ScheduledWork
    from agent_core.skills.loader import SkillCatalog
    from agent_core.toolkit.protocol import Tool


@dataclass(frozen=True)
class ToolDeps:
    """What the tools of a process (or of one `ba-agent tool run`) are built from.

    A module builds only the tools its dependencies allow: `search_schema` needs the service
    database and data sources, `memory` the memory store, the skill tools a skill catalog.
    """

    config: AgentConfig
    # The service database (audit trail, schema catalog, memories); None for library use.
    sessions: async_sessionmaker[AsyncSession] | None = None
    # The process's one governed path to the configured sources; None: each tool opens its own,
    # neither limited nor recorded.
    access: SourceAccess | None = None
    skills: SkillCatalog | None = None
    memory: MemoryStore | None = None
    # Schedules and monitors, where a running service keeps them (None: no such tools).
    scheduled: ScheduledWork | None = None

    @classmethod
    def of(
        cls,
        config: AgentConfig,
        sessions: async_sessionmaker[AsyncSession] | None = None,
        *,
        skills: SkillCatalog | None = None,
        memory: MemoryStore | None = None,
        scheduled: ScheduledWork | None = None,
    ) -> ToolDeps:
        """Dependencies whose governed tools share one `SourceAccess`: limited and audited in
        the service database when there is one (``sessions``) and data sources are configured."""
        from agent_core.governance.access import SourceAccess
        from agent_core.governance.audit import audit_trail

        audit = audit_trail(sessions, config.datasources, config.user_daily_rows) if sessions is not None else None
        return cls(config, sessions, SourceAccess(config.datasources, config.access_policy, audit), skills, memory, scheduled)


class ToolModule(Protocol):
    """A module of `agent_core.tools`: its tools, built from ``deps``."""

    def build(self, deps: ToolDeps) -> list[Tool]: ...
