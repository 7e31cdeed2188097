"""The aiohttp service around the agent core, in three groups over a few shared modules.

- `service`: the running service. `app`: the routes each registered platform mounts, health,
  readiness and metrics; `runtime`: the stores, the platforms' responders and the jobs, and
  what only an answering process has; `platforms`: the adapters built on the stores; `inbox`
  (+ `inbox_postgres`): the durable inbox every accepted event is committed to before it is
  acknowledged; `dispatcher`: answers it in order per thread, exactly once, under leases, with
  `approval_flow` for the approvals paused turns wait for; `outbound`: the ledger that makes
  delivery idempotent; `worker`/`worker_pool`: the processes that answer, woken by serve or by
  PostgreSQL NOTIFY;
- `jobs`: `cron`, run-once jobs claimed across replicas; `scheduler`: its maintenance, report
  and catalog jobs; `monitors`: metric monitors' runs and alerts;
- `cli`: the `ba-agent` command (`main`), a module per subcommand, and `startup_checks`, what
  every command checks first;
- shared: `config`, the settings (the core's `AgentConfig` plus the gateway's; each platform
  reads its own); `tables` and `feedback_tables`, the service's tables, and `migrate`, their
  migrations; `logs`, the logging set-up of every command.
"""
