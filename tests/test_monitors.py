"""Metric monitors without a chat platform: the operators' file, the monitor tools, the
judged period, a mute's seven days, and `ba-agent monitors list|run` (Slack end to end is in
tests/test_monitors_slack.py)."""

from __future__ import annotations

import io
import json
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from adapters.console.responder import ConsoleResponder
from agent_core.config import AgentConfig
from agent_core.governance.audit import read_audit
from agent_core.monitors.check import judged_period
from agent_core.monitors.loader import MonitorFileError, load_monitors
from agent_core.monitors.model import AlertView, Monitor, MonitorAction
from agent_core.monitors.store import MonitorStore
from agent_core.run_context import ChatOrigin, RunContext
from agent_core.store.db import create_engine, session_factory
from agent_core.toolkit.pipeline import ToolPipeline
from agent_core.toolkit.protocol import ErrorType, ToolError
from agent_core.tools.monitor_tools import (
    CreateMonitorInput,
    CreateMonitorTool,
    DeleteMonitorInput,
    DeleteMonitorTool,
    ListMonitorsInput,
    ListMonitorsTool,
)
from gateway.cli.main import main
from gateway.config import ConfigError, load_settings
from gateway.jobs.monitors import MonitorRunner
from gateway.migrate import upgrade
from tests.test_semantic import build_duckdb, write_warehouse_yaml

ELECTRONICS = """\
monitors:
  - name: electronics
    metric: gmv
    where: "category = 'Electronics'"
    dimensions: [channel, region]
    cron: "0 9 * * *"
    timezone: Asia/Shanghai
    platform: console
    workspace: local
    channel: terminal
    creator: U0OPS
"""


@pytest.fixture
async def sessions(tmp_path: Path) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    url = f"sqlite:///{tmp_path / 'gw.db'}"
    upgrade(url)
    engine = create_engine(url)
    yield session_factory(engine)
    await engine.dispose()


@pytest.fixture
def file_path(tmp_path: Path) -> Path:
    path = tmp_path / "monitors.yml"
    path.write_text(ELECTRONICS)
    return path


def chat(tmp_path: Path, user: str = "U1") -> RunContext:
    origin = ChatOrigin(platform="console", workspace="local", user_name=user.lower())
    data_dir = tmp_path / "data"
    return RunContext(thread_id="console:local:terminal:1", data_dir=data_dir, channel="terminal", user=user, chat=origin)


# --- the operators' file ----------------------------------------------------------------------


def test_the_monitors_file_is_read_and_its_mistakes_named_by_line(file_path: Path, tmp_path: Path) -> None:
    [monitor] = load_monitors(file_path)
    assert (monitor.name, monitor.origin, monitor.dimensions) == ("electronics", "file", ["channel", "region"])
    broken = tmp_path / "broken.yml"
    broken.write_text(
        ELECTRONICS.replace('cron: "0 9 * * *"', 'cron: "61 9 * * *"')
        + ELECTRONICS.split("\n", 1)[1].replace("creator: U0OPS", "creator: U0OPS\n    colour: red")
    )
    with pytest.raises(MonitorFileError) as caught:
        load_monitors(broken)
    assert [line for line, _ in caught.value.problems] == [6, 22]
    message = str(caught.value)
    assert "line 6: monitors[0]: invalid cron expression '61 9 * * *'" in message
    assert "line 22: monitors[1].colour: is not a monitor setting" in message


