"""The tools the agent can call, one module per family; the machinery that runs them is
`agent_core.toolkit`."""
