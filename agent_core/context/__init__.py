"""Context management: what is sent to the model when the conversation outgrows its window.

- `agent_core.context.compression` -- pair-safe cutoffs, the dynamic keep window, pruning of
  old tool results, model-written summaries and the rendering of what is sent;
- `agent_core.context.history_file` -- the summarized messages, appended to a Markdown file
  in the thread's workspace;
- the hooks that drive them are `agent_core.hooks.compression` and `agent_core.hooks.refocus`.

This module itself only recognises the API's context-overflow error, and imports nothing from
the agent core, so `agent_core.model` can use it without an import cycle.
"""

from __future__ import annotations

import re

import anthropic

_TOO_LONG = re.compile(r"prompt is too long|input is too long|exceeds? the (maximum )?context", re.I)
_TOKENS = re.compile(r"(\d[\d,]*)\s*tokens\s*>\s*(\d[\d,]*)")


def _error_fields(exc: anthropic.APIStatusError) -> tuple[str | None, str]:
    body = exc.body
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        error = body["error"]
        return error.get("type"), str(error.get("message", ""))
    return None, str(exc)


def is_context_overflow(exc: BaseException) -> bool:
    """Whether `exc` is the API's "prompt is too long" rejection (HTTP 400 invalid_request_error).

    Only this error is worth a compress-and-retry; every other 400 is a bug to surface.
    """
    if not isinstance(exc, anthropic.APIStatusError) or exc.status_code != 400:
        return False
    error_type, message = _error_fields(exc)
    return error_type == "invalid_request_error" and bool(_TOO_LONG.search(message))


def overflow_sizes(exc: anthropic.APIStatusError) -> tuple[int | None, int | None]:
    """The prompt size and the limit the API reported in a context-overflow error, if it said
    ("prompt is too long: 208310 tokens > 200000 maximum")."""
    match = _TOKENS.search(_error_fields(exc)[1])
    if not match:
        return None, None
    return int(match[1].replace(",", "")), int(match[2].replace(",", ""))
