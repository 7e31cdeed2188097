"""Proactive metric monitors: a governed metric watched on a schedule, alerting a channel when
it starts to behave unusually, with the cause.

- `model`: what a monitor is (`MonitorSpec`), its state between runs, an alert as the adapters
  show it (`AlertView`), and the storage interface the gateway implements.
- `loader`: the operators' monitors file (``BA_MONITORS_FILE``), checked with line numbers.
- `check`: one run's detection: the latest complete period scored causally.
- `alert`: an onset's content: what moved, the root cause, a chart, the provenance line.
"""
