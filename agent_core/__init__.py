"""The platform-agnostic agent core; `agent.build_agent(config, store, …)` is its face and
`config.AgentConfig` owns every core setting.

The loop (`loop`) runs a turn as run → step → query → observe on the Anthropic Messages API,
with typed run dependencies and turn state (`run_context`), a typed request the hooks
transform (`request`, `hooks/`), the tools (`tools/`: implementations only, each module's
`build(deps)`) and the machinery that runs them (`toolkit/`: protocol, call pipeline, result
formatting), skills, sub-agents and context management (`context/`, `tokens/`). Beneath it:
data access (`data/`), governed metrics (`semantic/`), the schema catalog (`catalog/`), data
permissions, audit and approvals (`governance/`), each feature in one home with its store
(`schedules/`, `monitors/`), analytics and charts, the thread store (`store/`).
"""
