"""Feishu / Lark adapter: webhook or long-connection events in, cards and messages out.

The gateway uses:
- `FeishuConfig` (config.py): settings from FEISHU_* env vars.
- `FeishuClient(config)` (client.py): the Open API client; `await client.aclose()` at shutdown.
- `make_feishu_handler(config, accept, client.bot_open_id)` (webhook.py): POST /feishu/events.
- `FeishuLongConnection(config, accept, client.bot_open_id)` (longconn.py): `await start()`,
  `await stop()`, `status()` / `state` for /readyz — instead of the webhook when mode is
  "websocket".
- `FeishuResponder(client, config)` (responder.py): the `adapters.base.Responder`, plus
  `download_attachment(msg, attachment, dest_dir)`.

The client, responder and long connection import lark-oapi, which takes seconds to import, so they
are loaded on first access and a Slack-only deployment never pays for it.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from adapters.feishu.config import FeishuConfig
from adapters.feishu.events import Ignored, MalformedEvent, parse_event
from adapters.feishu.webhook import make_feishu_handler

if TYPE_CHECKING:
    from adapters.feishu.client import AttachmentTooLarge, FeishuApiError, FeishuClient
    from adapters.feishu.longconn import ConnectionState, FeishuLongConnection, LongConnectionStatus
    from adapters.feishu.responder import FeishuResponder

_LAZY = {
    "AttachmentTooLarge": "adapters.feishu.client",
    "FeishuApiError": "adapters.feishu.client",
    "FeishuClient": "adapters.feishu.client",
    "ConnectionState": "adapters.feishu.longconn",
    "FeishuLongConnection": "adapters.feishu.longconn",
    "LongConnectionStatus": "adapters.feishu.longconn",
    "FeishuResponder": "adapters.feishu.responder",
}

__all__ = [
    "AttachmentTooLarge",
    "ConnectionState",
    "FeishuApiError",
    "FeishuClient",
    "FeishuConfig",
    "FeishuLongConnection",
    "FeishuResponder",
    "Ignored",
    "LongConnectionStatus",
    "MalformedEvent",
    "make_feishu_handler",
    "parse_event",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
