"""Metric monitors end to end on Slack: the real gateway and slack-bolt app against the fake
Slack API, a monitor from the operators' file over the demo data, a scripted clock.

The demo data has an injected drop (`agent_core.data.demo.DEMO_ANOMALIES`): East China's app
orders and GMV fall about 40 % from 2026-10-20 to 2026-10-22 and recover on 2026-10-23. A
monitor of GMV by region, channel and category, run each morning at 09:00 Asia/Shanghai,
judges the day before.
"""

from __future__ import annotations

import asyncio
import copy
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from adapters.slack.alerts import ACKNOWLEDGE_ACTION, MUTE_ACTION
from agent_core.data.demo import DEMO_ANOMALIES
from gateway.cli.monitors import describe
from gateway.jobs.monitors import monitor_job_id
from gateway.migrate import upgrade
from gateway.service.platforms import build_platforms, configured
from gateway.service.runtime import Runtime, open_stores
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import block_actions, signed_interaction
from tests.harness import SIGNING_SECRET, Gateway, gateway_settings, running_gateway

CHANNEL, OPS, ANALYST = "C0SALES", "U0OPS", "U0ANALYST"
MONITOR = "gmv-by-region"
MONITORS_YAML = f"""\
monitors:
  - name: {MONITOR}
    metric: gmv
    dimensions: [region, channel, category]
    cron: "0 9 * * *"
    timezone: Asia/Shanghai
    platform: slack
    workspace: T1
    channel: {CHANNEL}
    creator: {OPS}
"""
DROP = DEMO_ANOMALIES[0]


def morning(day: int) -> datetime:
    """09:00 in Shanghai on 2026-10-<day>: the run that judges the day before."""
    return datetime(2026, 10, day, 1, 0, tzinfo=UTC)


@pytest.fixture
def monitors_file(tmp_path: Path) -> Path:
    path = tmp_path / "monitors.yml"
    path.write_text(MONITORS_YAML)
    return path


async def run_at(gw: Gateway, day: int) -> bool:
    """The scheduler's run of the monitor at 09:00 on ``day``; False if claimed elsewhere."""
    await gw.runtime.monitor_jobs.sync()
    return await gw.runtime.scheduler.run(monitor_job_id(MONITOR), morning(day))


def alerts(slack: FakeSlack) -> list[dict[str, Any]]:
    return [p for p in slack.posted(channel=CHANNEL) if "thread_ts" not in p]


def buttons(post: dict[str, Any]) -> list[str]:
    return [e["action_id"] for b in post["blocks"] if b["type"] == "actions" for e in b["elements"]]


async def click(gw: Gateway, action_id: str, user: str, on: dict[str, Any]) -> int:
    """``user`` clicks ``action_id`` on the alert ``on`` (as their client shows it)."""
    body, headers = signed_interaction(block_actions(on, action_id, user), SIGNING_SECRET)
    async with gw.http.post(gw.server.make_url("/slack/events"), data=body, headers=headers) as resp:
        await resp.read()
        return resp.status


async def test_a_drop_alerts_once_with_its_root_cause_and_its_recovery_is_noted(monitors_file: Path, tmp_path: Path) -> None:
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        settings = gateway_settings(
            f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, slack, BA_MONITORS_FILE=str(monitors_file)
        )
        async with running_gateway(settings) as gw:
            assert await run_at(gw, 20)  # judges 2026-10-19, a normal Monday
            assert slack.posted(channel=CHANNEL) == []

            assert await run_at(gw, 21)  # judges 2026-10-20, the outage's first day
            [alert] = copy.deepcopy(alerts(slack))  # as the users' clients show it
            shown = json.dumps(alert["blocks"])
            assert "gmv dropped (region=East China) on 2026-10-20" in shown
            # The root cause is the segment the demo injected the drop into.
            assert f"region={DROP.regions[0]} &amp; channel={DROP.channels[0]}" in shown
            assert "Source: demo (sales)" in shown and "Metrics: gmv" in shown  # the provenance line
            assert buttons(alert) == [ACKNOWLEDGE_ACTION, MUTE_ACTION]
            [chart] = slack.uploads
            assert chart.thread_ts == alert["ts"] and chart.filename.endswith(".png")
            assert chart.content.startswith(b"\x89PNG")

            for day in (22, 23):  # the drop persists: no second alert
                assert await run_at(gw, day)
            assert len(slack.posted(channel=CHANNEL)) == 2  # the alert and its chart

            assert await run_at(gw, 24)  # judges 2026-10-23: recovered
            [note] = [p for p in slack.posted(channel=CHANNEL, thread_ts=alert["ts"]) if not p.get("files")]
            assert "Recovered" in note["markdown_text"] and "2026-10-23" in note["markdown_text"]
            assert len(alerts(slack)) == 1

            assert await click(gw, ACKNOWLEDGE_ACTION, ANALYST, on=alert) == 200
            [acknowledged] = alerts(slack)
            assert buttons(acknowledged) == [] and f"Acknowledged by <@{ANALYST}>" in json.dumps(acknowledged["blocks"])
            assert await click(gw, ACKNOWLEDGE_ACTION, ANALYST, on=alert) == 200  # a double click changes nothing
            assert slack.ephemerals == []
            assert await click(gw, MUTE_ACTION, OPS, on=alert) == 200  # a later click is told privately…
            assert "Acknowledged by" in slack.ephemerals[0]["text"]
            assert len(slack.calls_to("chat.update")) == 1  # …and re-sends nothing


