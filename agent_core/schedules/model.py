"""What a scheduled report is, and how its cron expression is read.

A schedule is a five-field cron expression read in an IANA time zone, the prompt to run, who
asked, and where the result goes. `agent_core.schedules.store` keeps them; the scheduling
tools (`agent_core.tools.schedule_tools`) make them in conversations and the gateway's
scheduler (`gateway.jobs.scheduler`) fires them. Monitors read their cron the same way.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.cron import CronTrigger
from pydantic import BaseModel, ConfigDict, Field

from agent_core.messages import utcnow

DeliverTo = Literal["channel", "thread", "dm"]


class NewSchedule(BaseModel):
    """A schedule to store: who asked, where it posts, and when it runs."""

    creator: str  # platform user id
    creator_name: str | None = None
    platform: str
    workspace: str
    channel: str  # the DM's channel for DMs
    thread_root: str | None = None  # None: a top-level post
    is_dm: bool = False
    cron: str  # five fields: minute hour day-of-month month day-of-week
    tz: str  # IANA name the cron fields are read in
    prompt: str
    next_run_at: datetime | None = None
    created_at: datetime = Field(default_factory=utcnow)


class Schedule(NewSchedule):
    """A stored schedule, with what its runs have done to it."""

    model_config = ConfigDict(from_attributes=True)

    id: int
    enabled: bool = True
    disabled_reason: str | None = None
    consecutive_failures: int = 0
    last_run_at: datetime | None = None

    @property
    def deliver_to(self) -> DeliverTo:
        if self.is_dm:
            return "dm"
        return "thread" if self.thread_root else "channel"


# --- reading a cron expression ---------------------------------------------------------------


def parse_schedule(cron: str, tz: str) -> CronTrigger:
    """The trigger for a five-field cron expression in an IANA time zone; ValueError if invalid."""
    try:
        zone = ZoneInfo(tz)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(
            f"unknown time zone {tz!r}: use an IANA name such as Asia/Shanghai or Europe/Berlin"
        ) from None
    try:
        return CronTrigger.from_crontab(cron, timezone=zone)
    except ValueError as exc:
        raise ValueError(
            f"invalid cron expression {cron!r} ({exc}); use five fields: minute hour "
            "day-of-month month day-of-week, e.g. '0 9 * * mon' for Mondays at 09:00"
        ) from None


def next_fire_times(trigger: CronTrigger, after: datetime, count: int) -> list[datetime]:
    """The next ``count`` fire times strictly after ``after`` (fewer if the schedule ends)."""
    times: list[datetime] = []
    previous: datetime | None = None
    now = after + timedelta(microseconds=1)
    while len(times) < count:
        fire = trigger.get_next_fire_time(previous, now)
        if fire is None:
            break
        times.append(fire)
        previous, now = fire, fire + timedelta(microseconds=1)
    return times


def shortest_gap(trigger: CronTrigger, after: datetime, samples: int = 50) -> timedelta | None:
    """The shortest interval between the next ``samples`` fire times (None: fewer than two)."""
    times = next_fire_times(trigger, after, samples)
    gaps = [b - a for a, b in zip(times, times[1:], strict=False)]
    return min(gaps) if gaps else None
