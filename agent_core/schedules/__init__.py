"""Scheduled reports: a prompt the agent runs on a cron schedule, posted to a chat target.

- `model`: what a schedule is (`NewSchedule`, `Schedule`) and how a cron expression is read.
- `tables`: the ``report_schedules`` table; `store`: `ScheduleStore`, the schedules in it.

The tools that make them in conversations are `agent_core.tools.schedule_tools`; the gateway's
scheduler (`gateway.jobs`) runs them.
"""
