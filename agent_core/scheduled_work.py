"""`ScheduledWork`: what a running service lends the conversation's scheduling and monitor
tools -- the stores of schedules and monitors, who administers them, and how the running
scheduler hears of a change."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent_core.monitors.store import MonitorStore
    from agent_core.schedules.store import ScheduleStore

OnChange = Callable[[], Awaitable[None]]
DmAddress = Callable[[str, str], str | None]  # (platform, user) → the DM's channel, if addressable


@dataclass(frozen=True)
class ScheduledWork:
    """What the scheduling and monitor tools need from the process that runs the schedules.

    ``dm_address(platform, user)`` is the channel of `user`'s DM where the platform can address
    one by user (the platform's responder knows); the ``on_*_change`` callbacks let the running
    scheduler pick up what a conversation created or cancelled.
    """

    schedules: ScheduleStore
    monitors: MonitorStore
    admins: frozenset[str] = frozenset()
    dm_address: DmAddress = lambda _platform, _user: None
    on_schedules_change: OnChange | None = None
    on_monitors_change: OnChange | None = None
