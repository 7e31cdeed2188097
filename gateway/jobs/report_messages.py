"""The messages a scheduled report's run sends, as inbox events.

At fire time the `Scheduler` (gateway/jobs/scheduler.py) enters a schedule's prompt
(`agent_core.schedules`) into the durable inbox like a user message (:func:`report_message`),
into a fresh conversation, and the dispatcher answers it; :func:`notice_message` addresses a
notice to the schedule's creator.
"""

from __future__ import annotations

from datetime import UTC, datetime

from agent_core.i18n import language_of_text
from agent_core.messages import InboundMessage, ThreadKey
from agent_core.schedules.model import Schedule


def fire_stamp(fire_time: datetime) -> str:
    """A compact ISO 8601 UTC stamp of a fire time, safe inside ids and thread keys."""
    return fire_time.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def report_message(row: Schedule, fire_time: datetime) -> InboundMessage:
    """The inbound message of one run: a fresh conversation at the schedule's target.

    The ids derive from (schedule, fire time) alone, so firing twice is deduplicated by the
    inbox; with ``reply_in_thread`` None the answer is a top-level post (or DM message). It is
    marked as the schedule's run: the access policy then limits it to what both its creator
    and its target may see.
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
        # No platform locale is stored with a schedule: the language of its prompt (not of the
        # English preamble above) stands for its creator's.
        locale=language_of_text(row.prompt).value,
        text=text,
        is_dm=row.is_dm,
        received_at=fire_time,
        scheduled_run=f"report:{row.id}",
    )


def report_event_id(schedule_id: int | None, fire_time: datetime) -> str:
    """The platform-level event id of a run (the inbox stores it as ``<platform>:<id>``)."""
    return f"schedule:{schedule_id}:{fire_stamp(fire_time)}"


def notice_message(row: Schedule, now: datetime, creator_dm: str | None) -> InboundMessage:
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
