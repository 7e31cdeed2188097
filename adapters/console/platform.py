"""The terminal as a gateway platform plugin (see `adapters.base.Platform`).

`ba-agent chat` builds it itself; `serve` lists it in its start-up line but does not build it
(it has no routes, and a worker's stdout is its supervisor's pipe, not a terminal).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic_settings import SettingsConfigDict

from adapters.base import (
    ConnectionStatus,
    CredentialStatus,
    GatewayServices,
    Handler,
    Platform,
    PlatformSettings,
    Route,
)

if TYPE_CHECKING:
    from adapters.console.responder import ConsoleResponder


class ConsoleSettings(PlatformSettings):
    """No variables: the terminal needs no credentials."""

    model_config = SettingsConfigDict(env_prefix="CONSOLE_")

    @property
    def configured(self) -> bool:
        return False  # served by `ba-agent chat`, never by `serve`

    def missing(self) -> list[str]:
        return []

    def describe(self) -> str:
        return "ba-agent chat"


class ConsoleAdapter:
    """The terminal (an `adapters.base.PlatformAdapter`): no routes, no connection."""

    def __init__(self, services: GatewayServices) -> None:
        from adapters.console.responder import ConsoleResponder  # aiohttp: only when used

        self.responder: ConsoleResponder = ConsoleResponder(services=services)

    def handler(self, route: Route) -> Handler:
        raise LookupError(f"the console has no route {route.path}")

    async def start(self) -> None:
        return None

    def status(self) -> ConnectionStatus | None:
        return None

    def credentials(self) -> CredentialStatus | None:
        return None

    async def stop(self) -> None:
        return None


class ConsolePlatform(Platform[ConsoleSettings]):
    name = "console"
    title = "Console"
    settings_class = ConsoleSettings

    def build(self, services: GatewayServices) -> ConsoleAdapter:
        return ConsoleAdapter(services)
