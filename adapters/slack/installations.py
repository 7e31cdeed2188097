"""Where each workspace's bot token comes from: the one SLACK_BOT_TOKEN, or the installations
workspaces made by OAuth, stored in the service database.

OAuth installs are kept by slack-sdk's SQLAlchemy stores (tables `oauth_installations`,
`oauth_bots`, `oauth_states`; created by the gateway's migrations) on the service's own engine, so every
replica and worker process sees an install, and an uninstall, at once. Incoming events are
authorized from the same stores (`adapters.slack.bot_identity.InstalledBot`, without asking Slack);
the answering side asks `bot_token(team)` per message.

An org-wide install (Enterprise Grid) is stored under its enterprise with no team; events from
its workspaces name both, and `remember_enterprise` records which enterprise a workspace
belongs to so a worker holding only the workspace id finds the org's token.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Protocol

from slack_sdk.oauth.installation_store.sqlalchemy import AsyncSQLAlchemyInstallationStore
from slack_sdk.oauth.state_store.sqlalchemy import AsyncSQLAlchemyOAuthStateStore
from sqlalchemy import Column, MetaData, String, Table, and_, desc, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncEngine

# How long an OAuth state (the install page's link) stays valid.
STATE_EXPIRATION_S = 10 * 60
# A worker re-reads a workspace's token after this long: a reinstall's new token is picked up,
# and an uninstalled workspace stops being answered.
TOKEN_TTL_S = 30.0

_metadata = MetaData()
ENTERPRISE_TEAMS = Table(
    "oauth_org_workspaces",
    _metadata,
    Column("team_id", String(32), primary_key=True),
    Column("enterprise_id", String(32), nullable=False),
)


class WorkspaceNotInstalled(Exception):
    """No bot token for the workspace: never installed, or uninstalled since."""

    def __init__(self, team_id: str) -> None:
        super().__init__(f"the Slack app is not installed in workspace {team_id}")
        self.team_id = team_id


class BotTokens(Protocol):
    """A workspace's bot token, or None when the app is not installed there."""

    async def bot_token(self, team_id: str) -> str | None: ...


class SingleToken:
    """SLACK_BOT_TOKEN: one workspace, one token, whatever the event says."""

    def __init__(self, token: str) -> None:
        self._token = token

    async def bot_token(self, team_id: str) -> str | None:
        return self._token


class Installations:
    """OAuth installs in the service database, by the app's client id."""

    def __init__(self, client_id: str, engine: AsyncEngine) -> None:
        self._engine = engine
        self.store = AsyncSQLAlchemyInstallationStore(
            client_id, engine, bots_table_name="oauth_bots", installations_table_name="oauth_installations"
        )
        self.states = AsyncSQLAlchemyOAuthStateStore(STATE_EXPIRATION_S, engine, table_name="oauth_states")
        self._tokens: dict[str, tuple[str | None, float]] = {}  # team → (token, valid until)
        self._known_enterprises: set[str] = set()  # teams whose enterprise is recorded

    async def bot_token(self, team_id: str) -> str | None:
        now = time.monotonic()
        cached = self._tokens.get(team_id)
        if cached is not None and cached[1] > now:
            return cached[0]
        token = await self._find_token(team_id)
        self._tokens[team_id] = (token, now + TOKEN_TTL_S)
        return token

    async def remember_enterprise(self, team_id: str, enterprise_id: str) -> None:
        """Record that `team_id` belongs to the org `enterprise_id` (once per process)."""
        if team_id in self._known_enterprises:
            return
        row = ENTERPRISE_TEAMS.c
        try:
            async with self._engine.begin() as conn:
                known = await conn.scalar(select(row.enterprise_id).where(row.team_id == team_id))
                if known is None:
                    await conn.execute(ENTERPRISE_TEAMS.insert().values(team_id=team_id, enterprise_id=enterprise_id))
                elif known != enterprise_id:  # the workspace moved to another org
                    await conn.execute(
                        ENTERPRISE_TEAMS.update().where(row.team_id == team_id).values(enterprise_id=enterprise_id)
                    )
        except IntegrityError:
            pass  # another process recorded it first
        self._known_enterprises.add(team_id)

    async def forget_expired_states(self) -> None:
        """Delete install links' states that expired unused (a used one is deleted by its use),
        so the table holds no more than the links handed out in the last few minutes."""
        states = self.states.oauth_states
        now = datetime.now(UTC).replace(tzinfo=None)  # the store keeps naive UTC
        async with self._engine.begin() as conn:
            await conn.execute(states.delete().where(states.c.expire_at < now))

    async def count(self) -> int:
        """Workspaces and orgs with a bot token (for the start-up log)."""
        bots = self.store.bots.c
        query = select(bots.enterprise_id, bots.team_id).where(
            and_(bots.client_id == self.store.client_id, bots.bot_token.is_not(None))
        )
        async with self._engine.connect() as conn:
            return len(set((await conn.execute(query)).all()))

    async def _find_token(self, team_id: str) -> str | None:
        bots = self.store.bots.c
        latest = (
            select(bots.bot_token)
            .where(and_(bots.client_id == self.store.client_id, bots.bot_token.is_not(None)))
            .order_by(desc(bots.installed_at))
            .limit(1)
        )
        async with self._engine.connect() as conn:
            # The workspace's own install (also a workspace of an org installed on its own)…
            token = await conn.scalar(latest.where(bots.team_id == team_id))
            if token is not None:
                return str(token)
            # …else its org's org-wide install.
            enterprise = select(ENTERPRISE_TEAMS.c.enterprise_id).where(ENTERPRISE_TEAMS.c.team_id == team_id)
            org_wide = and_(bots.team_id.is_(None), bots.is_enterprise_install.is_(True), bots.enterprise_id.in_(enterprise))
            token = await conn.scalar(latest.where(org_wide))
            return None if token is None else str(token)
