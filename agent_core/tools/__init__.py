"""The tools the agent can call, one module per family, each exporting ``build(deps)`` (its
tools from a `agent_core.tools.deps.ToolDeps`); `standard` names the module of each standard
tool. The machinery that runs them is `agent_core.toolkit`."""
