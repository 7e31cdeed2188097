"""The aiohttp service around the agent core.

- `app`: the routes each registered platform mounts, health, readiness and metrics;
- `inbox` (+ `inbox_postgres`): the durable inbox every accepted event is committed to before
  it is acknowledged; `dispatcher`: answers it in order per thread, exactly once, under leases;
  `outbound`: the ledger that makes delivery idempotent; `worker`/`worker_pool`: the processes
  that answer, woken by serve or by PostgreSQL NOTIFY;
- `cron`: run-once jobs claimed across replicas; `scheduler`: its maintenance, report and
  catalog jobs; `monitors`: metric monitors' runs and alerts (the schedules and monitors
  themselves, and their stores, are `agent_core.schedules` and `agent_core.monitors`);
- `config`: the settings (the core's `AgentConfig` plus the gateway's; each platform reads its
  own); `startup_checks`: what every command checks first; `cli` and `*_commands`: `ba-agent`.
"""
