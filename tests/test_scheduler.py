# Over 600 lines: the scheduler's jobs and report runs, one behaviour per test.
"""The scheduler on SQLite and PostgreSQL: each run claimed once across processes, the data-file
cleanup, scheduled reports (tools, firing into the inbox, failure counting) and idle marking.

Jobs are driven by calling `Scheduler.run` with explicit fire times; two tests let APScheduler
itself fire, with triggers due within a second or two, and one has the running gateway answer
a fired report.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from apscheduler.triggers.cron import CronTrigger
from sqlalchemy import func, select, update
from sqlalchemy.ext.asyncio import AsyncEngine

from agent_core.config import AgentConfig
from agent_core.messages import InboundMessage, OutboundReply, ThreadKey, utcnow
from agent_core.monitors.store import MonitorStore
from agent_core.run_context import ChatOrigin, RunContext
from agent_core.scheduled_work import ScheduledWork
from agent_core.schedules.model import NewSchedule, Schedule
from agent_core.schedules.store import ScheduleStore
from agent_core.store.db import create_engine, session_factory
from agent_core.store.tables import ThreadRow
from agent_core.store.threads import ThreadStore
from agent_core.toolkit.pipeline import ToolPipeline
from agent_core.toolkit.protocol import ErrorType, ToolError
from agent_core.tools import schedule_tools
from agent_core.tools.deps import ToolDeps
from agent_core.tools.schedule_tools import (
    CancelScheduleInput,
    CancelScheduleTool,
    CreationLimits,
    ListSchedulesInput,
    ListSchedulesTool,
    ScheduleInfo,
    ScheduleReportInput,
    ScheduleReportTool,
)
from gateway.jobs.cleanup import CleanupConfig, cleanup_data_files
from gateway.jobs.cron import latest_fire_time
from gateway.jobs.report_messages import report_message
from gateway.jobs.scheduler import Scheduler, SchedulerConfig, report_job_id
from gateway.service.inbox import Inbox
from gateway.tables import (
    DataFileRow,
    EventStatus,
    InboundEventRow,
    ScheduledRunRow,
)
from tests.fakes.anthropic_api import FakeAnthropic, Reply, text
from tests.fakes.slack_api import FakeSlack
from tests.harness import gateway_settings, running_gateway
from tests.waiting import Deadline, eventually

MONDAY_9 = datetime(2026, 11, 23, 8, 0, tzinfo=UTC)  # 09:00 in Europe/Berlin


class FakeResponder:
    """Records what the scheduler posts directly (failure notices)."""

    platform = "slack"

    def __init__(self) -> None:
        self.delivered: list[tuple[InboundMessage, OutboundReply, str]] = []

    async def deliver(
        self, msg: InboundMessage, reply: OutboundReply, delivery_id: str, *, resumed: bool = False
    ) -> None:
        self.delivered.append((msg, reply, delivery_id))

    def mention(self, user: str) -> str:
        return f"@{user} "

    async def user_locale(self, user: str, workspace: str) -> str | None:
        return None

    def dm_address(self, user: str) -> str | None:
        return f"dm-{user}"


def dm_on_slack_only(platform: str, user: str) -> str | None:
    """DM addressing as the platforms' responders give it: Slack by user id, Feishu not at all."""
    return user if platform == "slack" else None


@dataclass
class Process:
    """One gateway process's view: its own engine, inbox and scheduler."""

    engine: AsyncEngine
    inbox: Inbox
    store: ScheduleStore
    scheduler: Scheduler
    responder: FakeResponder = field(default_factory=FakeResponder)


@asynccontextmanager
async def process(database_url: str, data_dir: Path, config: SchedulerConfig | None = None) -> AsyncIterator[Process]:
    engine = create_engine(database_url)
    inbox = Inbox(engine)
    store = ScheduleStore(session_factory(engine))
    responder = FakeResponder()
    scheduler = Scheduler(engine, inbox, store, {"slack": responder}, data_dir, config)  # type: ignore[dict-item]
    try:
        yield Process(engine, inbox, store, scheduler, responder)
    finally:
        await scheduler.stop()
        await inbox.close()
        await engine.dispose()


