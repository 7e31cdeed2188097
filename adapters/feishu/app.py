"""The Feishu adapter assembled for the gateway: client, responder, and the event source of the
configured mode (the /feishu/events webhook handler, or the long connection)."""

from __future__ import annotations

from adapters.base import ConnectionStatus, CredentialStatus, GatewayServices, Handler, Route
from adapters.credentials import CredentialCheck, CredentialsRefused
from adapters.feishu.card_actions import CardActions
from adapters.feishu.client import FeishuClient
from adapters.feishu.config import FeishuConfig
from adapters.feishu.events import PLATFORM
from adapters.feishu.longconn import FeishuLongConnection
from adapters.feishu.responder import FeishuResponder
from adapters.feishu.transport import FeishuApiError
from adapters.feishu.webhook import make_feishu_handler


class FeishuAdapter:
    """Feishu / Lark (an `adapters.base.PlatformAdapter`): `handle` for POST /feishu/events,
    `responder`, and in websocket mode a long connection that `start()` opens and `stop()`
    shuts."""

    platform = PLATFORM

    def __init__(self, config: FeishuConfig, services: GatewayServices) -> None:
        self.config = config
        self.client = FeishuClient(config)
        self.responder = FeishuResponder(self.client, config)
        card_actions = CardActions(
            services.accept,
            services.approvals,
            services.monitor_actions,
            self.responder.update_alert,
            services.feedback,
            self.responder.ask_what_was_wrong,
            self.responder.show_example_decision,
        )
        self.handle: Handler = make_feishu_handler(
            config, services.accept, self.client.bot_open_id, services.is_live, card_actions
        )
        self.long_connection = (
            FeishuLongConnection(
                config, services.accept, self.client.bot_open_id, services.is_live, card_actions=card_actions
            )
            if config.mode == "websocket"
            else None
        )
        self._credentials = CredentialCheck("feishu", self._check_credentials)

    def handler(self, route: Route) -> Handler:
        return self.handle

    async def start(self) -> None:
        """Check the credentials (in the background), open the long connection (websocket
        mode); nothing more for webhooks."""
        self._credentials.start()
        if self.long_connection is not None:
            await self.long_connection.start()

    def status(self) -> ConnectionStatus | None:
        """The long connection's state for /readyz (None in webhook mode)."""
        return self.long_connection.status() if self.long_connection is not None else None

    def credentials(self) -> CredentialStatus | None:
        return self._credentials.status

    async def _check_credentials(self) -> str:
        """A tenant_access_token for the app id and secret, then the bot it speaks as."""
        try:
            await self.client.tenant_token()
        except FeishuApiError as exc:
            if exc.code <= 0:  # no answer Feishu gave (an HTML error page, a proxy): ask again
                raise
            raise CredentialsRefused(
                f"tenant token refused (code {exc.code}: {exc.msg}): check FEISHU_APP_ID and FEISHU_APP_SECRET"
            ) from None
        try:
            bot = await self.client.bot_info()
        except FeishuApiError as exc:
            raise CredentialsRefused(f"app {self.config.app_id} has no bot ({exc.msg}): add the Bot feature") from None
        return f"app {self.config.app_id}, bot {bot.name or '(unnamed)'} ({bot.open_id})"

    async def stop(self) -> None:
        """Stop receiving, then release the API client."""
        await self._credentials.stop()
        if self.long_connection is not None:
            await self.long_connection.stop()
        await self.client.aclose()
