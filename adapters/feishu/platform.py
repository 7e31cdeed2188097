"""Feishu / Lark as a gateway platform plugin (see `adapters.base.Platform`).

Light to import: lark-oapi takes seconds to load, so it loads in `build`, only when Feishu is
configured; a deployment without Feishu never pays for it.
"""

from __future__ import annotations

from adapters.base import GatewayServices, Platform, PlatformAdapter, Route
from adapters.feishu.config import FeishuConfig


class FeishuPlatform(Platform[FeishuConfig]):
    name = "feishu"
    title = "Feishu"
    settings_class = FeishuConfig
    setup_hint = "FEISHU_APP_ID and FEISHU_APP_SECRET"
    routes = (Route("POST", "/feishu/events"),)
    quiet_loggers = ("Lark",)  # lark-oapi's logger: request logs can carry tokens

    def build(self, services: GatewayServices) -> PlatformAdapter:
        from adapters.feishu.app import FeishuAdapter

        return FeishuAdapter(self.settings, services)
