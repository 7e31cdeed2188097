"""Answers to a platform's bot menu (`InboundMessage.menu`), in the user's language, without
the model: start a new analysis, list my monitors, list my scheduled reports.

A menu click is an inbox event like any message (stored before it is acknowledged, answered
once). "New analysis" archives the user's top-level DM conversation with the bot, as sending
"new" there does; the lists show what the user created in that workspace.
"""

from __future__ import annotations

from agent_core.i18n import t
from agent_core.messages import InboundMessage, OutboundReply
from agent_core.monitors.model import Monitor
from agent_core.monitors.store import MonitorStore
from agent_core.schedules.model import Schedule
from agent_core.schedules.store import ScheduleStore
from agent_core.store.threads import ThreadStore

MAX_LISTED = 20


class MenuAnswers:
    """What each menu item answers."""

    def __init__(self, threads: ThreadStore, monitors: MonitorStore, schedules: ScheduleStore) -> None:
        self._threads = threads
        self._monitors = monitors
        self._schedules = schedules

    async def reply(self, msg: InboundMessage) -> OutboundReply | None:
        """The answer to ``msg``'s menu choice; None for a choice this gateway does not know."""
        language = msg.language
        if msg.menu == "new_analysis":
            await self._threads.reset_dms(msg.platform, msg.workspace, msg.user)
            return OutboundReply(text=t(language, "Started a fresh conversation. What would you like to analyse?"))
        if msg.menu == "my_monitors":
            mine = [m for m in await self._monitors.in_workspace(msg.platform, msg.workspace) if m.creator == msg.user]
            if not mine:
                return OutboundReply(
                    text=t(
                        language,
                        "You have no metric monitors. Ask me, e.g. \"watch GMV by region every morning at 9:00 "
                        "and tell this group when something is off\".",
                    )
                )
            lines = [await self._monitor_line(m, msg) for m in mine[:MAX_LISTED]]
            return OutboundReply(text=_listing(t(language, "Your metric monitors:"), lines, len(mine), msg))
        if msg.menu == "my_reports":
            reports = await self._schedules.in_workspace(msg.platform, msg.workspace, msg.user, include_disabled=False)
            if not reports:
                return OutboundReply(
                    text=t(
                        language,
                        "You have no scheduled reports. Ask me, e.g. \"send the weekly GMV report every Monday at 9:00\".",
                    )
                )
            lines = [_report_line(r, msg) for r in reports[:MAX_LISTED]]
            return OutboundReply(text=_listing(t(language, "Your scheduled reports:"), lines, len(reports), msg))
        return None

    async def _monitor_line(self, monitor: Monitor, msg: InboundMessage) -> str:
        state = await self._monitors.state(monitor.name)
        watched = ", ".join([monitor.metric, *monitor.dimensions])
        line = f"- `{monitor.name}`: {watched} · `{monitor.cron}` {monitor.timezone}"
        if state.last_period:
            line += " · " + t(msg.language, "last judged {day}", day=state.last_period)
        if state.anomalous:
            line += " · ⚠️ " + t(msg.language, "anomalous now")
        return line


def _report_line(report: Schedule, msg: InboundMessage) -> str:
    prompt = report.prompt if len(report.prompt) <= 80 else report.prompt[:79] + "…"
    line = f"- #{report.id}: {prompt} · `{report.cron}` {report.tz}"
    if report.next_run_at is not None:
        line += " · " + t(msg.language, "next run {when} UTC", when=f"{report.next_run_at:%Y-%m-%d %H:%M}")
    return line


def _listing(title: str, lines: list[str], total: int, msg: InboundMessage) -> str:
    more = [t(msg.language, "… and {count} more.", count=total - len(lines))] if total > len(lines) else []
    return "\n".join([f"**{title}**", *lines, *more])