async def count(engine: AsyncEngine, table: type, *where: Any) -> int:
    async with engine.connect() as conn:
        return (await conn.execute(select(func.count()).select_from(table).where(*where))).scalar_one()


async def new_schedule(store: ScheduleStore, **values: Any) -> Schedule:
    row = {
        "creator": "U1",
        "creator_name": "Ann",
        "platform": "slack",
        "workspace": "T1",
        "channel": "C1",
        "cron": "0 9 * * mon",
        "tz": "Europe/Berlin",
        "prompt": "Weekly GMV by region",
        **values,
    }
    return await store.create(NewSchedule(**row))


# --- the per-run claim -----------------------------------------------------------------------


async def test_two_processes_firing_a_report_at_once_enqueue_it_once(database_url: str, tmp_path: Path) -> None:
    async with process(database_url, tmp_path) as a, process(database_url, tmp_path) as b:
        schedule = await new_schedule(a.store)
        assert schedule.id is not None
        job = report_job_id(schedule.id)
        await a.scheduler.refresh()
        await b.scheduler.refresh()

        ran = await asyncio.gather(a.scheduler.run(job, MONDAY_9), b.scheduler.run(job, MONDAY_9))
        assert sorted(ran) == [False, True]
        assert not await a.scheduler.run(job, MONDAY_9)  # a late third firing: claimed already

        async with a.engine.connect() as conn:
            events = (await conn.execute(select(InboundEventRow))).all()
        assert len(events) == 1
        event = events[0]
        assert event.event_id == f"slack:schedule:{schedule.id}:20261123T080000Z"
        msg = InboundMessage.model_validate_json(event.payload)
        assert msg.thread == ThreadKey(
            platform="slack", workspace="T1", channel="C1", root=f"schedule-{schedule.id}-20261123T080000Z"
        )
        assert msg.reply_in_thread is None and not msg.is_dm and msg.user == "U1"
        assert msg.text.endswith("Weekly GMV by region") and "runs automatically" in msg.text
        assert await count(a.engine, ScheduledRunRow) == 1

        stored = await a.store.get(schedule.id)
        assert stored is not None and stored.last_run_at == MONDAY_9
        assert stored.next_run_at == MONDAY_9 + timedelta(days=7)

        # The next week is a new run; the inbox also refuses the same run's event twice.
        assert await b.scheduler.run(job, MONDAY_9 + timedelta(days=7))
        assert await count(a.engine, InboundEventRow) == 2
        assert (await a.inbox.accept(report_message(stored, MONDAY_9))).value == "duplicate"


async def test_maintenance_jobs_are_claimed_once_too(database_url: str, tmp_path: Path) -> None:
    async with process(database_url, tmp_path) as a, process(database_url, tmp_path) as b:
        at = datetime(2026, 11, 23, 10, 17, tzinfo=UTC)
        ran = await asyncio.gather(*(p.scheduler.run(job, at) for p in (a, b) for job in ("cleanup", "idle-threads")))
        assert sum(ran) == 2
        async with a.engine.connect() as conn:
            rows = (await conn.execute(select(ScheduledRunRow.job_id, ScheduledRunRow.status))).all()
        assert sorted(rows) == [("cleanup", "done"), ("idle-threads", "done")]


async def test_apscheduler_fires_each_second_once_across_two_schedulers(database_url: str, tmp_path: Path) -> None:
    fired: list[tuple[str, datetime]] = []

    def body(name: str) -> Callable[[datetime], Any]:
        async def record(fire_time: datetime) -> None:
            fired.append((name, fire_time))

        return record

    async with process(database_url, tmp_path) as a, process(database_url, tmp_path) as b:
        for name, proc in (("a", a), ("b", b)):
            proc.scheduler.add_job("tick", CronTrigger(second="*", timezone=UTC), body(name))
            proc.scheduler.start()
        await asyncio.sleep(2.5)
        await eventually(lambda: len(fired) >= 2, 10, "two firings")
        await a.scheduler.stop()
        await b.scheduler.stop()

    times = [t for _, t in fired]
    assert len(times) >= 2
    assert len(set(times)) == len(times)  # no second ran twice
    assert all(t.microsecond == 0 for t in times)


