"""`ba-agent monitors list|run NAME`: the metric monitors from the terminal.

`list` prints every monitor (the operators' ``BA_MONITORS_FILE`` and those made in chats) with
its schedule and state; `run` runs one now, as its schedule would: it judges the latest
complete period and posts an alert at an onset (``--at`` replays another time, ``--dry-run``
prints what would be posted instead). The gateway's modules load inside the commands.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from gateway.config import Settings, load_settings

if TYPE_CHECKING:
    from gateway.jobs.monitors import MonitorRun


def register(commands: Any) -> None:
    """Add the `monitors` command to the CLI's subparsers."""
    monitors = commands.add_parser("monitors", help="proactive metric monitors")
    monitor_commands = monitors.add_subparsers(dest="monitors_command", required=True)
    listing = monitor_commands.add_parser("list", help="one monitor a line: name, metric, schedule, channel, state")
    listing.set_defaults(func=_list)
    run = monitor_commands.add_parser("run", help="run one monitor now and post what it finds")
    run.add_argument("name", help="the monitor's name (monitors list)")
    run.add_argument("--at", help="as if it ran at this time (ISO, e.g. 2026-10-21T09:00+08:00; UTC unless given)")
    run.add_argument("--dry-run", action="store_true", help="print what would be posted; post and remember nothing")
    run.set_defaults(func=_run)


def _list(_args: argparse.Namespace) -> int:
    settings = load_settings()
    lines = asyncio.run(_listing(settings))
    print("\n".join(lines) if lines else "(no monitors: set BA_MONITORS_FILE, or ask the bot to create one)")
    return 0


async def _listing(settings: Settings) -> list[str]:
    from agent_core.monitors.store import MonitorStore
    from agent_core.store.db import create_engine, session_factory
    from gateway.migrate import upgrade

    await asyncio.to_thread(upgrade, settings.effective_database_url)
    engine = create_engine(settings.effective_database_url)
    try:
        store = MonitorStore(session_factory(engine), settings.monitors)
        lines = []
        for monitor in await store.all():
            state = await store.state(monitor.name)
            shown = "anomalous" if state.anomalous else "normal"
            if state.muted_until is not None and state.muted_until > datetime.now(UTC):
                shown += f", muted until {state.muted_until:%Y-%m-%d %H:%M}Z"
            by = f" by {','.join(monitor.dimensions)}" if monitor.dimensions else ""
            every = "daily" if monitor.grain == "day" else "weekly"
            lines.append(
                f"{monitor.name}  {monitor.metric}{by}  {every}  '{monitor.cron}' {monitor.timezone}  "
                f"{monitor.platform}:{monitor.channel}  {monitor.origin}  {shown} (last judged {state.last_period or 'never'})"
            )
        return lines
    finally:
        await engine.dispose()


def _run(args: argparse.Namespace) -> int:
    settings = load_settings()
    try:
        at = datetime.fromisoformat(args.at) if args.at else datetime.now(UTC)
    except ValueError:
        print(f"ba-agent: --at {args.at!r} is not an ISO date or time", file=sys.stderr)
        return 2
    from agent_core.toolkit.protocol import ToolError
    from gateway.jobs.monitors import MonitorError

    try:
        run = asyncio.run(_run_once(settings, args.name, at if at.tzinfo else at.replace(tzinfo=UTC), not args.dry_run))
    except (MonitorError, ToolError) as exc:
        print(f"ba-agent: {exc}", file=sys.stderr)
        return 1
    print(describe(run, posted=not args.dry_run))
    return 0


async def _run_once(settings: Settings, name: str, at: datetime, post: bool) -> MonitorRun:
    from gateway.migrate import upgrade
    from gateway.service.platforms import build_platforms, configured
    from gateway.service.runtime import Runtime, open_stores

    await asyncio.to_thread(upgrade, settings.effective_database_url)
    stores = open_stores(settings)
    platforms = build_platforms(stores, configured(settings))  # the responders an alert is posted through
    runtime = Runtime.build(stores, platforms.responders)
    try:
        return await runtime.monitor_jobs.runner.run(name, at, post=post)
    finally:
        await runtime.close()


def describe(run: MonitorRun, *, posted: bool) -> str:
    """What a run found and did, for the terminal."""
    if run.period is None:
        return f"{run.monitor}: no value for the latest complete period yet; nothing judged"
    verdict = "anomalous" if run.anomalous else "normal"
    head = f"{run.monitor}: {run.period} is {verdict}"
    if run.replay_of is not None:
        head += f"; replay of an earlier period: state unchanged (last judged {run.replay_of}), nothing posted"
        if run.alert is None:
            return head
        return f"{head}; as the latest run it would have posted an alert:\n{run.alert.markdown()}"
    if run.muted:
        return f"{head}; muted, nothing posted"
    if run.posted is None:
        return f"{head}; nothing to post" + (" (the alert of this episode was posted before)" if run.anomalous else "")
    verb = "posted" if posted else "would post"
    if run.alert is None:
        return f"{head}; {verb} the recovery in the alert's thread"
    return f"{head}; {verb} an alert:\n{run.alert.markdown()}"
