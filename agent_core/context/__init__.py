"""Context management: what is sent to the model when the conversation outgrows its window.

- `agent_core.context.cutoff` -- pair-safe cutoffs, the dynamic keep window, and what a
  summary carries verbatim (pure functions of the history);
- `agent_core.context.pruning` -- older large tool results sent as placeholders, and the
  deterministic rendering of what is sent;
- `agent_core.context.summarizer` -- the model-written summary of the oldest messages;
- `agent_core.context.history_file` -- the summarized messages, appended to a Markdown file
  in the thread's workspace;
- the hooks that drive them are `agent_core.hooks.compression` and `agent_core.hooks.refocus`.
"""