async def test_a_report_due_during_a_restart_runs_once_when_schedulers_start(
    database_url: str, tmp_path: Path
) -> None:
    now = utcnow()
    due = now.replace(second=0, microsecond=0)
    async with process(database_url, tmp_path) as a, process(database_url, tmp_path) as b:
        schedule = await new_schedule(a.store, cron="* * * * *", tz="UTC", next_run_at=due)
        a.scheduler.start()
        b.scheduler.start()
        deadline = Deadline(10)
        while not await count(a.engine, InboundEventRow) and not deadline.passed():
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # a second firing, if there were one, would show up by now
        async with a.engine.connect() as conn:
            event_ids = list((await conn.execute(select(InboundEventRow.event_id))).scalars())
    assert event_ids
    assert all(e.startswith(f"slack:schedule:{schedule.id}:") for e in event_ids)
    assert len(set(event_ids)) == len(event_ids)


def test_latest_fire_time_is_the_scheduled_time() -> None:
    trigger = CronTrigger.from_crontab("0 9 * * mon", timezone="Europe/Berlin")
    grace = timedelta(minutes=5)
    assert latest_fire_time(trigger, MONDAY_9 + timedelta(seconds=2), grace) == MONDAY_9
    assert latest_fire_time(trigger, MONDAY_9 - timedelta(seconds=1), grace) is None
    assert latest_fire_time(trigger, MONDAY_9 + timedelta(minutes=6), grace) is None
    every_minute = CronTrigger.from_crontab("* * * * *", timezone=UTC)
    assert latest_fire_time(every_minute, MONDAY_9 + timedelta(minutes=3, seconds=1), grace) == MONDAY_9 + timedelta(minutes=3)


# --- data-file cleanup -----------------------------------------------------------------------

NOW = datetime(2030, 1, 15, 12, 0, tzinfo=UTC)


def put(data_dir: Path, thread: str, vpath: str, size: int, age: timedelta, *, accessed: timedelta | None = None) -> Path:
    path = data_dir / "workspaces" / thread / vpath.lstrip("/")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"x" * size)
    modified = (NOW - age).timestamp()
    os.utime(path, (((NOW - accessed).timestamp() if accessed else modified), modified))
    return path


async def threads(engine: AsyncEngine, *, active: int, idle: int, archived: int = 0) -> list[str]:
    """Thread ids: `active` updated an hour before NOW, the others days before."""
    store = ThreadStore(session_factory(engine))
    ids = [
        await store.open(ThreadKey(platform="slack", workspace="T1", channel="C1", root=f"{i}.0"))
        for i in range(active + idle + archived)
    ]
    async with engine.begin() as conn:
        for i, thread_id in enumerate(ids):
            recent = i < active or i >= active + idle
            values: dict[str, Any] = {"updated_at": NOW - (timedelta(hours=1) if recent else timedelta(days=3))}
            if i >= active + idle:
                values["archived_at"] = NOW - timedelta(hours=2)
            await conn.execute(update(ThreadRow).where(ThreadRow.id == thread_id).values(**values))
    return ids


async def indexed(engine: AsyncEngine) -> dict[str, tuple[int, str | None]]:
    async with engine.connect() as conn:
        rows = await conn.execute(select(DataFileRow.path, DataFileRow.size_bytes, DataFileRow.thread_id))
        return {path: (size, thread) for path, size, thread in rows}


