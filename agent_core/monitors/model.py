"""What a monitor is, what it remembers between runs, and what an alert shows.

A monitor watches one governed metric (optionally filtered) at a time grain, per value of its
first dimension and in total, on a cron schedule read in an IANA time zone, and alerts one
chat channel. Its data is read with its creator's permissions in that channel. Monitors come
from a conversation (`create_monitor`, kept by `agent_core.monitors.store`) or from the operators' monitors
file; both share one name space.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from agent_core.analytics.inputs import Sensitivity
from agent_core.i18n import Language, t
from agent_core.messages import InboundMessage, OutboundFile, ThreadKey, utcnow

MonitorGrain = Literal["day", "week"]
MonitorOrigin = Literal["chat", "file"]
NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]{0,62}$"
MAX_DIMENSIONS = 4


class MonitorSpec(BaseModel):
    """A monitor as written: in the operators' file, or built by `create_monitor`."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., pattern=NAME_PATTERN, description="lower-case letters, digits, '-' and '_'")
    metric: str = Field(..., min_length=1, max_length=128)
    source: str | None = Field(None, max_length=64)  # needed only when several sources define it
    dimensions: list[str] = Field(default_factory=list, max_length=MAX_DIMENSIONS)
    where: str | None = Field(None, max_length=2000)
    grain: MonitorGrain = "day"
    cron: str = Field(..., min_length=1, max_length=120)
    timezone: str = Field("UTC", min_length=1, max_length=64)
    sensitivity: Sensitivity = "medium"
    platform: str = Field(..., min_length=1, max_length=32)
    workspace: str = Field(..., min_length=1, max_length=128)
    channel: str = Field(..., min_length=1, max_length=128)
    # Whose data permissions apply: the person who asked for it (an operator's file names one).
    creator: str = Field(..., min_length=1, max_length=128)
    creator_name: str | None = Field(None, max_length=255)

    @field_validator("cron")
    @classmethod
    def _one_space(cls, value: str) -> str:
        return " ".join(value.split())

    def trigger_check(self) -> None:
        """Raise ValueError when the cron expression or the time zone cannot be read."""
        from agent_core.schedules.model import parse_schedule  # loads APScheduler

        parse_schedule(self.cron, self.timezone)


class Monitor(MonitorSpec):
    """A monitor the gateway runs."""

    origin: MonitorOrigin = "chat"
    created_at: datetime = Field(default_factory=utcnow)
    # The language of the creator's message (a chat monitor); an operator's file monitor: English.
    language: Language = Language.EN


class AlertStatus(StrEnum):
    OPEN = "open"
    ACKNOWLEDGED = "acknowledged"
    MUTED = "muted"


class MonitorState(BaseModel):
    """What a monitor remembers between runs: whether it was anomalous at its last run (so an
    alert is posted only at an onset), the alert of the current episode, and its mute."""

    model_config = ConfigDict(from_attributes=True)

    name: str
    anomalous: bool = False
    last_period: str | None = None  # ISO date of the period the last run judged
    last_run_at: datetime | None = None
    alert_id: str | None = None  # the current episode's alert, while it lasts
    muted_until: datetime | None = None
    muted_by: str | None = None


class AlertView(BaseModel):
    """An alert as a platform shows it: the facts, the chart, and who acted on it."""

    id: str
    monitor: str
    platform: str
    workspace: str
    channel: str
    headline: str  # e.g. "GMV dropped: region=East China on 2026-10-20"
    facts: list[str]  # what moved, how much against the expectation
    root_cause: str | None = None
    provenance: str | None = None  # the provenance line of the data behind it
    chart: OutboundFile | None = None
    status: AlertStatus = AlertStatus.OPEN
    acted_by: str | None = None  # who acknowledged or muted it
    muted_until: datetime | None = None
    message_ref: str | None = None  # the posted message, to update it and reply in its thread
    created_at: datetime = Field(default_factory=utcnow)
    language: Language = Language.EN  # its monitor's: what the alert and its buttons are written in

    def address(self, *, in_thread: bool = False) -> InboundMessage:
        """Where the alert goes (top level in its channel) or, with ``in_thread``, its thread:
        the address a responder posts to, for a message no user sent."""
        root = f"monitor-alert-{self.id}"
        return InboundMessage(
            platform=self.platform,
            event_id=f"monitor-alert:{self.id}",
            message_id=root,
            workspace=self.workspace,
            channel=self.channel,
            thread=ThreadKey(platform=self.platform, workspace=self.workspace, channel=self.channel, root=root),
            reply_in_thread=self.message_ref if in_thread else None,
            user="",
            text="",
            locale=self.language.value,  # the responder's own words in the alert's language
            received_at=self.created_at,
        )

    def markdown(self) -> str:
        """The alert as Markdown, for platforms without buttons."""
        lines = [f"**{self.headline}**", *(f"- {fact}" for fact in self.facts)]
        if self.root_cause:
            lines.append(t(self.language, "Root cause: {cause}", cause=self.root_cause))
        if self.provenance:
            lines.append(f"_{self.provenance}_")
        return "\n".join(lines)


@dataclass(frozen=True)
class AlertClick:
    """What a click on an alert's button left: the alert as it now reads, and whether this
    click changed it (a later click changes nothing, so the posted alert needs no update)."""

    alert: AlertView
    changed: bool


class MonitorAction(StrEnum):
    """The buttons of an alert."""

    ACKNOWLEDGE = "acknowledge"
    MUTE = "mute"


class MonitorExists(Exception):
    """A monitor of that name exists already (in the database or the operators' file)."""
