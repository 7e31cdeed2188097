"""The chat platforms the gateway serves: one line each.

Each plugin module is light (settings and metadata only) and imports its SDK when it builds its
adapter, so listing a platform here costs a deployment that does not configure it nothing.
"""

from __future__ import annotations

from typing import Any

from adapters.base import Platform
from adapters.console.platform import ConsolePlatform
from adapters.feishu.platform import FeishuPlatform
from adapters.slack.platform import SlackPlatform

PLATFORMS: tuple[type[Platform[Any]], ...] = (
    SlackPlatform,
    FeishuPlatform,
    ConsolePlatform,
)