async def test_cleanup_removes_expired_files_except_those_of_active_conversations(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    live, idle, archived = await threads(engine, active=1, idle=1, archived=1)
    old, fresh = timedelta(hours=30), timedelta(hours=2)
    expired = put(data, idle, "/data/old.csv", 100, old)
    kept_fresh = put(data, idle, "/charts/new.png", 200, fresh)
    read_lately = put(data, idle, "/reports/r.md", 50, old, accessed=timedelta(hours=1))
    in_use = put(data, live, "/data/old.csv", 300, old)
    archived_old = put(data, archived, "/data/a.json", 10, old)
    upload = put(data, idle, "/uploads/sales.csv", 1000, timedelta(days=90))
    unknown = put(data, "not-a-thread", "/data/x.csv", 20, old)

    report = await cleanup_data_files(engine, data, CleanupConfig(), now=NOW)

    assert not expired.exists() and not archived_old.exists() and not unknown.exists()
    assert kept_fresh.exists() and read_lately.exists() and in_use.exists() and upload.exists()
    assert (report.removed_expired, report.removed_for_space, report.kept_in_use) == (3, 0, 1)
    assert report.freed_bytes == 130 and report.total_bytes == 550 and not report.over_cap
    assert await indexed(engine) == {
        f"workspaces/{idle}/charts/new.png": (200, idle),
        f"workspaces/{idle}/reports/r.md": (50, idle),
        f"workspaces/{live}/data/old.csv": (300, live),
    }

    # The index follows the disk: a file deleted meanwhile is forgotten on the next run.
    kept_fresh.unlink()
    await cleanup_data_files(engine, data, CleanupConfig(), now=NOW)
    assert set(await indexed(engine)) == {f"workspaces/{idle}/reports/r.md", f"workspaces/{live}/data/old.csv"}


async def test_cleanup_over_the_cap_removes_least_recently_used_down_to_80_percent(
    engine: AsyncEngine, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    live, idle = await threads(engine, active=1, idle=1)
    by_age = [put(data, idle, f"/data/{h}.csv", 300, timedelta(hours=h)) for h in (5, 4, 3, 2, 1)]
    oldest_in_use = put(data, live, "/data/busy.csv", 300, timedelta(hours=10))

    report = await cleanup_data_files(engine, data, CleanupConfig(size_cap_bytes=1500), now=NOW)

    # 1800 bytes > 1500: the oldest idle files go until the total is <= 1200 (80 %).
    assert [p.exists() for p in by_age] == [False, False, True, True, True]
    assert oldest_in_use.exists()
    assert (report.removed_expired, report.removed_for_space) == (0, 2)
    assert report.total_bytes == 1200 and report.freed_bytes == 600

    # Under the cap nothing more goes.
    again = await cleanup_data_files(engine, data, CleanupConfig(size_cap_bytes=1500), now=NOW)
    assert again.removed_for_space == 0 and again.files == 4


async def test_cleanup_keeps_active_files_even_over_the_cap(engine: AsyncEngine, tmp_path: Path) -> None:
    data = tmp_path / "data"
    (live,) = await threads(engine, active=1, idle=0)
    files = [put(data, live, f"/data/{i}.csv", 400, timedelta(hours=30 + i)) for i in range(3)]
    report = await cleanup_data_files(engine, data, CleanupConfig(size_cap_bytes=1000), now=NOW)
    assert all(p.exists() for p in files)
    assert report.over_cap and report.kept_in_use == 3


async def test_cleanup_ignores_symlinks(engine: AsyncEngine, tmp_path: Path) -> None:
    data = tmp_path / "data"
    (idle,) = await threads(engine, active=0, idle=1)
    outside = tmp_path / "precious.csv"
    outside.write_text("keep me")
    link = data / "workspaces" / idle / "data" / "link.csv"
    link.parent.mkdir(parents=True)
    link.symlink_to(outside)
    os.utime(outside, ((NOW - timedelta(days=9)).timestamp(),) * 2)
    report = await cleanup_data_files(engine, data, CleanupConfig(), now=NOW)
    assert link.is_symlink() and outside.exists() and report.files == 0


async def test_cleanup_on_an_empty_data_dir(engine: AsyncEngine, tmp_path: Path) -> None:
    report = await cleanup_data_files(engine, tmp_path / "nothing", CleanupConfig(), now=NOW)
    assert report.files == 0 and report.freed_bytes == 0


# --- the scheduling tools --------------------------------------------------------------------


def chat_ctx(
    tmp_path: Path,
    user: str = "U1",
    *,
    platform: str = "slack",
    channel: str = "C1",
    is_dm: bool = False,
    thread: str | None = "1700.1",
) -> RunContext:
    msg = InboundMessage(
        platform=platform,
        event_id="e1",
        message_id="m1",
        workspace="T1",
        channel=channel,
        thread=ThreadKey(platform=platform, workspace="T1", channel=channel, root=thread or "main"),
        reply_in_thread=thread,
        user=user,
        user_name=f"name-{user}",
        text="hi",
        is_dm=is_dm,
    )
    return RunContext(thread_id="t1", data_dir=tmp_path, channel=channel, user=user, is_dm=is_dm, chat=ChatOrigin.of(msg))


@pytest.fixture
def store(engine: AsyncEngine) -> ScheduleStore:
    return ScheduleStore(session_factory(engine))


def clock() -> datetime:
    return datetime(2026, 11, 20, 12, 0, tzinfo=UTC)  # a Friday


async def schedule(store: ScheduleStore, ctx: RunContext, on_change: Any = None, **args: Any) -> ScheduleInfo:
    values = {"prompt": "Weekly GMV by region", "cron": "0 9 * * mon", "timezone": "Asia/Shanghai", **args}
    tool = ScheduleReportTool(store, dm_address=dm_on_slack_only, on_change=on_change, clock=clock)
    return await tool.run(ScheduleReportInput(**values), ctx)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"cron": "0 9 * *"}, "invalid cron expression '0 9 * *' (Wrong number of fields"),
        ({"cron": "0 25 * * mon"}, "invalid cron expression"),
        ({"cron": "every monday"}, "invalid cron expression"),
        ({"timezone": "Mars/Olympus"}, "unknown time zone 'Mars/Olympus'"),
        ({"timezone": "../etc/passwd"}, "unknown time zone"),
        ({"cron": "*/10 * * * *"}, "runs every 10 min; reports may run at most every 1 h"),
        ({"cron": "0,30 9 * * *"}, "runs every 30 min"),
    ],
)
async def test_schedule_report_validates_cron_and_time_zone(
    store: ScheduleStore, tmp_path: Path, args: dict[str, str], message: str
) -> None:
    with pytest.raises(ToolError) as caught:
        await schedule(store, chat_ctx(tmp_path), **args)
    assert caught.value.error_type is ErrorType.INVALID_PARAMETERS
    assert message in str(caught.value)


