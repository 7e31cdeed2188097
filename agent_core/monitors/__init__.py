"""Proactive metric monitors: a governed metric watched on a schedule, alerting a channel when
it starts to behave unusually, with the cause.

- `model`: what a monitor is (`MonitorSpec`), its state between runs, and an alert as the
  adapters show it (`AlertView`).
- `tables` and `store`: `MonitorStore`, the monitors made in chats beside the operators' file
  monitors, their state and their alerts in the database.
- `loader`: the operators' monitors file (``BA_MONITORS_FILE``), checked with line numbers.
- `check`: one run's detection: the latest complete period scored causally.
- `alert`: an onset's content: what moved, the root cause, a chart, the provenance line.

The tools that make them in conversations are `agent_core.tools.monitor_tools`; the gateway's
scheduler (`gateway.jobs.monitors`) runs them.
"""
