"""Scheduled reports: "send me this every Monday at 9:00".

A schedule is a row of ``report_schedules``: a five-field cron expression read in an IANA time
zone, the prompt to run, who asked, and where the result goes. The `Scheduler`
(gateway/scheduler.py) turns each enabled row into a job; at fire time the prompt enters the
durable inbox like a user message, into a fresh conversation, and the dispatcher answers it.

The tools `schedule_report`, `list_schedules` and `cancel_schedule` let the model manage them
from a conversation. They need to know where that conversation lives (platform, workspace,
thread): the gateway passes it in ``ToolContext.extras`` (see `conversation_extras`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from apscheduler.triggers.cron import CronTrigger
from pydantic import BaseModel, Field, ValidationError
from sqlalchemy import func, update
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel import col, select
from sqlmodel.ext.asyncio.session import AsyncSession

from agent_core.messages import InboundMessage, ThreadKey, utcnow
from agent_core.tools.base import ErrorType, Tool, ToolContext, ToolError
from gateway.tables import ReportScheduleRow

ORIGIN_KEY = "conversation"  # the ToolContext.extras entry the gateway fills
MAX_PROMPT_CHARS = 4000
DeliverTo = Literal["channel", "thread", "dm"]


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
    def of(cls, ctx: ToolContext) -> ConversationOrigin:
        """Read it from the tool context; a ToolError outside chat conversations."""
        try:
            return cls.model_validate(
                {"channel": ctx.channel, "user": ctx.user, "is_dm": ctx.is_dm, **ctx.extras[ORIGIN_KEY]}
            )
        except (KeyError, ValidationError):
            raise ToolError(
                "Scheduled reports can only be managed from a chat conversation.",
                ErrorType.PERMISSION_DENIED,
            ) from None


def conversation_extras(msg: InboundMessage) -> dict[str, Any]:
    """The ``ToolContext.extras`` the scheduling tools need, for a message being answered."""
    origin = {
        "platform": msg.platform,
        "workspace": msg.workspace,
        "user_name": msg.user_name,
        "thread_root": msg.reply_in_thread,
    }
    return {ORIGIN_KEY: origin}


# --- validation --------------------------------------------------------------------------------


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


# --- the store ---------------------------------------------------------------------------------


class ScheduleStore:
    """Report schedules in the database."""

    def __init__(self, sessions: async_sessionmaker[AsyncSession]) -> None:
        self._sessions = sessions

    async def create(self, row: ReportScheduleRow) -> ReportScheduleRow:
        async with self._sessions() as session:
            session.add(row)
            await session.commit()
            await session.refresh(row)
        return row

    async def get(self, schedule_id: int) -> ReportScheduleRow | None:
        async with self._sessions() as session:
            return await session.get(ReportScheduleRow, schedule_id)

    async def enabled(self) -> list[ReportScheduleRow]:
        """Every schedule that should run."""
        async with self._sessions() as session:
            rows = await session.exec(
                select(ReportScheduleRow).where(ReportScheduleRow.enabled).order_by(col(ReportScheduleRow.id))
            )
            return list(rows.all())

    async def in_workspace(
        self, platform: str, workspace: str, creator: str | None, *, include_disabled: bool
    ) -> list[ReportScheduleRow]:
        """Schedules of one chat workspace, of one creator unless ``creator`` is None."""
        stmt = select(ReportScheduleRow).where(
            ReportScheduleRow.platform == platform, ReportScheduleRow.workspace == workspace
        )
        if creator is not None:
            stmt = stmt.where(ReportScheduleRow.creator == creator)
        if not include_disabled:
            stmt = stmt.where(ReportScheduleRow.enabled)
        async with self._sessions() as session:
            return list((await session.exec(stmt.order_by(col(ReportScheduleRow.id)))).all())

    async def count_enabled(self, platform: str, workspace: str, creator: str) -> int:
        stmt = select(func.count()).where(
            ReportScheduleRow.platform == platform,
            ReportScheduleRow.workspace == workspace,
            ReportScheduleRow.creator == creator,
            ReportScheduleRow.enabled,
        )
        async with self._sessions() as session:
            return (await session.exec(stmt)).one()

    async def disable(self, schedule_id: int, reason: str) -> None:
        async with self._sessions() as session:
            await session.exec(
                update(ReportScheduleRow)
                .where(col(ReportScheduleRow.id) == schedule_id)
                .values(enabled=False, disabled_reason=reason)
            )
            await session.commit()

    async def record_fire(self, schedule_id: int, fire_time: datetime, next_run_at: datetime | None) -> None:
        async with self._sessions() as session:
            await session.exec(
                update(ReportScheduleRow)
                .where(col(ReportScheduleRow.id) == schedule_id)
                .values(last_run_at=fire_time, next_run_at=next_run_at)
            )
            await session.commit()


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
    def of(cls, row: ReportScheduleRow, now: datetime, upcoming: int = 3) -> ScheduleInfo:
        assert row.id is not None
        zone = ZoneInfo(row.tz)
        next_runs = (
            [t.astimezone(zone) for t in next_fire_times(parse_schedule(row.cron, row.tz), now, upcoming)]
            if row.enabled
            else []
        )
        return cls(
            id=row.id,
            prompt=row.prompt,
            cron=row.cron,
            timezone=row.tz,
            deliver_to=deliver_to_of(row),
            channel=row.channel,
            creator=row.creator_name or row.creator,
            enabled=row.enabled,
            disabled_reason=row.disabled_reason,
            consecutive_failures=row.consecutive_failures,
            last_run_at=row.last_run_at.astimezone(zone) if row.last_run_at else None,
            next_runs=next_runs,
        )


def deliver_to_of(row: ReportScheduleRow) -> DeliverTo:
    if row.is_dm:
        return "dm"
    return "thread" if row.thread_root else "channel"


class ScheduleList(BaseModel):
    schedules: list[ScheduleInfo]


class CancelResult(BaseModel):
    cancelled: bool
    schedule: ScheduleInfo
    note: str | None = None


# --- tools -------------------------------------------------------------------------------------

OnChange = Callable[[], Awaitable[None]]
DmAddress = Callable[[str, str], str | None]  # (platform, user) → the DM's channel, if addressable


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
        min_interval: timedelta = timedelta(hours=1),
        max_per_user: int = 20,
        clock: Callable[[], datetime] = utcnow,
    ) -> None:
        self._store = store
        self._on_change = on_change
        self._dm_address = dm_address
        self._min_interval = min_interval
        self._max_per_user = max_per_user
        self._clock = clock

    async def run(self, args: ScheduleReportInput, ctx: ToolContext) -> ScheduleInfo:
        origin = ConversationOrigin.of(ctx)
        cron = " ".join(args.cron.split())
        try:
            trigger = parse_schedule(cron, args.timezone)
        except ValueError as exc:
            raise ToolError(str(exc), ErrorType.INVALID_PARAMETERS) from None
        now = self._clock()
        gap = shortest_gap(trigger, now)
        upcoming = next_fire_times(trigger, now, 1)
        if not upcoming:
            raise ToolError(f"{cron!r} never runs again.", ErrorType.INVALID_PARAMETERS)
        if gap is not None and gap < self._min_interval:
            raise ToolError(
                f"{cron!r} runs every {_human(gap)}; reports may run at most every "
                f"{_human(self._min_interval)}.",
                ErrorType.INVALID_PARAMETERS,
            )
        channel, thread_root, is_dm = _target(origin, args.deliver_to, self._dm_address)
        count = await self._store.count_enabled(origin.platform, origin.workspace, origin.user)
        if count >= self._max_per_user:
            raise ToolError(
                f"You already have {count} scheduled reports, the most allowed; cancel one first "
                "(list_schedules shows them).",
                ErrorType.RESOURCE_ERROR,
            )
        row = await self._store.create(
            ReportScheduleRow(
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
                next_run_at=upcoming[0],
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

    async def run(self, args: ListSchedulesInput, ctx: ToolContext) -> ScheduleList:
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

    async def run(self, args: CancelScheduleInput, ctx: ToolContext) -> CancelResult:
        origin = ConversationOrigin.of(ctx)
        row = await self._store.get(args.schedule_id)
        if row is None or (row.platform, row.workspace) != (origin.platform, origin.workspace):
            raise ToolError(
                f"There is no scheduled report #{args.schedule_id} in this workspace.",
                ErrorType.INVALID_PARAMETERS,
            )
        if origin.user != row.creator and origin.user not in self._admins:
            raise ToolError(
                f"Scheduled report #{args.schedule_id} belongs to {row.creator_name or row.creator}; "
                "only they or an admin can cancel it.",
                ErrorType.PERMISSION_DENIED,
            )
        now = self._clock()
        if not row.enabled:
            return CancelResult(cancelled=False, schedule=ScheduleInfo.of(row, now), note="already off")
        reason = f"cancelled by {origin.user_name or origin.user}"
        await self._store.disable(args.schedule_id, reason)
        if self._on_change is not None:
            await self._on_change()
        row.enabled, row.disabled_reason = False, reason
        return CancelResult(cancelled=True, schedule=ScheduleInfo.of(row, now))


def schedule_tools(
    store: ScheduleStore,
    admins: Iterable[str] = (),
    *,
    dm_address: DmAddress = lambda _platform, _user: None,
    on_change: OnChange | None = None,
) -> list[Tool]:
    """The three scheduling tools, sharing one store, admin list and change callback.

    `dm_address(platform, user)` is the channel of `user`'s DM where the platform can address
    one by user (the platform's responder knows); None restricts DM delivery to schedules made
    inside the DM.
    """
    admin_ids = frozenset(admins)
    return [
        ScheduleReportTool(store, dm_address=dm_address, on_change=on_change),
        ListSchedulesTool(store, admin_ids),
        CancelScheduleTool(store, admin_ids, on_change=on_change),
    ]


# --- the messages a schedule sends -------------------------------------------------------------


def fire_stamp(fire_time: datetime) -> str:
    """A compact ISO 8601 UTC stamp of a fire time, safe inside ids and thread keys."""
    return fire_time.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def report_message(row: ReportScheduleRow, fire_time: datetime) -> InboundMessage:
    """The inbound message of one run: a fresh conversation at the schedule's target.

    The ids derive from (schedule, fire time) alone, so firing twice is deduplicated by the
    inbox; with ``reply_in_thread`` None the answer is a top-level post (or DM message).
    """
    stamp = fire_stamp(fire_time)
    root = f"schedule-{row.id}-{stamp}"
    text = (
        f"[Scheduled report #{row.id} ({row.cron}, {row.tz}). It runs automatically: nobody "
        "can answer questions now, so state your assumptions and deliver the result.]\n\n"
        f"{row.prompt}"
    )
    return InboundMessage(
        platform=row.platform,
        event_id=report_event_id(row.id, fire_time),
        message_id=root,
        workspace=row.workspace,
        channel=row.channel,
        thread=ThreadKey(platform=row.platform, workspace=row.workspace, channel=row.channel, root=root),
        reply_in_thread=row.thread_root,
        user=row.creator,
        user_name=row.creator_name,
        text=text,
        is_dm=row.is_dm,
        received_at=fire_time,
    )


def report_event_id(schedule_id: int | None, fire_time: datetime) -> str:
    """The platform-level event id of a run (the inbox stores it as ``<platform>:<id>``)."""
    return f"schedule:{schedule_id}:{fire_stamp(fire_time)}"


def notice_message(row: ReportScheduleRow, now: datetime, creator_dm: str | None) -> InboundMessage:
    """An address for a notice to the schedule's creator: their DM (`creator_dm`, where the
    platform can address one by user) or the schedule's own DM, else the schedule's target."""
    dm = row.channel if row.is_dm else creator_dm
    channel = dm or row.channel
    root = f"schedule-{row.id}-notice-{fire_stamp(now)}"
    return InboundMessage(
        platform=row.platform,
        event_id=f"schedule-notice:{row.id}:{fire_stamp(now)}",
        message_id=root,
        workspace=row.workspace,
        channel=channel,
        thread=ThreadKey(platform=row.platform, workspace=row.workspace, channel=channel, root=root),
        reply_in_thread=None if dm else row.thread_root,
        user=row.creator,
        user_name=row.creator_name,
        text="",
        is_dm=dm is not None,
        received_at=now,
    )