async def test_schedule_report_stores_the_target_and_reports_next_runs(store: ScheduleStore, tmp_path: Path) -> None:
    changes: list[str] = []

    async def on_change() -> None:
        changes.append("changed")

    info = await schedule(store, chat_ctx(tmp_path), on_change, cron="0  9 * *   mon")
    assert changes == ["changed"]
    assert info.cron == "0 9 * * mon" and info.timezone == "Asia/Shanghai" and info.deliver_to == "channel"
    assert [t.isoformat() for t in info.next_runs] == [
        "2026-11-23T09:00:00+08:00",
        "2026-11-30T09:00:00+08:00",
        "2026-12-07T09:00:00+08:00",
    ]
    row = await store.get(info.id)
    assert row is not None
    assert (row.creator, row.creator_name, row.platform, row.workspace, row.channel) == ("U1", "name-U1", "slack", "T1", "C1")
    assert (row.thread_root, row.is_dm, row.enabled, row.consecutive_failures) == (None, False, True, 0)
    assert row.next_run_at == datetime(2026, 11, 23, 1, 0, tzinfo=UTC)

    in_thread = await schedule(store, chat_ctx(tmp_path), deliver_to="thread")
    assert (await store.get(in_thread.id)).thread_root == "1700.1"  # type: ignore[union-attr]
    to_dm = await schedule(store, chat_ctx(tmp_path), deliver_to="dm")
    dm_row = await store.get(to_dm.id)
    assert dm_row is not None and (dm_row.channel, dm_row.is_dm) == ("U1", True)  # Slack: the user id
    from_dm = await schedule(store, chat_ctx(tmp_path, channel="D9", is_dm=True, thread=None))
    dm_row = await store.get(from_dm.id)
    assert dm_row is not None and (dm_row.channel, dm_row.is_dm, dm_row.thread_root) == ("D9", True, None)


