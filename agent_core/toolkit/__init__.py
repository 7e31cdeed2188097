"""The machinery around tools: the protocol a tool implements (`protocol`), the call pipeline
that runs them (`pipeline`: validation, breaker, timeout and retries, output levels, data
files), how a result is shaped for the model (`formatting`, `levels`, `storage`), the progress
line and approval gate the loop shows and asks around a call, and the read paths tools share
(`queries` for data, `files` for the workspace). The tools themselves live in
`agent_core.tools`.
"""
