"""What both workspace backends do the same way once they hold a file's bytes: a page of
numbered lines, the text an edit leaves, the bytes a write stores, the lines a grep finds, and
the regex of a glob. The backends differ only in how they reach storage (`local`, `s3`).
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from typing import Any

from agent_core.workspace.backend import (
    EditConflict,
    FileTooLarge,
    GrepMatch,
    InvalidArgument,
    NotTextFile,
    PathNotAllowed,
    ReadResult,
    WorkspaceLimits,
    split_virtual_path,
)

# How much of a file's start is looked at for a NUL byte to call it binary.
BINARY_SNIFF_BYTES = 8192
_CUT_MARK = " … [line cut]"


def child_path(vdir: str, name: str) -> str:
    """The virtual path of ``name`` in folder ``vdir``."""
    return f"{vdir.rstrip('/')}/{name}"


# ---------------------------------------------------------------- reading


def page_lines(offset: int, limit: int | None, limits: WorkspaceLimits) -> int:
    """How many lines a read from ``offset`` may show; InvalidArgument for a bad page."""
    if offset < 0:
        raise InvalidArgument("offset must be 0 or more")
    if limit is not None and limit < 1:
        raise InvalidArgument("limit must be 1 or more")
    return min(limit or limits.read_max_lines, limits.read_max_lines)


def read_page(
    f: io.BufferedReader[Any], vpath: str, offset: int, max_lines: int, limits: WorkspaceLimits
) -> ReadResult:
    """The page of text file ``f`` (at ``vpath``) from line ``offset``: numbered lines, each cut
    at ``line_max_chars``, at most ``max_lines`` of them and ``read_max_bytes`` of text."""
    if b"\x00" in f.peek(BINARY_SNIFF_BYTES)[:BINARY_SNIFF_BYTES]:
        raise NotTextFile(f"{vpath} is a binary file; it cannot be shown as text", vpath)
    max_chars = limits.line_max_chars
    lines = _iter_lines(f, max_chars * 4)  # 4 = worst-case UTF-8 bytes per character
    for _ in zip(range(offset), lines, strict=False):
        pass  # skip to the requested page; zip stops before over-reading `lines`
    shown: list[str] = []
    size = cut_lines = 0
    more = False
    for raw, cut in lines:
        if len(shown) >= max_lines:
            more = True
            break
        text, was_cut = _decode_line(raw, max_chars, cut)
        numbered = f"{offset + len(shown) + 1:>6}\t{text}"
        size += len(numbered.encode()) + 1
        if shown and size > limits.read_max_bytes:
            more = True
            break
        shown.append(numbered)
        cut_lines += was_cut
    return ReadResult(
        path=vpath,
        content="\n".join(shown),
        offset=offset,
        lines=len(shown),
        next_offset=offset + len(shown) if more else None,
        cut_lines=cut_lines,
    )


def _iter_lines(f: io.BufferedReader[Any], max_line_bytes: int) -> Iterator[tuple[bytes, bool]]:
    """Yield (line without newline, was_cut), reading at most `max_line_bytes` per line.

    Bounded reads matter: a single-line multi-gigabyte file must not be loaded into memory.
    """
    while True:
        chunk = f.readline(max_line_bytes)
        if not chunk:
            return
        if chunk.endswith(b"\n"):
            yield chunk.rstrip(b"\r\n"), False
            continue
        cut = False
        # Either EOF without newline or an over-long line: skip the rest of the line.
        while True:
            rest = f.readline(max_line_bytes)
            if not rest:
                break
            cut = cut or bool(rest.rstrip(b"\r\n"))  # a bare newline is not cut content
            if rest.endswith(b"\n"):
                break
        yield chunk.rstrip(b"\r"), cut


def _decode_line(raw: bytes, max_chars: int, cut: bool) -> tuple[str, bool]:
    text = raw.decode("utf-8", errors="replace")
    if len(text) > max_chars:
        text, cut = text[:max_chars], True
    return (text + _CUT_MARK if cut else text), cut


# ---------------------------------------------------------------- writing


def data_to_write(vpath: str, content: str | bytes, limits: WorkspaceLimits) -> tuple[list[str], bytes]:
    """The path's segments and the bytes of ``content``, checked: inside an area, text or bytes,
    within ``write_max_bytes``."""
    segments = split_virtual_path(vpath)
    if len(segments) < 2:
        raise PathNotAllowed(f"cannot write {vpath}: files go inside an area, e.g. /reports/summary.md", vpath)
    if isinstance(content, str):
        data = content.encode("utf-8")
    elif isinstance(content, bytes | bytearray | memoryview):
        data = bytes(content)
    else:
        raise InvalidArgument("content must be text or bytes")
    cap = limits.write_max_bytes
    if len(data) > cap:
        raise FileTooLarge(f"content is {len(data)} bytes; the limit is {cap}", vpath)
    return segments, data


def check_edit(old: str, new: str) -> None:
    """EditConflict for an edit that could not change anything."""
    if old == "":
        raise EditConflict("old text must not be empty")
    if old == new:
        raise EditConflict("old and new text are identical; nothing to change")


def edit_too_large(vpath: str, size: int, cap: int) -> FileTooLarge:
    """The error of a file of ``size`` bytes (as stored) too large to edit."""
    return FileTooLarge(f"{vpath} is {size} bytes; edit() handles files up to {cap}", vpath)


def edited(raw: bytes, vpath: str, old: str, new: str, replace_all: bool, cap: int) -> tuple[str, int]:
    """The text of ``raw`` (read up to ``cap`` + 1 bytes) with ``old`` replaced by ``new``, and
    how many replacements were made; ``old`` must occur once unless ``replace_all``."""
    if len(raw) > cap:
        raise FileTooLarge(f"{vpath} is larger than the {cap} byte edit limit", vpath)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise NotTextFile(f"{vpath} is not UTF-8 text; it cannot be edited", vpath) from None
    count = text.count(old)
    if count == 0:
        raise EditConflict(f"the old text was not found in {vpath}", vpath)
    if count > 1 and not replace_all:
        raise EditConflict(
            f"the old text occurs {count} times in {vpath}; include more surrounding text "
            "to make it unique, or pass replace_all=true",
            vpath,
        )
    if replace_all:
        return text.replace(old, new), count
    return text.replace(old, new, 1), 1


# ---------------------------------------------------------------- searching


def grep_data(
    data: bytes, vpath: str, needle: str, ignore_case: bool, limits: WorkspaceLimits, budget: int
) -> list[GrepMatch]:
    """Up to ``budget`` lines of ``data`` (read up to ``grep_max_file_bytes`` + 1 bytes) that
    contain ``needle`` (casefolded when ``ignore_case``); none for a larger or binary file."""
    if len(data) > limits.grep_max_file_bytes or b"\x00" in data[:BINARY_SNIFF_BYTES]:
        return []
    found: list[GrepMatch] = []
    max_chars = limits.line_max_chars
    # Split on "\n" only (not str.splitlines) so line numbers agree with read().
    lines = data.decode("utf-8", errors="replace").split("\n")
    for number, line in enumerate((raw.removesuffix("\r") for raw in lines), 1):
        if needle in (line.casefold() if ignore_case else line):
            shown = line if len(line) <= max_chars else line[:max_chars] + _CUT_MARK
            found.append(GrepMatch(path=vpath, line_number=number, line=shown))
            if len(found) >= budget:
                break
    return found


def glob_filter(pattern: str) -> re.Pattern[str]:
    """The regex of glob ``pattern`` (``*``, ``?``, ``[...]``, ``**``), matched against a whole
    relative path: ``*`` and ``?`` stay within one segment; ``**/`` spans any number of folders.
    InvalidArgument for an empty pattern or one reaching outside (``..``, NUL, backslashes)."""
    if not pattern.strip():
        raise InvalidArgument("glob pattern must not be empty")
    if "\x00" in pattern or "\\" in pattern or ".." in pattern.split("/"):
        raise InvalidArgument(f"glob pattern is not allowed: {pattern[:200]!r}")
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        if pattern.startswith("**/", i):
            out.append("(?:[^/]+/)*")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and (end := pattern.find("]", i + 2)) != -1:
            body = pattern[i + 1 : end]
            negate = body.startswith("!")
            body = re.escape(body[1:] if negate else body).replace(r"\-", "-")
            out.append(f"[{'^' if negate else ''}{body}]")
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))