async def test_schedule_report_refuses_targets_it_cannot_reach(store: ScheduleStore, tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="not in a thread"):
        await schedule(store, chat_ctx(tmp_path, thread=None), deliver_to="thread")
    with pytest.raises(ToolError, match="only when scheduled from that DM"):
        await schedule(store, chat_ctx(tmp_path, platform="feishu"), deliver_to="dm")
    outside_chat = RunContext(thread_id="t", data_dir=tmp_path, user="U1")
    with pytest.raises(ToolError) as caught:
        await schedule(store, outside_chat)
    assert caught.value.error_type is ErrorType.PERMISSION_DENIED


async def test_schedules_per_user_are_capped(store: ScheduleStore, tmp_path: Path) -> None:
    tool = ScheduleReportTool(store, limits=CreationLimits(max_per_user=2), clock=clock)
    args = ScheduleReportInput(prompt="GMV please", cron="0 9 * * *", timezone="UTC")
    await tool.run(args, chat_ctx(tmp_path))
    await tool.run(args, chat_ctx(tmp_path))
    with pytest.raises(ToolError) as caught:
        await tool.run(args, chat_ctx(tmp_path))
    assert caught.value.error_type is ErrorType.RESOURCE_ERROR
    await tool.run(args, chat_ctx(tmp_path, "U2"))  # another user has their own allowance


async def test_list_and_cancel_permissions(store: ScheduleStore, tmp_path: Path) -> None:
    ann = (await schedule(store, chat_ctx(tmp_path, "U1"))).id
    bob = (await schedule(store, chat_ctx(tmp_path, "U2"), prompt="Daily orders")).id
    listing = ListSchedulesTool(store, admins=["ADMIN"], clock=clock)
    cancel = CancelScheduleTool(store, admins=["ADMIN"], clock=clock)

    own = await listing.run(ListSchedulesInput(), chat_ctx(tmp_path, "U1"))
    assert [s.id for s in own.schedules] == [ann]
    with pytest.raises(ToolError) as caught:
        await listing.run(ListSchedulesInput(all_users=True), chat_ctx(tmp_path, "U1"))
    assert caught.value.error_type is ErrorType.PERMISSION_DENIED
    everyone = await listing.run(ListSchedulesInput(all_users=True), chat_ctx(tmp_path, "ADMIN"))
    assert [s.id for s in everyone.schedules] == [ann, bob]

    with pytest.raises(ToolError) as caught:
        await cancel.run(CancelScheduleInput(schedule_id=bob), chat_ctx(tmp_path, "U1"))
    assert caught.value.error_type is ErrorType.PERMISSION_DENIED and "name-U2" in str(caught.value)
    with pytest.raises(ToolError) as caught:
        await cancel.run(CancelScheduleInput(schedule_id=9999), chat_ctx(tmp_path, "U1"))
    assert caught.value.error_type is ErrorType.INVALID_PARAMETERS
    here = chat_ctx(tmp_path, "U1")
    assert here.chat is not None
    elsewhere = replace(here, chat=replace(here.chat, workspace="T2"))
    with pytest.raises(ToolError, match="no scheduled report"):  # another workspace's id
        await cancel.run(CancelScheduleInput(schedule_id=ann), elsewhere)

    done = await cancel.run(CancelScheduleInput(schedule_id=ann), chat_ctx(tmp_path, "U1"))
    assert done.cancelled and not done.schedule.enabled and done.schedule.next_runs == []
    assert done.schedule.disabled_reason == "cancelled by name-U1"
    by_admin = await cancel.run(CancelScheduleInput(schedule_id=bob), chat_ctx(tmp_path, "ADMIN"))
    assert by_admin.cancelled
    again = await cancel.run(CancelScheduleInput(schedule_id=bob), chat_ctx(tmp_path, "U2"))
    assert not again.cancelled and again.note == "already off"

    assert (await listing.run(ListSchedulesInput(), chat_ctx(tmp_path, "U1"))).schedules == []
    history = await listing.run(ListSchedulesInput(include_cancelled=True), chat_ctx(tmp_path, "U1"))
    assert [s.id for s in history.schedules] == [ann]


