"""Slack's agent surface: agent sessions (status, the native Stop button) and the AI-app
container's assistant threads (suggested prompts, titles, a status line).

A workspace or app without these features refuses the methods; the first refusal of each is
logged once and the method is not called again by this process, so answers go on without it.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
from slack_sdk.errors import SlackApiError
from slack_sdk.web.async_client import AsyncWebClient

from adapters.slack.installations import WorkspaceNotInstalled

log = logging.getLogger(__name__)

# Errors that say the surface is not there (rather than a passing failure).
UNAVAILABLE = frozenset(
    {
        "unknown_method",
        "not_allowed",
        "not_allowed_token_type",
        "missing_scope",
        "feature_not_enabled",
        "team_access_not_granted",
        "method_not_supported_for_channel_type",
        "not_an_agent",
        "invalid_auth",
    }
)
TITLE_CHARS = 60
MAX_SUGGESTED_PROMPTS = 4


def conversation_title(text: str) -> str:
    """A conversation's title from its first question: the first line, shortened."""
    line = next((part.strip() for part in text.splitlines() if part.strip()), "")
    return line if len(line) <= TITLE_CHARS else line[: TITLE_CHARS - 1].rstrip() + "…"


class AgentSurface:
    """Calls to the optional agent-surface methods; never raises."""

    def __init__(self, web: Callable[[str], Awaitable[AsyncWebClient]]) -> None:
        self._web = web  # the client that answers in a workspace
        self._unavailable: set[tuple[str, str]] = set()  # (workspace, method)

    def available(self, workspace: str, method: str) -> bool:
        return (workspace, method) not in self._unavailable

    async def call(self, workspace: str, method: str, **params: Any) -> bool:
        """Call `method` in `workspace` with the parameters that are not None; False when it
        did not happen."""
        if (workspace, method) in self._unavailable:
            return False
        try:
            web = await self._web(workspace)
            await web.api_call(method, json={k: v for k, v in params.items() if v is not None})
        except WorkspaceNotInstalled:
            return False
        except SlackApiError as exc:
            error = exc.response.get("error")
            if error in UNAVAILABLE:
                self._unavailable.add((workspace, method))
                log.info("slack %s is unavailable in %s (%s): continuing without it", method, workspace, error)
            else:
                log.debug("slack %s failed: %s", method, error)
            return False
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.debug("slack %s failed: %s", method, type(exc).__name__)
            return False
        return True
