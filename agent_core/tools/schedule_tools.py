"""The scheduling tools: the model manages recurring reports from a conversation.

`schedule_report`, `list_schedules` and `cancel_schedule` read and change schedules through
the :class:`~agent_core.schedules.store.ScheduleStore` they are given (the gateway's scheduler
fires them). They need to know where the conversation lives (platform, workspace, thread): the
gateway sets it as the run's ``chat`` (`agent_core.run_context.ChatOrigin`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from zoneinfo import ZoneInfo

from pydantic import BaseModel, Field

from agent_core.messages import utcnow
from agent_core.run_context import RunContext, RunDeps
from agent_core.scheduled_work import DmAddress, OnChange
from agent_core.schedules.model import (
    DeliverTo,
    NewSchedule,
    Schedule,
    next_fire_times,
    parse_schedule,
    shortest_gap,
)
from agent_core.schedules.store import ScheduleStore
from agent_core.toolkit.protocol import ErrorType, Tool, ToolError
from agent_core.tools.deps import ToolDeps

MAX_PROMPT_CHARS = 4000


# --- where a conversation lives ---------------------------------------------------------------


class ConversationOrigin(BaseModel):
    """Where the conversation a tool runs in lives, as far as scheduling needs to know."""

    platform: str
    workspace: str
    channel: str
    user: str
    user_name: str | None = None
    is_dm: bool = False
    thread_root: str | None = None  # the platform thread the bot answers in, if any

    @classmethod
    def of(cls, ctx: RunDeps) -> ConversationOrigin:
        """Read it from the tool context; a ToolError outside chat conversations."""
        chat = ctx.chat
        if chat is None:
            raise ToolError(
                "Scheduled reports can only be managed from a chat conversation.",
                ErrorType.PERMISSION_DENIED,
            )
        return cls(
            platform=chat.platform,
            workspace=chat.workspace,
            channel=ctx.channel,
            user=ctx.user,
            user_name=chat.user_name,
            is_dm=ctx.is_dm,
            thread_root=chat.thread_root,
        )


# --- tool results ------------------------------------------------------------------------------


class ScheduleInfo(BaseModel):
    """A schedule as the model sees it."""

    id: int
    prompt: str
    cron: str
    timezone: str
    deliver_to: DeliverTo
    channel: str
    creator: str
    enabled: bool
    disabled_reason: str | None = None
    consecutive_failures: int
    last_run_at: datetime | None = None
    next_runs: list[datetime] = Field(description="upcoming runs, in the schedule's time zone")

    @classmethod
    def of(cls, schedule: Schedule, now: datetime, upcoming: int = 3) -> ScheduleInfo:
        zone = ZoneInfo(schedule.tz)
        next_runs = (
            [t.astimezone(zone) for t in next_fire_times(parse_schedule(schedule.cron, schedule.tz), now, upcoming)]
            if schedule.enabled
            else []
        )
        return cls(
            id=schedule.id,
            prompt=schedule.prompt,
            cron=schedule.cron,
            timezone=schedule.tz,
            deliver_to=schedule.deliver_to,
            channel=schedule.channel,
            creator=schedule.creator_name or schedule.creator,
            enabled=schedule.enabled,
            disabled_reason=schedule.disabled_reason,
            consecutive_failures=schedule.consecutive_failures,
            last_run_at=schedule.last_run_at.astimezone(zone) if schedule.last_run_at else None,
            next_runs=next_runs,
        )


class ScheduleList(BaseModel):
    schedules: list[ScheduleInfo]


class CancelResult(BaseModel):
    cancelled: bool
    schedule: ScheduleInfo
    note: str | None = None


# --- tools -------------------------------------------------------------------------------------



@dataclass(frozen=True)
class CreationLimits:
    """What one person may schedule from conversations: how often it runs, and how many."""

    min_interval: timedelta = timedelta(hours=1)
    max_per_user: int = 20


DEFAULT_LIMITS = CreationLimits()


def require_owner(
    origin: ConversationOrigin, admins: frozenset[str], creator: str, creator_name: str | None, what: str, verb: str
) -> None:
    """Only who made a scheduled thing (or an admin) may `verb` it; a ToolError for anyone else."""
    if origin.user != creator and origin.user not in admins:
        raise ToolError(
            f"{what} belongs to {creator_name or creator}; only they or an admin can {verb} it.",
            ErrorType.PERMISSION_DENIED,
        )


class ScheduleReportInput(BaseModel):
    prompt: str = Field(
        ...,
        min_length=5,
        max_length=MAX_PROMPT_CHARS,
        description="What to do at every run, written as a complete request: each run starts a "
        "fresh conversation without this one's history, e.g. 'Weekly GMV report for the last "
        "7 days by region and channel with a chart; flag anomalies and explain the largest "
        "change.'",
    )
    cron: str = Field(
        ...,
        min_length=1,
        max_length=120,
        description="Five-field cron expression: minute hour day-of-month month day-of-week. "
        "'0 9 * * mon' = Mondays 09:00; '30 8 1 * *' = the 1st of each month 08:30; "
        "'0 18 * * mon-fri' = weekdays 18:00.",
    )
    timezone: str = Field(
        ...,
        min_length=1,
        max_length=64,
        description="IANA time zone the cron is read in, e.g. Asia/Shanghai. Ask the user "
        "when it is not clear from the conversation.",
    )
    deliver_to: DeliverTo = Field(
        "channel",
        description="channel: a new post in this channel at every run (in a DM: the DM); "
        "thread: a reply in this thread; dm: the user's direct messages with the bot.",
    )


class ScheduleReportTool(Tool[ScheduleReportInput]):
    name = "schedule_report"
    description = (
        "Schedule a recurring report: the prompt runs automatically on a cron schedule (e.g. "
        "every Monday 09:00) and the answer is posted here, in this thread, or to the user's "
        "DMs. Confirm the schedule (cron, time zone, what will be sent) with the user in your "
        "answer, including the schedule's number for cancelling it."
    )
    Input = ScheduleReportInput
    timeout_s = 30.0

    def __init__(
        self,
        store: ScheduleStore,
        *,
        dm_address: DmAddress = lambda _platform, _user: None,
        on_change: OnChange | None = None,
        limits: CreationLimits = DEFAULT_LIMITS,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._store = store
        self._on_change = on_change
        self._dm_address = dm_address
        self._limits = limits
        self._clock = clock

    async def run(self, args: ScheduleReportInput, ctx: RunContext) -> ScheduleInfo:
        origin = ConversationOrigin.of(ctx)
        now = self._clock()
        cron, next_run_at = checked_schedule(args.cron, args.timezone, now, self._limits.min_interval, "reports")
        channel, thread_root, is_dm = _target(origin, args.deliver_to, self._dm_address)
        count = await self._store.count_enabled(origin.platform, origin.workspace, origin.user)
        if count >= self._limits.max_per_user:
            raise ToolError(
                f"You already have {count} scheduled reports, the most allowed; cancel one first "
                "(list_schedules shows them).",
                ErrorType.RESOURCE_ERROR,
            )
        row = await self._store.create(
            NewSchedule(
                creator=origin.user,
                creator_name=origin.user_name,
                platform=origin.platform,
                workspace=origin.workspace,
                channel=channel,
                thread_root=thread_root,
                is_dm=is_dm,
                cron=cron,
                tz=args.timezone,
                prompt=args.prompt.strip(),
                next_run_at=next_run_at,
                created_at=now,
            )
        )
        if self._on_change is not None:
            await self._on_change()  # this process schedules it at once; others on their next sync
        return ScheduleInfo.of(row, now)


def _target(origin: ConversationOrigin, deliver_to: DeliverTo, dm_address: DmAddress) -> tuple[str, str | None, bool]:
    """(channel, thread root, is DM) of the place a schedule posts to."""
    if origin.is_dm and deliver_to != "thread":
        return origin.channel, None, True
    if deliver_to == "channel":
        return origin.channel, None, False
    if deliver_to == "thread":
        if origin.thread_root is None:
            raise ToolError(
                "This conversation is not in a thread; deliver to the channel or a DM instead.",
                ErrorType.INVALID_PARAMETERS,
            )
        return origin.channel, origin.thread_root, origin.is_dm
    dm = dm_address(origin.platform, origin.user)
    if dm is None:
        raise ToolError(
            "Reports can be sent to a DM only when scheduled from that DM: ask the user to "
            "message the bot directly and schedule it there.",
            ErrorType.INVALID_PARAMETERS,
        )
    return dm, None, True


def checked_schedule(
    cron_text: str, timezone: str, now: datetime, min_interval: timedelta, kind: str
) -> tuple[str, datetime]:
    """A cron expression a user may schedule, normalized, with its next fire time: it parses in
    `timezone`, fires again, and no more often than `min_interval` (a ToolError saying what is
    wrong otherwise). `kind` names what is being scheduled in that message ("reports")."""
    cron = " ".join(cron_text.split())
    try:
        trigger = parse_schedule(cron, timezone)
    except ValueError as exc:
        raise ToolError(str(exc), ErrorType.INVALID_PARAMETERS) from None
    upcoming = next_fire_times(trigger, now, 1)
    if not upcoming:
        raise ToolError(f"{cron!r} never runs again.", ErrorType.INVALID_PARAMETERS)
    gap = shortest_gap(trigger, now)
    if gap is not None and gap < min_interval:
        raise ToolError(
            f"{cron!r} runs every {_human(gap)}; {kind} may run at most every {_human(min_interval)}.",
            ErrorType.INVALID_PARAMETERS,
        )
    return cron, upcoming[0]


def _human(gap: timedelta) -> str:
    minutes = int(gap.total_seconds() // 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, rest = divmod(minutes, 60)
    return f"{hours} h" + (f" {rest} min" if rest else "")


class ListSchedulesInput(BaseModel):
    include_cancelled: bool = Field(False, description="Also list cancelled or switched-off schedules.")
    all_users: bool = Field(
        False, description="Admins only: list everyone's schedules in this workspace."
    )


class ListSchedulesTool(Tool[ListSchedulesInput]):
    name = "list_schedules"
    description = (
        "List the user's scheduled reports in this workspace: number, prompt, cron and time "
        "zone, where they are posted, next runs and recent failures."
    )
    Input = ListSchedulesInput
    timeout_s = 30.0
    idempotent = True
    concurrency_safe = True

    def __init__(
        self, store: ScheduleStore, admins: Iterable[str] = (), *, clock: Callable[[], datetime] = utcnow
    ) -> None:
        self._store = store
        self._admins = frozenset(admins)
        self._clock = clock

    async def run(self, args: ListSchedulesInput, ctx: RunContext) -> ScheduleList:
        origin = ConversationOrigin.of(ctx)
        if args.all_users and origin.user not in self._admins:
            raise ToolError("Only admins can list everyone's schedules.", ErrorType.PERMISSION_DENIED)
        rows = await self._store.in_workspace(
            origin.platform,
            origin.workspace,
            None if args.all_users else origin.user,
            include_disabled=args.include_cancelled,
        )
        now = self._clock()
        return ScheduleList(schedules=[ScheduleInfo.of(row, now) for row in rows])


class CancelScheduleInput(BaseModel):
    schedule_id: int = Field(..., ge=1, description="The schedule's number (list_schedules).")


class CancelScheduleTool(Tool[CancelScheduleInput]):
    name = "cancel_schedule"
    description = (
        "Cancel a scheduled report by its number. Only the person who scheduled it (or an "
        "admin) can cancel it."
    )
    Input = CancelScheduleInput
    timeout_s = 30.0

    def __init__(
        self,
        store: ScheduleStore,
        admins: Iterable[str] = (),
        *,
        on_change: OnChange | None = None,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._store = store
        self._admins = frozenset(admins)
        self._on_change = on_change
        self._clock = clock

    async def run(self, args: CancelScheduleInput, ctx: RunContext) -> CancelResult:
        origin = ConversationOrigin.of(ctx)
        row = await self._store.get(args.schedule_id)
        if row is None or (row.platform, row.workspace) != (origin.platform, origin.workspace):
            raise ToolError(
                f"There is no scheduled report #{args.schedule_id} in this workspace.",
                ErrorType.INVALID_PARAMETERS,
            )
        require_owner(origin, self._admins, row.creator, row.creator_name, f"Scheduled report #{args.schedule_id}", "cancel")
        now = self._clock()
        if not row.enabled:
            return CancelResult(cancelled=False, schedule=ScheduleInfo.of(row, now), note="already off")
        reason = f"cancelled by {origin.user_name or origin.user}"
        await self._store.disable(args.schedule_id, reason)
        if self._on_change is not None:
            await self._on_change()
        row.enabled, row.disabled_reason = False, reason
        return CancelResult(cancelled=True, schedule=ScheduleInfo.of(row, now))


def build(deps: ToolDeps) -> list[Tool]:
    """The three scheduling tools, sharing one store, admin list and change callback (none
    without the scheduled work of a running service)."""
    work = deps.scheduled
    if work is None:
        return []
    return [
        ScheduleReportTool(work.schedules, dm_address=work.dm_address, on_change=work.on_schedules_change),
        ListSchedulesTool(work.schedules, work.admins),
        CancelScheduleTool(work.schedules, work.admins, on_change=work.on_schedules_change),
    ]
