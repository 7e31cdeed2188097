"""The aiohttp service around the agent core, in three groups:

- `service/`: what runs while serving -- the routes each registered platform mounts, health,
  readiness and metrics (`app`); the durable inbox every accepted event is committed to before
  it is acknowledged (`inbox`, `inbox_postgres`); the dispatcher that answers it in order per
  thread, exactly once, under leases (`dispatcher`); the ledger that makes delivery idempotent
  (`outbound`); the processes that answer (`worker`, `worker_pool`); the platforms; and
  `runtime`, which builds a process in order: stores, platforms, the `Runtime`, and where it
  answers, its `Answering` part (agent, dispatcher, scheduler), each closed in reverse;
- `jobs/`: work on a clock, each run claimed by one process across replicas (`cron`): the
  maintenance and report jobs (`scheduler`), metric monitors' runs and alerts (`monitors`);
  the schedules and monitors themselves, and their stores, are `agent_core.schedules` and
  `agent_core.monitors`;
- `cli/`: the `ba-agent` command (`main`), one module per subcommand group, and
  `startup_checks`, what every command that reads data checks first.

At the top: the settings (`config`: the core's `AgentConfig` plus the gateway's; each platform
reads its own), logging, and the gateway's tables and their migrations.
"""