def test_an_invalid_monitors_file_stops_start_up(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yml"
    bad.write_text("monitors:\n  - name: Has Spaces\n    metric: gmv\n")
    with pytest.raises(ConfigError) as caught:
        load_settings(_env_file=None, BA_DATA_DIR=str(tmp_path), BA_MONITORS_FILE=str(bad))
    assert "BA_MONITORS_FILE" in str(caught.value) and "line 2: monitors[0].name" in str(caught.value)


def test_the_judged_period_is_the_latest_complete_day_or_week_in_the_monitors_time_zone() -> None:
    at = datetime(2026, 10, 20, 23, 30, tzinfo=UTC)  # already Wednesday the 21st in Shanghai
    assert judged_period(at, "Asia/Shanghai", "day").start == date(2026, 10, 20)
    assert judged_period(at, "UTC", "day").start == date(2026, 10, 19)
    week = judged_period(at, "Asia/Shanghai", "week")
    assert (week.start, week.end) == (date(2026, 10, 12), date(2026, 10, 18))


# --- the monitor tools ------------------------------------------------------------------------


async def test_a_monitor_made_in_chat_is_listed_and_only_its_creator_deletes_it(
    sessions: async_sessionmaker[AsyncSession], file_path: Path, tmp_path: Path
) -> None:
    store = MonitorStore(sessions, load_monitors(file_path))
    config = AgentConfig(model="m", data_dir=tmp_path / "data")
    changes: list[str] = []

    async def changed() -> None:
        changes.append("sync")

    create = CreateMonitorTool(store, config, on_change=changed)
    ToolPipeline([create, ListMonitorsTool(store), DeleteMonitorTool(store)])  # valid specs
    made = await create.run(
        CreateMonitorInput(
            name="gmv-watch", metric="gmv", dimensions=["region", "channel"], cron="0 9 * * *",
            timezone="Asia/Shanghai", channel="<#C0SALES|sales-ops>",
        ),
        chat(tmp_path),
    )  # fmt: skip
    assert made.channel == "C0SALES" and made.origin == "chat" and changes == ["sync"]
    assert [(t.hour, t.minute) for t in made.next_runs] == [(9, 0)] * 3
    listed = await ListMonitorsTool(store).run(ListMonitorsInput(), chat(tmp_path))
    assert [m.name for m in listed.monitors] == ["electronics", "gmv-watch"]

    refusals = [
        (CreateMonitorInput(name="electronics", metric="gmv", cron="0 9 * * *", timezone="UTC"), "exists already"),
        (CreateMonitorInput(name="x", metric="gmv", dimensions=["province"], cron="0 9 * * *", timezone="UTC"), "province"),
        (CreateMonitorInput(name="x", metric="gmw", cron="0 9 * * *", timezone="UTC"), "Unknown metric"),
        (CreateMonitorInput(name="x", metric="gmv", cron="*/5 * * * *", timezone="UTC"), "monitors may run at most every 1 h"),
    ]
    for args, reason in refusals:
        with pytest.raises(ToolError) as caught:
            await create.run(args, chat(tmp_path))
        assert reason in str(caught.value) and caught.value.error_type is ErrorType.INVALID_PARAMETERS

    delete = DeleteMonitorTool(store, on_change=changed)
    for name, user in (("gmv-watch", "U2"), ("electronics", "U0OPS")):
        with pytest.raises(ToolError) as caught:
            await delete.run(DeleteMonitorInput(name=name), chat(tmp_path, user))
        assert caught.value.error_type is ErrorType.PERMISSION_DENIED
    await delete.run(DeleteMonitorInput(name="gmv-watch"), chat(tmp_path))
    assert await store.get("gmv-watch") is None and changes == ["sync", "sync"]


# --- a mute's seven days ----------------------------------------------------------------------


@pytest.mark.parametrize(("muted_on", "posts"), [(date(2026, 6, 10), True), (date(2026, 6, 13), False)])
async def test_a_muted_monitor_posts_nothing_for_seven_days(
    sessions: async_sessionmaker[AsyncSession], file_path: Path, tmp_path: Path, muted_on: date, posts: bool
) -> None:
    """The demo's 618 promotion (2026-06-18) is an onset; a mute set a week before has ended by then."""
    store = MonitorStore(sessions, load_monitors(file_path))
    earlier = AlertView(id="earlier", monitor="electronics", platform="console", workspace="local", channel="terminal",
                        headline="an earlier alert", facts=[])  # fmt: skip
    await store.save_alert(earlier)
    clicked = datetime(muted_on.year, muted_on.month, muted_on.day, tzinfo=UTC)
    muted = await store.act("earlier", MonitorAction.MUTE, "U9", clicked)
    assert muted is not None and muted.alert.acted_by == "U9"
    out = io.StringIO()
    config = AgentConfig(model="m", data_dir=tmp_path / "data")
    runner = MonitorRunner(store, {"console": ConsoleResponder(out)}, config, sessions)
    run = await runner.run("electronics", datetime(2026, 6, 19, 1, tzinfo=UTC))  # judges 2026-06-18
    assert run.anomalous and run.muted is not posts
    assert ("gmv spiked (channel=app) on 2026-06-18" in out.getvalue()) is posts


# --- ba-agent monitors ------------------------------------------------------------------------


def test_monitors_list_and_a_dry_run(
    file_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BA_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("BA_MONITORS_FILE", str(file_path))
    assert main(["monitors", "list"]) == 0
    listed = capsys.readouterr().out
    assert listed.startswith("electronics  gmv by channel,region  daily  '0 9 * * *' Asia/Shanghai  console:terminal  file")
    assert main(["monitors", "run", "electronics", "--at", "2026-06-19T09:00+08:00", "--dry-run"]) == 0
    shown = capsys.readouterr().out
    assert shown.startswith("electronics: 2026-06-18 is anomalous; would post an alert:")
    assert "channel=app: 584,864 against" in shown and "Source: demo (sales)" in shown
    assert main(["monitors", "run", "nothing-here"]) == 1
    assert "there is no monitor 'nothing-here'" in capsys.readouterr().err


# --- the creator's permissions ----------------------------------------------------------------


@pytest.mark.parametrize("creator", ["U0OPS", "U2"])
async def test_a_monitor_reads_its_source_with_its_creators_permissions(
    sessions: async_sessionmaker[AsyncSession], tmp_path: Path, creator: str
) -> None:
    """Source `dwh` is open to U0OPS only: U2's monitor of it reads nothing and posts nothing;
    U0OPS's reads it, audited under U0OPS and the monitor."""
    build_duckdb(tmp_path / "wh.duckdb")
    config = AgentConfig(
        model="m",
        data_dir=tmp_path / "data",
        BA_DATASOURCES=json.dumps({"dwh": {"url": f"duckdb://{tmp_path / 'wh.duckdb'}", "allowed_users": ["U0OPS"]}}),
        BA_SEMANTIC_DIR=str(write_warehouse_yaml(tmp_path / "semantic", "dwh")),
    )
    monitor = Monitor(name="dwh-gmv", metric="gmv", cron="0 9 * * *", platform="console", workspace="local",
                      channel="terminal", creator=creator, origin="file")  # fmt: skip
    out = io.StringIO()
    runner = MonitorRunner(MonitorStore(sessions, [monitor]), {"console": ConsoleResponder(out)}, config, sessions)
    at = datetime(2026, 2, 10, 9, tzinfo=UTC)
    if creator == "U2":
        with pytest.raises(ToolError, match="Unknown metric"):
            await runner.run("dwh-gmv", at)
        assert await read_audit(sessions) == []
    else:
        run = await runner.run("dwh-gmv", at)
        assert run.period == "2026-02-09"
        audited = await read_audit(sessions)
        recorded = {(e.user_id, e.source, e.thread_id, e.tool) for e in audited}
        assert recorded == {("U0OPS", "dwh", "monitor-dwh-gmv", "monitor")}  # under its own name, not query_metric
    assert out.getvalue() == ""
