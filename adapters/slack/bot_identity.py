"""Who the bot is, for bolt, without a call to Slack while an event waits for its acknowledgement.

Bolt's own authorization asks Slack (auth.test): with one bot token on the first delivery it
sees, with OAuth installs on every delivery (of the token it read from the installation store).
While Slack's Web API is down or rate limiting, such a delivery never reaches a listener: bolt
answers it 200 with an error text (Slack does not send it again: the event is lost) or 500.

- One bot token (`BotIdentity`): the token is the app's own, and the bot's ids come from the
  start-up check (`SlackAdapter._check_credentials`, asked again until Slack answers); until then
  each event's `authorizations` names the bot user it was delivered to.
- OAuth installs (`InstalledBot`): the workspace's (or its org's) bot as its install stored it,
  read from the service database. Token rotation is off in the shipped manifests, so a stored
  token is the one to use; an uninstall or a revoked token deletes it (bolt's revocation
  listeners).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from slack_bolt.authorization import AuthorizeResult
from slack_bolt.authorization.async_authorize import AsyncAuthorize
from slack_bolt.context.async_context import AsyncBoltContext
from slack_sdk.oauth.installation_store.async_installation_store import AsyncInstallationStore


@dataclass(frozen=True)
class KnownBot:
    """What bolt needs to know of the bot an event is for."""

    token: str | None
    user_id: str | None = None
    bot_id: str | None = None
    scopes: Sequence[str] | None = None


class _KnownBotAuthorize(AsyncAuthorize):
    """Bolt's `authorize` from a bot known here: `find` says which (None: not installed, and
    bolt answers the event without a listener). Bolt takes an `AsyncAuthorize` as is, None
    included, though `AsyncApp`'s annotation of `authorize` says a result always."""

    async def find(self, context: AsyncBoltContext, enterprise_id: str | None, team_id: str | None) -> KnownBot | None:
        raise NotImplementedError

    async def __call__(
        self,
        *,
        context: AsyncBoltContext,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None,
        actor_enterprise_id: str | None = None,
        actor_team_id: str | None = None,
        actor_user_id: str | None = None,
    ) -> AuthorizeResult | None:
        bot = await self.find(context, enterprise_id, team_id)
        if bot is None:
            return None
        return AuthorizeResult(
            enterprise_id=enterprise_id,
            team_id=team_id,
            user_id=user_id,
            bot_token=bot.token,
            bot_user_id=bot.user_id,
            bot_id=bot.bot_id,
            bot_scopes=bot.scopes,
        )


class BotIdentity(_KnownBotAuthorize):
    """The bot token and, once auth.test has answered, the bot's user and bot ids: always a
    result, from what is known now."""

    def __init__(self, token: str) -> None:
        super().__init__()
        self.token = token
        self.user_id: str | None = None
        self.bot_id: str | None = None

    def learn(self, auth_test: Any) -> None:
        """Keep the ids from an auth.test answer."""
        self.user_id = auth_test.get("user_id")
        self.bot_id = auth_test.get("bot_id")

    async def find(self, context: AsyncBoltContext, enterprise_id: str | None, team_id: str | None) -> KnownBot:
        return KnownBot(self.token, self.user_id, self.bot_id)


class InstalledBot(_KnownBotAuthorize):
    """With OAuth installs: the stored bot of the event's workspace or org, None where the app
    is not installed."""

    def __init__(self, store: AsyncInstallationStore) -> None:
        super().__init__()
        self._store = store

    async def find(self, context: AsyncBoltContext, enterprise_id: str | None, team_id: str | None) -> KnownBot | None:
        bot = await self._store.async_find_bot(
            enterprise_id=enterprise_id, team_id=team_id, is_enterprise_install=context.is_enterprise_install
        )
        if bot is None:
            return None
        return KnownBot(bot.bot_token, bot.bot_user_id, bot.bot_id, bot.bot_scopes)


def delivered_to_bot_user(body: dict[str, Any]) -> str | None:
    """The bot user an Events API delivery names in its `authorizations` (None if it names none)."""
    authorizations = body.get("authorizations")
    if not isinstance(authorizations, list):
        return None
    for entry in authorizations:
        if isinstance(entry, dict) and entry.get("is_bot") and isinstance(entry.get("user_id"), str):
            return str(entry["user_id"])
    return None
