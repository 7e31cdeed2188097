"""Keeping a long conversation inside the model's context window, without losing it.

Compression changes what is *sent*, never what is *stored*: messages stay in the database
(append-only) and `ContextState` (in the thread's state) records two marks that only move
forward:

* ``pruned_before`` -- older messages are sent with large tool results replaced by a short
  placeholder naming the data file (the complete data), and long tool inputs shortened;
* ``summary_through`` -- the first messages are replaced by one user message holding a
  model-written summary (plus, verbatim, the user's requests, the errors and the instructions
  of still-active skills), and are appended to the thread's history file.

The steps, cheapest first (see `agent_core.hooks.compression` for when they run):

1. prune old large tool results -- opportunistically once the prompt cache has expired (the
   prefix is re-written then anyway), or when over the threshold;
2. summarize everything before the keep window with the model, when still over the threshold.

Invariants, each covered by tests:

* a cutoff never separates a ``tool_use`` from its ``tool_result`` (`cut_points`);
* the keep window holds 3-15 recent rounds, more while a tool chain, a skill or open todos
  are active, fewer if the rounds are too large for the keep budget (`keep_rounds`,
  `choose_cutoff`);
* rendering is deterministic, so the bytes sent for old messages only change when a mark moves.
"""

from __future__ import annotations

