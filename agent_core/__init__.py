"""Platform-agnostic agent core: message model, ReAct loop, tools, skills, persisted threads."""
