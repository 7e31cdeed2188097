"""Feishu / Lark adapter: webhook or long-connection events in, cards and messages out.

The gateway uses:
- `FeishuConfig` (config.py): settings from FEISHU_* env vars.
- `FeishuAdapter(config, accept)` (app.py): everything assembled — `.platform`, `.responder`
  (the `adapters.base.Responder`, plus `fetch_attachment`), `.handle` for POST /feishu/events,
  `await .start()` (opens the long connection in websocket mode), `.status()` for /readyz,
  `await .close()`.
- The parts, for other wiring: `FeishuClient`, `FeishuResponder`, `make_feishu_handler`,
  `FeishuLongConnection`.

Modules that import lark-oapi (seconds to import) load on first access, so importing the config
costs a Slack-only deployment nothing.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from adapters.feishu.config import FeishuConfig
from adapters.feishu.events import Ignored, MalformedEvent, parse_event
from adapters.feishu.webhook import make_feishu_handler

if TYPE_CHECKING:
    from adapters.feishu.app import FeishuAdapter
    from adapters.feishu.client import FeishuApiError, FeishuClient
    from adapters.feishu.longconn import FeishuLongConnection
    from adapters.feishu.responder import FeishuResponder

_LAZY = {
    "FeishuAdapter": "adapters.feishu.app",
    "FeishuApiError": "adapters.feishu.client",
    "FeishuClient": "adapters.feishu.client",
    "FeishuLongConnection": "adapters.feishu.longconn",
    "FeishuResponder": "adapters.feishu.responder",
}

__all__ = [
    "FeishuAdapter",
    "FeishuApiError",
    "FeishuClient",
    "FeishuConfig",
    "FeishuLongConnection",
    "FeishuResponder",
    "Ignored",
    "MalformedEvent",
    "make_feishu_handler",
    "parse_event",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
