"""Tools the agent can call: the protocol, the registry, and the tools themselves."""