import json
import logging
import re
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from agent_core.config import CompressionConfig
from agent_core.messages import (
    RedactedThinkingBlock,
    Role,
    StandardMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from agent_core.model import ModelClient, ModelResponse
from agent_core.state import ContextState, ThreadState
from agent_core.tokens import TokenCounter

log = logging.getLogger(__name__)

SUMMARY_SECTIONS = (
    "User intent",
    "Key decisions and definitions",
    "Tool outcomes and data files",
    "Open questions",
    "Next steps",
)
ACTIVATE_SKILL_TOOL = "activate_skill"
_FILE_REF = re.compile(r"/(?:data|charts|reports|uploads)/[^\s)\]\"'`,;]+")


class SummaryFailed(Exception):
    """The summarizer returned no usable text."""


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


# --------------------------------------------------------------------------- pruning


def _has_thinking(message: StandardMessage) -> bool:
    return any(isinstance(b, ThinkingBlock | RedactedThinkingBlock) for b in message.content)


def _prunable_result(block: ToolResultBlock, config: CompressionConfig) -> bool:
    # Errors are kept whole: what went wrong must stay visible until it is summarized.
    return not block.is_error and len(block.content) >= config.prune_min_chars


def is_prunable(message: StandardMessage, config: CompressionConfig) -> bool:
    """Whether pruning would change how `message` is sent."""
    if any(_prunable_result(b, config) for b in message.tool_results()):
        return True
    # Assistant turns with thinking are left intact: their blocks are signed as a whole.
    return not _has_thinking(message) and any(
        _longest_string(call.input) > config.prune_input_chars for call in message.tool_uses()
    )


def prune_mark(
    history: Sequence[StandardMessage], state: ContextState, upto: int, config: CompressionConfig
) -> int:
    """The new ``pruned_before`` for pruning everything before `upto`: unchanged if moving it
    would change no bytes (so the cached prefix is not invalidated for nothing)."""
    start = max(state.pruned_before, state.summary_through)
    if upto > start and any(is_prunable(history[i], config) for i in range(start, upto)):
        return upto
    return state.pruned_before


def _longest_string(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return max((_longest_string(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return max((_longest_string(v) for v in value), default=0)
    return 0


def _shorten(value: Any, limit: int) -> Any:
    if isinstance(value, str) and len(value) > limit:
        return f"{value[:limit]}… [{len(value) - limit:,} characters shortened]"
    if isinstance(value, dict):
        return {k: _shorten(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [_shorten(v, limit) for v in value]
    return value


def pruned_placeholder(tool: str, content: str) -> str:
    """What an old large tool result is sent as: its size, its data files and first lines."""
    files = sorted(set(_FILE_REF.findall(content)))
    where = f"Complete data: {', '.join(files)}." if files else "Run the call again if you need its details."
    head = "\n".join(content[:400].splitlines()[:5])
    return (
        f"[Older result of {tool}, pruned from the context to save space "
        f"({len(content):,} characters). {where} It began:\n{head}\n…]"
    )


class ContextRenderer:
    """Renders what is sent for the stored history under a `ContextState`.

    Deterministic: the same history and state always give the same bytes. Pruned renderings
    are cached by message id (stored messages never change).
    """

    def __init__(self, config: CompressionConfig, cache_size: int = 20_000) -> None:
        self.config = config
        self._pruned: OrderedDict[str, dict[str, Any]] = OrderedDict()
        self._cache_size = cache_size

    def pruned(self, message: StandardMessage, previous: StandardMessage | None) -> dict[str, Any]:
        """`message` in API shape with large results and long inputs cut down."""
        if not is_prunable(message, self.config):
            return message.to_api()
        cached = self._pruned.get(message.id)
        if cached is None:
            names = {c.id: c.name for c in previous.tool_uses()} if previous else {}
            cached = {
                "role": message.role.value,
                "content": [self._block(b, names, message) for b in message.content],
            }
            self._pruned[message.id] = cached
            while len(self._pruned) > self._cache_size:
                self._pruned.popitem(last=False)
        return cached

    def _block(self, block: Any, names: dict[str, str], message: StandardMessage) -> dict[str, Any]:
        if isinstance(block, ToolResultBlock) and _prunable_result(block, self.config):
            tool = names.get(block.tool_use_id, "a tool")
            content = pruned_placeholder(tool, block.content)
            return {**block.model_dump(), "content": content}
        if isinstance(block, ToolUseBlock) and not _has_thinking(message):
            return {**block.model_dump(), "input": _shorten(block.input, self.config.prune_input_chars)}
        return block.model_dump()

    def rendered(self, history: Sequence[StandardMessage], state: ContextState, index: int) -> dict[str, Any]:
        """How ``history[index]`` is sent under `state` (pruned or verbatim)."""
        message = history[index]
        if index < state.pruned_before:
            return self.pruned(message, history[index - 1] if index else None)
        return message.to_api()

    def messages(self, history: Sequence[StandardMessage], state: ContextState) -> list[dict[str, Any]]:
        """The request's messages: the summary, then the rest, merged by role as the API wants."""
        merged: list[dict[str, Any]] = []
        if state.summary:
            merged.append({"role": "user", "content": [{"type": "text", "text": state.summary}]})
        for index in range(state.summary_through, len(history)):
            api = self.rendered(history, state, index)
            if merged and merged[-1]["role"] == api["role"]:
                merged[-1] = {"role": api["role"], "content": merged[-1]["content"] + api["content"]}
            else:
                merged.append(api)
        return merged


# --------------------------------------------------------------------------- summarizing

SUMMARIZER_SYSTEM = """\
You maintain the running summary of a conversation between business users and BA-Agent, a \
data-analysis assistant in a team chat. Your summary replaces the original messages in the \
agent's context, so the agent must be able to continue the work from it alone.

Write the summary in the language the users write in, in Markdown, with exactly these \
sections in this order:
{sections}

Rules:
- Keep exact figures, metric definitions, filters, date ranges, table and column names, SQL \
that produced reported numbers, and every file path (/data/…, /charts/…, /reports/…, /uploads/…).
- Record every user request and what became of it, and every error with its cause and whether \
it was resolved.
- Fold the previous summary in: keep what still matters, drop what was superseded.
- Leave out greetings, repetition and raw data rows (name the data file instead).
- Stay under {words} words. Write only the summary, no preamble."""


def transcript_lines(messages: Sequence[StandardMessage], first_number: int, excerpt_chars: int) -> list[str]:
    """The messages as plain text for the summarizer (tool results excerpted, head and tail)."""
    names: dict[str, str] = {}
    lines = []
    for offset, message in enumerate(messages):
        parts = []
        for block in message.content:
            if isinstance(block, TextBlock):
                parts.append(block.text)
            elif isinstance(block, ToolUseBlock):
                names[block.id] = block.name
                payload = _excerpt(json.dumps(block.input, ensure_ascii=False), excerpt_chars)
                parts.append(f"[calls {block.name}: {payload}]")
            elif isinstance(block, ToolResultBlock):
                status = "ERROR from" if block.is_error else "result of"
                tool = names.get(block.tool_use_id, "a tool")
                parts.append(f"[{status} {tool}: {_excerpt(block.content, excerpt_chars)}]")
        who = "tool" if message.role is Role.USER and not is_user_request(message) else message.role.value
        if parts:
            lines.append(f"#{first_number + offset} {who}: " + "\n".join(parts))
    return lines


def _excerpt(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    head = text[: limit * 2 // 3]
    tail = text[-(limit // 3) :]
    return f"{head} … [{len(text) - len(head) - len(tail):,} characters omitted] … {tail}"


def ensure_sections(summary: str) -> str:
    """The summary with every required section present (missing ones added as empty)."""
    missing = [
        s for s in SUMMARY_SECTIONS if not re.search(rf"^#+\s*{re.escape(s)}\s*$", summary, re.M | re.I)
    ]
    return summary.rstrip() + "".join(f"\n\n## {s}\n- (none recorded)" for s in missing)


class Summarizer:
    """Writes the structured summary with the model (one call per transcript chunk)."""

    def __init__(self, model: ModelClient, counter: TokenCounter, config: CompressionConfig) -> None:
        self._model = model
        self._counter = counter
        self._config = config

    async def summarize(
        self, previous: str | None, messages: Sequence[StandardMessage], first_number: int
    ) -> tuple[str, list[ModelResponse]]:
        """Fold `messages` into `previous`; returns the summary and the model responses (usage).

        Raises SummaryFailed, or ModelUnavailable from the model client.
        """
        system = SUMMARIZER_SYSTEM.format(
            sections="\n".join(f"## {s}" for s in SUMMARY_SECTIONS), words=self._config.summary_words
        )
        responses = []
        summary = previous
        for chunk in self._chunks(transcript_lines(messages, first_number, self._config.excerpt_chars)):
            prompt = (
                f"<previous_summary>\n{summary or '(none: this is the start of the conversation)'}\n"
                f"</previous_summary>\n\n<transcript>\n{chunk}\n</transcript>\n\n"
                "Write the updated summary covering the previous summary and the transcript."
            )
            request = {
                "system": system,
                "messages": [{"role": "user", "content": [{"type": "text", "text": prompt}]}],
            }
            response = await self._model.complete(request, model=self._config.summary_model)
            responses.append(response)
            text = "\n".join(b.text for b in response.content if isinstance(b, TextBlock)).strip()
            if not text:
                raise SummaryFailed(f"the summarizer returned no text (stop reason {response.stop_reason})")
            summary = text
        if summary is None:
            raise SummaryFailed("nothing to summarize")
        return ensure_sections(summary), responses

    def _chunks(self, lines: list[str]) -> list[str]:
        chunks: list[list[str]] = [[]]
        size = 0
        for line in lines:
            tokens = self._counter.text(line)
            if chunks[-1] and size + tokens > self._config.summary_chunk_tokens:
                chunks.append([])
                size = 0
            chunks[-1].append(line)
            size += tokens
        return ["\n\n".join(c) for c in chunks if c]


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
