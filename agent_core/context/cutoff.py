"""Where a summary cuts the conversation, and what it carries: pure functions of the history.

Compression changes what is *sent*, never what is *stored*: messages stay in the database
(append-only) and `ContextState` (in the thread's state) records two marks that only move
forward -- ``pruned_before`` (see `agent_core.context.pruning`) and ``summary_through``: the
first messages are replaced by one user message holding a model-written summary
(`agent_core.context.summarizer`) plus, verbatim, the user's requests, the errors and the
instructions of still-active skills (`carried_verbatim`).

Invariants, each covered by tests:

* a cutoff never separates a ``tool_use`` from its ``tool_result`` (`cut_points`);
* the keep window holds 3-15 recent rounds, more while a tool chain, a skill or open todos
  are active, fewer if the rounds are too large for the keep budget (`keep_rounds`,
  `choose_cutoff`).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from agent_core.config import CompressionConfig
from agent_core.messages import Role, StandardMessage, ToolUseBlock
from agent_core.state import ThreadState
from agent_core.tokens.estimate import TokenCounter

ACTIVATE_SKILL_TOOL = "activate_skill"

# --------------------------------------------------------------------------- structure


def is_user_request(message: StandardMessage) -> bool:
    """A message the user wrote (as opposed to tool results, which travel as user messages)."""
    return message.role is Role.USER and not message.tool_results()


def cut_points(history: Sequence[StandardMessage]) -> list[int]:
    """Indices i (0 < i < len) where ``history[:i]`` / ``history[i:]`` is a pair-safe split.

    Safe means no ``tool_use`` before i has its ``tool_result`` at or after i, and
    ``history[i]`` carries no tool results at all (they must follow their call directly).
    """
    points: list[int] = []
    open_calls: set[str] = set()
    for i, message in enumerate(history):
        results = message.tool_results()
        if i > 0 and not open_calls and not results:
            points.append(i)
        for block in results:
            open_calls.discard(block.tool_use_id)
        open_calls.update(call.id for call in message.tool_uses())
    return points


def round_starts(history: Sequence[StandardMessage]) -> list[int]:
    """Where rounds begin: the pair-safe cut points, except between a request and its answer.

    A round is one model step -- an assistant message with the results of its tool calls --
    and a user request belongs to the step that answers it.
    """
    return [
        i
        for i in cut_points(history)
        if not (history[i].role is Role.ASSISTANT and is_user_request(history[i - 1]))
    ]


def latest_request_index(history: Sequence[StandardMessage]) -> int | None:
    for i in range(len(history) - 1, -1, -1):
        if is_user_request(history[i]):
            return i
    return None


def keep_rounds(history: Sequence[StandardMessage], state: ThreadState, config: CompressionConfig) -> int:
    """How many recent rounds to keep verbatim: more while work is in flight.

    base + the running tool chain (up to 4) + 2 per active skill (up to 4) + 2 with open
    todos + 2 after a recent tool error, clamped to [min, max].
    """
    start = latest_request_index(history)
    turn = history[start + 1 :] if start is not None else history
    # A chain is in flight while the newest message is tool results the model must act on.
    in_chain = bool(history) and bool(history[-1].tool_results())
    chain = sum(1 for m in turn if m.role is Role.ASSISTANT and m.tool_uses()) if in_chain else 0
    recent_error = any(b.is_error for m in history[-10:] for b in m.tool_results())
    count = (
        config.base_keep_rounds
        + min(4, chain)
        + min(4, 2 * state.skills.depth)
        + (2 if state.open_todos() else 0)
        + (2 if recent_error else 0)
    )
    return max(config.min_keep_rounds, min(config.max_keep_rounds, count))


def choose_cutoff(
    history: Sequence[StandardMessage],
    state: ThreadState,
    counter: TokenCounter,
    config: CompressionConfig,
    window: int,
    *,
    force: bool = False,
) -> int | None:
    """Where the next summary should end (a round start), or None if nothing can be summarized.

    Keeps `keep_rounds` rounds, then drops the oldest kept rounds while they exceed the keep
    budget (never below the minimum), then reaches back to the latest user request if that
    still fits the budget. `force` (after a context overflow) halves the budget and allows
    keeping a single round.
    """
    floor = state.context.summary_through
    starts = [i for i in round_starts(history) if i > floor]
    if not starts:
        return None
    budget = window * config.keep_budget / (2 if force else 1)
    minimum = 1 if force else config.min_keep_rounds
    wanted = keep_rounds(history, state, config)
    if len(starts) < wanted and not force:
        return None  # everything after the last summary is inside the keep window
    position = max(0, len(starts) - wanted)
    suffix = _suffix_tokens(history, floor, counter)
    while suffix[starts[position] - floor] > budget and len(starts) - position > minimum:
        position += 1
    cut = starts[position]
    request = latest_request_index(history)
    if (
        request is not None
        and floor < request < cut
        and request in starts
        and suffix[request - floor] <= budget
    ):
        cut = request
    return cut


def _suffix_tokens(history: Sequence[StandardMessage], floor: int, counter: TokenCounter) -> list[int]:
    """suffix[k] = estimated tokens of history[floor + k:]."""
    sizes = [counter.message(m) for m in history[floor:]]
    suffix = [0] * (len(sizes) + 1)
    for k in range(len(sizes) - 1, -1, -1):
        suffix[k] = suffix[k + 1] + sizes[k]
    return suffix


# --------------------------------------------------------------------------- what a summary carries


def carried_verbatim(
    history: Sequence[StandardMessage], end: int, state: ThreadState, config: CompressionConfig
) -> str:
    """What the summary carries word for word from ``history[:end]``: the user's requests,
    the errors, and the instructions of skills that are still active."""
    calls: dict[str, ToolUseBlock] = {}
    requests: list[str] = []
    errors: list[str] = []
    instructions: dict[str, str] = {}
    active = set(state.skills.chain)
    for message in history[:end]:
        if is_user_request(message) and message.text.strip():
            requests.append(_clip(message.text.strip(), 600))
        calls.update((call.id, call) for call in message.tool_uses())
        for block in message.tool_results():
            call = calls.get(block.tool_use_id)
            tool = call.name if call else "a tool"
            if block.is_error:
                errors.append(f"{tool}: {_clip(_error_message(block.content), 300)}")
            elif call is not None and tool == ACTIVATE_SKILL_TOOL:
                skill = str(call.input.get("name"))
                # The injection is the long result; re-activations return a one-line note.
                if skill in active and len(block.content) > len(instructions.get(skill, "")):
                    instructions[skill] = block.content
    parts = []
    if requests:
        shown = requests[-config.max_listed_requests :]
        lines = [f"{i}. {r}" for i, r in enumerate(shown, len(requests) - len(shown) + 1)]
        if len(shown) < len(requests):
            lines.insert(0, f"({len(requests) - len(shown)} earlier requests are in the transcript file.)")
        parts.append("## The user's requests so far (verbatim)\n" + "\n".join(lines))
    if errors and config.max_listed_errors:
        parts.append("## Errors so far\n" + "\n".join(f"- {e}" for e in errors[-config.max_listed_errors :]))
    for skill, text in instructions.items():
        parts.append(f"## Instructions of the active skill {skill} (verbatim)\n{text}")
    return "\n\n".join(parts)


def skills_to_forget(history: Sequence[StandardMessage], end: int, state: ThreadState) -> list[str]:
    """Injected skills whose instructions are only in ``history[:end]`` and that are not
    active (active ones are carried verbatim): activating them again must re-send them."""
    summarized = {
        str(call.input.get("name"))
        for m in history[:end]
        for call in m.tool_uses()
        if call.name == ACTIVATE_SKILL_TOOL
    }
    return [s for s in state.skills.injected if s in summarized and s not in state.skills.chain]


def summary_text(model_summary: str, carried: str, end: int, history_path: str) -> str:
    """The text of the user message that stands in for the first `end` messages."""
    body = f"{model_summary.strip()}\n\n{carried}".strip()
    return (
        "<conversation_summary>\n"
        f"The first {end} messages of this conversation were summarized to keep the context "
        "small. This is background, not a new request. Their complete transcript is in "
        f"{history_path} in the conversation's workspace: read it when you need exact details.\n\n"
        f"{body}\n"
        "</conversation_summary>"
    )


def _error_message(content: str) -> str:
    try:
        error = json.loads(content)["error"]
        return f"{error.get('message', '')} ({error.get('code') or error.get('type')})"
    except (ValueError, KeyError, TypeError):
        return content


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit] + "…"
