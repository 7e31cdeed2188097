"""The Feishu adapter assembled for the gateway: client, responder, and the event source of the
configured mode (the /feishu/events webhook handler, or the long connection)."""

from __future__ import annotations

from adapters.base import AcceptMessage, ConnectionStatus
from adapters.feishu.client import FeishuClient
from adapters.feishu.config import FeishuConfig
from adapters.feishu.events import PLATFORM, KnownThread
from adapters.feishu.longconn import FeishuLongConnection
from adapters.feishu.responder import FeishuResponder
from adapters.feishu.webhook import Handler, make_feishu_handler


class FeishuAdapter:
    """Feishu / Lark: `handle` for POST /feishu/events, `responder`, and in websocket mode a
    long connection that `start()` opens and `close()` shuts."""

    platform = PLATFORM

    def __init__(self, config: FeishuConfig, accept: AcceptMessage, known_thread: KnownThread) -> None:
        self.config = config
        self.client = FeishuClient(config)
        self.responder = FeishuResponder(self.client, config)
        self.handle: Handler = make_feishu_handler(config, accept, self.client.bot_open_id, known_thread)
        self.long_connection = (
            FeishuLongConnection(config, accept, self.client.bot_open_id, known_thread)
            if config.mode == "websocket"
            else None
        )

    async def start(self) -> None:
        """Open the long connection (websocket mode); nothing to do for webhooks."""
        if self.long_connection is not None:
            await self.long_connection.start()

    def status(self) -> ConnectionStatus | None:
        """The long connection's state for /readyz (None in webhook mode)."""
        return self.long_connection.status() if self.long_connection is not None else None

    async def close(self) -> None:
        """Stop receiving, then release the API client."""
        if self.long_connection is not None:
            await self.long_connection.stop()
        await self.client.aclose()
