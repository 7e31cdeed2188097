"""The configured chat platforms: their adapters, built the same way in every process.

They are built on the `Stores`, before the `Runtime`, which gets their responders. The serve
process mounts their routes and opens their long connections; a worker process only uses their
responders to answer. Platforms are the plugins `load_settings` read (`adapters.registry`);
none is known here by name.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import partial
from types import MappingProxyType
from typing import Any

from adapters.base import ConnectionStatus, CredentialStatus, GatewayServices, Platform, PlatformAdapter, Responder
from agent_core.catalog.learned import LearnedExamples
from agent_core.i18n import Language
from gateway.config import Settings
from gateway.jobs.monitors import alert_actions
from gateway.service.feedback import Feedback, FeedbackStore
from gateway.service.runtime import Stores


def gateway_services(stores: Stores, responders: Mapping[str, Responder]) -> GatewayServices:
    """What an adapter gets from the gateway: the inbox to commit to and ask about live threads;
    `responders` are the platforms' own, for feedback to ask data owners on theirs."""
    return GatewayServices(
        accept=stores.inbox.accept,
        is_live=stores.inbox.thread_is_live,
        approvals=stores.approvals.get,
        monitor_actions=alert_actions(stores.monitors),
        engine=stores.engine,
        feedback=Feedback(
            FeedbackStore(stores.engine),
            LearnedExamples(stores.sessions),
            stores.settings.access_policy,
            responders,
        ),
        suggested_prompts=partial(suggested_prompts, stores.settings),
    )


async def suggested_prompts(
    settings: Settings, platform: str, user: str, channel: str, language: Language
) -> list[str]:
    """The operator's `BA_SUGGESTED_PROMPTS`, else questions about the governed metrics the
    person may see in a DM with the bot (what their own access opens)."""
    if settings.suggested_prompts:
        return list(settings.suggested_prompts)
    from agent_core.governance.audience import Identity
    from agent_core.suggestions import metric_prompts

    identity = Identity(platform=platform, user=user, channel=channel, is_dm=True)
    return await asyncio.to_thread(metric_prompts, settings, identity, language)


@dataclass(frozen=True)
class Platforms:
    """The adapters of the configured platforms and their responders, by platform name."""

    adapters: Mapping[str, PlatformAdapter]
    responders: Mapping[str, Responder]

    @property
    def connections(self) -> dict[str, Callable[[], ConnectionStatus | None]]:
        """Each adapter's connection status, for /readyz (None where it has no connection)."""
        return {name: adapter.status for name, adapter in self.adapters.items()}

    @property
    def credentials(self) -> dict[str, Callable[[], CredentialStatus | None]]:
        """Each adapter's start-up credential check, for /readyz (None where it has none)."""
        return {name: adapter.credentials for name, adapter in self.adapters.items()}

    async def start_connections(self) -> None:
        """Open the long-lived connections of the modes that have one."""
        for adapter in self.adapters.values():
            await adapter.start()

    async def close(self) -> None:
        """Stop receiving: in-flight events commit and are acknowledged first."""
        for adapter in self.adapters.values():
            await adapter.stop()


def configured(settings: Settings) -> list[Platform[Any]]:
    """The platforms whose settings enable them."""
    return [platform for platform in settings.platforms if platform.settings.configured]


def build_platforms(stores: Stores, plugins: Iterable[Platform[Any]]) -> Platforms:
    """Adapters for `plugins` (`configured` ones, or the console), accepting into the inbox."""
    adapters: dict[str, PlatformAdapter] = {}
    responders: dict[str, Responder] = {}
    # Feedback on one platform may ask a data owner on another, built after it: the services
    # see the responders read-only, complete before any adapter receives an event.
    services = gateway_services(stores, MappingProxyType(responders))
    for platform in plugins:
        adapter = platform.build(services)
        adapters[platform.name] = adapter
        responders[platform.name] = adapter.responder
    return Platforms(MappingProxyType(adapters), MappingProxyType(responders))