async def test_a_replayed_earlier_day_leaves_the_episode_alone(monitors_file: Path, tmp_path: Path) -> None:
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        settings = gateway_settings(
            f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, slack, BA_MONITORS_FILE=str(monitors_file)
        )
        async with running_gateway(settings) as gw:
            assert await run_at(gw, 21)  # the alert for 2026-10-20
            [alert] = alerts(slack)
            state = await gw.runtime.monitors.state(MONITOR)

            # `ba-agent monitors run gmv-by-region --at 2026-10-15T09:00+08:00`: a normal day.
            replay = await gw.runtime.monitor_jobs.runner.run(MONITOR, morning(15))
            assert describe(replay, posted=True) == (
                f"{MONITOR}: 2026-10-14 is normal; replay of an earlier period: state unchanged "
                "(last judged 2026-10-20), nothing posted"
            )
            assert [p for p in slack.posted(channel=CHANNEL, thread_ts=alert["ts"]) if not p.get("files")] == []
            assert await gw.runtime.monitors.state(MONITOR) == state

            assert await run_at(gw, 22)  # the drop goes on: still one alert
            assert len(alerts(slack)) == 1
            assert await run_at(gw, 24)  # judges 2026-10-23: the recovery noted once, on its day
            [note] = [p for p in slack.posted(channel=CHANNEL, thread_ts=alert["ts"]) if not p.get("files")]
            assert "2026-10-23" in note["markdown_text"]

            # Replaying the anomalous day after the episode ended alerts nobody a second time.
            again = await gw.runtime.monitor_jobs.runner.run(MONITOR, morning(21))
            assert again.replay_of == "2026-10-23" and len(alerts(slack)) == 1
            shown = describe(again, posted=True)
            assert shown.startswith(f"{MONITOR}: 2026-10-20 is anomalous; replay of an earlier period: state unchanged")
            assert "as the latest run it would have posted an alert:\n**gmv dropped (region=East China) on 2026-10-20" in shown
            assert not (await gw.runtime.monitors.state(MONITOR)).anomalous


async def test_mute_silences_the_monitor_for_seven_days(monitors_file: Path, tmp_path: Path) -> None:
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        settings = gateway_settings(
            f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, slack, BA_MONITORS_FILE=str(monitors_file)
        )
        async with running_gateway(settings) as gw:
            assert await run_at(gw, 21)
            [alert] = copy.deepcopy(alerts(slack))
            clicked_at = datetime.now(UTC)
            assert await click(gw, MUTE_ACTION, ANALYST, on=alert) == 200
            [muted] = alerts(slack)
            assert buttons(muted) == [] and f"Muted by <@{ANALYST}> until" in json.dumps(muted["blocks"])
            state = await gw.runtime.monitors.state(MONITOR)
            assert state.muted_until is not None and state.muted_by == ANALYST
            assert timedelta(days=7) <= state.muted_until - clicked_at < timedelta(days=7, minutes=1)
            for day in (22, 23, 24):  # the recovery on the 24th is not posted either
                assert await run_at(gw, day)
            assert len(slack.posted(channel=CHANNEL)) == 2  # the alert and its chart
            assert await click(gw, ACKNOWLEDGE_ACTION, OPS, on=alert) == 200  # too late: muted already
            [note] = slack.ephemerals
            assert note["user"] == OPS and "Muted by" in note["text"]


async def test_two_runtimes_on_one_database_run_a_monitor_once(monitors_file: Path, tmp_path: Path) -> None:
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        database = f"sqlite:///{tmp_path / 'gw.db'}"
        settings = gateway_settings(database, tmp_path, anthropic, slack, BA_MONITORS_FILE=str(monitors_file))
        await asyncio.to_thread(upgrade, database)
        stores = [open_stores(settings) for _ in range(2)]
        runtimes = [Runtime.build(s, build_platforms(s, configured(settings)).responders) for s in stores]
        try:
            for runtime in runtimes:
                await runtime.monitor_jobs.sync()
            job = monitor_job_id(MONITOR)
            ran = await asyncio.gather(*(runtime.scheduler.run(job, morning(21)) for runtime in runtimes))
            assert sorted(ran) == [False, True]
            assert len(alerts(slack)) == 1
        finally:
            for runtime in runtimes:
                await runtime.close()