# --- failures of scheduled reports -----------------------------------------------------------


async def finish_event(p: Process, fire_time: datetime, status: EventStatus) -> None:
    async with p.engine.connect() as conn:
        row_id = (
            await conn.execute(
                select(InboundEventRow.id).where(InboundEventRow.event_id.like(f"%:{fire_time:%Y%m%dT%H%M%SZ}"))
            )
        ).scalar_one()
    await p.inbox.finish(row_id, status)


async def test_two_failures_notify_the_creator_and_ten_switch_the_schedule_off(
    database_url: str, tmp_path: Path
) -> None:
    async with process(database_url, tmp_path) as p:
        row = await new_schedule(p.store, channel="C7")
        assert row.id is not None
        job = report_job_id(row.id)
        await p.scheduler.refresh()
        fires = [MONDAY_9 + timedelta(days=7 * week) for week in range(12)]

        async def run_week(week: int, status: EventStatus) -> Schedule:
            assert await p.scheduler.run(job, fires[week])
            await p.scheduler.settle_report_runs(fires[week] + timedelta(minutes=1))  # still open
            await finish_event(p, fires[week], status)
            await p.scheduler.settle_report_runs(fires[week] + timedelta(minutes=2))
            stored = await p.store.get(row.id)  # type: ignore[arg-type]
            assert stored is not None
            return stored

        assert (await run_week(0, EventStatus.FAILED)).consecutive_failures == 1
        assert (await run_week(1, EventStatus.DONE)).consecutive_failures == 0  # a success resets
        assert (await run_week(2, EventStatus.FAILED)).consecutive_failures == 1
        assert p.responder.delivered == []
        assert (await run_week(3, EventStatus.FAILED)).consecutive_failures == 2
        [(address, notice, _)] = p.responder.delivered
        # To the creator's DM, at the address the platform's responder gives for it.
        assert address.channel == "dm-U1" and address.is_dm and address.reply_in_thread is None
        assert f"#{row.id}" in notice.text and "failed 2 times in a row" in notice.text

        for week in range(4, 12):  # failures 3..10 in a row
            stored = await run_week(week, EventStatus.FAILED)
            assert stored.enabled == (week < 11)
        assert stored.consecutive_failures == 10 and stored.disabled_reason == "failed 10 times in a row"
        assert len(p.responder.delivered) == 2
        assert "switched off" in p.responder.delivered[1][1].text
        # Switched off: the job is gone, and a late firing enqueues nothing.
        assert job not in p.scheduler._jobs
        await p.scheduler.settle_report_runs(fires[-1] + timedelta(minutes=5))  # idempotent
        assert len(p.responder.delivered) == 2


