"""The summarized part of a conversation, verbatim, in a Markdown file of its workspace.

Compression replaces old messages by a summary in what is sent to the model; the messages
stay in the database, and are also appended here, so the agent (and an operator) can read
them back in full. The file lives at

    <data_dir>/workspaces/<thread_dir_name(thread_id)>/conversation_history/<same name>.md

and the summary names it by its virtual path ``/conversation_history/<name>.md``.

Appending is idempotent: every section ends with a marker recording how many messages of the
conversation the file holds, and an append skips what is already there (a compression that
failed after writing the file writes nothing twice when it is retried).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from agent_core.messages import (
    RedactedThinkingBlock,
    Role,
    StandardMessage,
    TextBlock,
    ThinkingBlock,
    ToolResultBlock,
    ToolUseBlock,
)
from agent_core.workspace.local import thread_dir_name

HISTORY_DIR = "conversation_history"
_MARKER = re.compile(rb"<!-- ba-agent:through=(\d+) -->")
_TAIL_BYTES = 4096
_BACKTICKS = re.compile(r"`+")


def history_file(data_dir: Path, thread_id: str) -> Path:
    """The real path of the thread's history file."""
    name = thread_dir_name(thread_id)
    return Path(data_dir) / "workspaces" / name / HISTORY_DIR / f"{name}.md"


def history_virtual_path(thread_id: str) -> str:
    """The file's path inside the thread's workspace, as the summary names it."""
    return f"/{HISTORY_DIR}/{thread_dir_name(thread_id)}.md"


async def append_history(
    data_dir: Path, thread_id: str, history: Sequence[StandardMessage], start: int, end: int
) -> str:
    """Make the file hold `history[:end]`: append `history[start:end]` minus what it already has.

    `start` is where the caller's new section begins (the previous summary's end); returns the
    virtual path. File I/O runs in a worker thread.
    """
    path = history_file(data_dir, thread_id)
    await asyncio.to_thread(_append, path, thread_id, history, start, end)
    return history_virtual_path(thread_id)


def messages_in_file(path: Path) -> int:
    """How many leading messages of the conversation the file holds (0 if there is no file)."""
    try:
        with path.open("rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - _TAIL_BYTES))
            markers = _MARKER.findall(f.read())
            if not markers and size > _TAIL_BYTES:  # a long hand-edit after the last marker
                f.seek(0)
                markers = _MARKER.findall(f.read())
    except FileNotFoundError:
        return 0
    return int(markers[-1]) if markers else 0


def _append(path: Path, thread_id: str, history: Sequence[StandardMessage], start: int, end: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    have = messages_in_file(path)
    first = max(start, have)
    if first >= end:
        return
    parts = []
    if have == 0:
        parts.append(
            f"# Conversation history of thread {thread_id}\n\n"
            "Messages moved out of the model's context when the conversation was compressed, "
            "verbatim and oldest first. The database keeps every message as well.\n"
        )
    stamp = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts.append(f"\n## Messages {first + 1}–{end} (summarized {stamp})\n")
    parts.extend(render_message(i + 1, history[i]) for i in range(first, end))
    parts.append(f"\n<!-- ba-agent:through={end} -->\n")
    data = "".join(parts).encode()
    # O_NOFOLLOW: never write through a link planted where the file should be.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o640)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def render_message(number: int, message: StandardMessage) -> str:
    """One message as a Markdown section (content complete, in fences that cannot break)."""
    is_results = message.role is Role.USER and bool(message.tool_results())
    who = "tool results" if is_results and not message.text else message.role.value
    when = message.created_at.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    lines = [f"\n### {number} · {who} · {when}\n"]
    for block in message.content:
        if isinstance(block, TextBlock):
            lines.append(block.text.rstrip() + "\n")
        elif isinstance(block, ThinkingBlock):
            lines.append("*Thinking:*\n" + _fenced(block.thinking))
        elif isinstance(block, RedactedThinkingBlock):
            lines.append("*(redacted thinking)*\n")
        elif isinstance(block, ToolUseBlock):
            lines.append(f"**Tool call** `{block.name}` (`{block.id}`)\n")
            lines.append(_fenced(json.dumps(block.input, ensure_ascii=False, indent=1), "json"))
        elif isinstance(block, ToolResultBlock):
            status = " — error" if block.is_error else ""
            lines.append(f"**Tool result** for `{block.tool_use_id}`{status}\n")
            lines.append(_fenced(block.content))
    return "\n".join(lines)


def _fenced(text: str, language: str = "") -> str:
    longest = max((len(m) for m in _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text.rstrip()}\n{fence}\n"
