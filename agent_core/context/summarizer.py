"""The model-written summary that stands in for the oldest messages of a conversation."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from agent_core.config import CompressionConfig
from agent_core.context.cutoff import is_user_request
from agent_core.messages import Role, StandardMessage, TextBlock, ToolResultBlock, ToolUseBlock
from agent_core.model import ModelClient, ModelResponse
from agent_core.request import ModelRequest, SystemBlock
from agent_core.tokens.estimate import TokenCounter

SUMMARY_SECTIONS = (
    "User intent",
    "Key decisions and definitions",
    "Tool outcomes and data files",
    "Open questions",
    "Next steps",
)

class SummaryFailed(Exception):
    """The summarizer returned no usable text."""


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
            request = ModelRequest(
                system=(SystemBlock(system),),
                messages=[{"role": "user", "content": [{"type": "text", "text": prompt}]}],
                tools=[],
                model=self._config.summary_model,
            )
            response = await self._model.complete(request)
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