async def test_a_run_that_cannot_be_enqueued_counts_as_a_failure(
    database_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with process(database_url, tmp_path) as p:
        row = await new_schedule(p.store)
        await p.scheduler.refresh()

        async def broken(_msg: InboundMessage) -> None:
            raise ConnectionError("database went away")

        monkeypatch.setattr(p.inbox, "accept", broken)
        assert await p.scheduler.run(report_job_id(row.id), MONDAY_9)  # type: ignore[arg-type]
        async with p.engine.connect() as conn:
            status, error = (await conn.execute(select(ScheduledRunRow.status, ScheduledRunRow.error))).one()
        assert status == "failed" and "database went away" in error
        await p.scheduler.settle_report_runs(MONDAY_9 + timedelta(minutes=1))
        assert (await p.store.get(row.id)).consecutive_failures == 1  # type: ignore[arg-type, union-attr]


async def test_a_cancelled_schedule_fires_nothing(database_url: str, tmp_path: Path) -> None:
    async with process(database_url, tmp_path) as p:
        row = await new_schedule(p.store)
        assert row.id is not None
        await p.scheduler.refresh()
        await p.store.disable(row.id, "cancelled by U1")
        assert await p.scheduler.run(report_job_id(row.id), MONDAY_9)
        await p.scheduler.settle_report_runs(MONDAY_9 + timedelta(minutes=1))
        assert await count(p.engine, InboundEventRow) == 0
        async with p.engine.connect() as conn:
            assert (await conn.execute(select(ScheduledRunRow.outcome))).scalar_one() == "skipped"
        await p.scheduler.refresh()
        assert report_job_id(row.id) not in p.scheduler._jobs


# --- idle conversations ----------------------------------------------------------------------


async def test_the_idle_job_flags_conversations_idle_for_long(database_url: str, tmp_path: Path) -> None:
    config = SchedulerConfig(idle_after=timedelta(minutes=30))
    async with process(database_url, tmp_path, config) as p:
        store = ThreadStore(session_factory(p.engine))
        quiet, busy = [
            await store.open(ThreadKey(platform="slack", workspace="T1", channel="C1", root=root))
            for root in ("1.0", "2.0")
        ]
        for thread_id in (quiet, busy):
            state = await store.load_state(thread_id)
            state.model_calls = 3  # answered before: there is something to refocus on
            await store.save_state(thread_id, state)
        at = utcnow().replace(microsecond=0) + timedelta(minutes=45)
        async with p.engine.begin() as conn:
            await conn.execute(update(ThreadRow).where(ThreadRow.id == busy).values(updated_at=at - timedelta(minutes=5)))

        assert await p.scheduler.run("idle-threads", at)
        assert (await store.load_state(quiet)).refocus.idle_resume
        assert not (await store.load_state(busy)).refocus.idle_resume


def test_schedule_tools_register_with_valid_specs(engine: AsyncEngine, store: ScheduleStore) -> None:
    work = ScheduledWork(store, MonitorStore(session_factory(engine)), admins=frozenset({"ADMIN"}))
    pipeline = ToolPipeline(schedule_tools.build(ToolDeps(AgentConfig(), scheduled=work)))
    assert pipeline.names == ["schedule_report", "list_schedules", "cancel_schedule"]
    for spec in pipeline.specs():
        assert spec["input_schema"]["type"] == "object"


async def test_a_fired_report_is_answered_by_the_running_gateway_as_a_top_level_post(
    database_url: str, tmp_path: Path
) -> None:
    async with (
        FakeAnthropic() as anthropic,
        FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack,
        running_gateway(gateway_settings(database_url, tmp_path, anthropic, slack)) as gateway,
    ):
        runtime = gateway.runtime
        store = ScheduleStore(runtime.sessions)
        scheduler = Scheduler(runtime.engine, runtime.inbox, store, runtime.responders, tmp_path)
        row = await new_schedule(store)
        assert row.id is not None
        await scheduler.refresh()
        anthropic.script(Reply([text("Weekly GMV rose 3% (report attached).")]))

        assert await scheduler.run(report_job_id(row.id), MONDAY_9)
        await gateway.settled()

        [post] = slack.posted(channel="C1")
        assert post.get("thread_ts") is None and "Weekly GMV rose 3%" in slack.markdown_of(post)
        prompt = anthropic.last_request.body["messages"][0]["content"][0]["text"]
        assert prompt.startswith("[from Ann] [Scheduled report") and prompt.endswith("Weekly GMV by region")
        await scheduler.settle_report_runs(utcnow())
        async with runtime.engine.connect() as conn:
            assert (await conn.execute(select(ScheduledRunRow.outcome))).scalar_one() == "succeeded"
        await scheduler.stop()
