"""The machinery around tools: the protocol a tool implements (`protocol`), the call pipeline
that runs it (`pipeline`: validation, breaker, timeout and retries, output levels, data files),
how its result is shaped for the model (`formatting`, `levels`, `storage`), and the progress
line and approval gate the loop shows and asks around a call. The tools themselves live in
`agent_core.tools`.
"""
