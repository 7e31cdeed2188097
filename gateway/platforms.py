"""The configured chat platforms: their adapters, built the same way in every process.

The serve process mounts their event endpoints and opens their long connections; a worker
process only uses their responders to answer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from adapters.base import Responder
from adapters.slack.app import SlackAdapter
from adapters.slack.socket_mode import SlackSocketMode
from gateway.config import Settings
from gateway.runtime import Runtime

if TYPE_CHECKING:
    from adapters.feishu.app import FeishuAdapter


@dataclass
class Platforms:
    slack: SlackAdapter | None = None
    slack_socket: SlackSocketMode | None = None
    feishu: FeishuAdapter | None = None

    @property
    def responders(self) -> dict[str, Responder]:
        adapters = [a for a in (self.slack, self.feishu) if a is not None]
        return {adapter.platform: adapter.responder for adapter in adapters}

    async def start_connections(self) -> None:
        """Open the long-lived connections (Slack Socket Mode, Feishu websocket mode)."""
        if self.slack_socket is not None:
            await self.slack_socket.start()
        if self.feishu is not None:
            await self.feishu.start()

    async def close(self) -> None:
        """Stop receiving first (in-flight envelopes commit and are acknowledged), then close."""
        if self.slack_socket is not None:
            await self.slack_socket.stop()
        if self.feishu is not None:
            await self.feishu.close()


def build_platforms(settings: Settings, runtime: Runtime) -> Platforms:
    """Adapters for every configured platform, accepting into the runtime's inbox."""
    platforms = Platforms()
    slack_config = settings.slack()
    if slack_config is not None:
        platforms.slack = SlackAdapter(slack_config, accept=runtime.inbox.accept, known_thread=runtime.store.is_live)
        if slack_config.mode == "socket" and slack_config.app_token is not None:
            platforms.slack_socket = SlackSocketMode(platforms.slack, slack_config.app_token, slack_config.api_url)
    feishu_config = settings.feishu()
    if feishu_config is not None:
        # lark-oapi takes seconds to import: a deployment without Feishu does not pay for it.
        from adapters.feishu.app import FeishuAdapter

        platforms.feishu = FeishuAdapter(feishu_config, accept=runtime.inbox.accept, known_thread=runtime.store.is_live)
    runtime.responders.update(platforms.responders)
    return platforms
