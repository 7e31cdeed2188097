"""Bounding a query result by size, the first row included.

A result is measured as the text length of its values (a cheap, driver-independent estimate of
what the rows cost once shown to the model). Rows are kept while they fit in ``byte_cap``; the
first row that does not fit ends the result (``truncated``). If the *first* row alone is larger
than the cap (``SELECT repeat('x', 20000000)``), its oversized values are cut so the row fits,
and each cut value ends with a note saying how long it was — the result never exceeds the cap
by more than that note.

:func:`fetch_capped` pulls rows from a DB-API ``fetchmany`` in batches sized from the rows seen
so far, so a result of large rows is not fetched far past the cap; :func:`cap_rows` applies the
same bound to rows already in memory.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

# Rows fetched first, before anything is known about their size.
_FIRST_BATCH = 1


def value_size(value: Any) -> int:
    """The size of one value as counted against the byte cap: its text length (NULL: 0)."""
    if value is None:
        return 0
    if isinstance(value, str):
        return len(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return len(value)
    return len(str(value))


def row_size(row: Sequence[Any]) -> int:
    return sum(value_size(value) for value in row)


def cut_note(original_size: int, kept: int, byte_cap: int) -> str:
    """The note ending a cut value."""
    return (
        f"… [value cut: {original_size:,} characters, first {kept:,} shown; results are limited "
        f"to {byte_cap:,} characters]"
    )


def shrink_row(row: Sequence[Any], byte_cap: int) -> list[Any]:
    """``row`` with its values cut so that together they take at most ``byte_cap`` characters.

    Values no larger than an equal share of the cap are kept unchanged (numbers, dates, short
    text); the space they leave goes to the larger values in column order, and a value that
    does not fit becomes text cut to the space left, ending with :func:`cut_note`.
    """
    sizes = [value_size(value) for value in row]
    share = byte_cap // max(len(row), 1)
    remaining = byte_cap - sum(size for size in sizes if size <= share)
    out: list[Any] = []
    for value, size in zip(row, sizes, strict=True):
        if size <= share:
            out.append(value)
        elif size <= remaining:
            out.append(value)
            remaining -= size
        else:
            kept = max(remaining, 0)
            out.append(_as_text(value)[:kept] + cut_note(size, kept, byte_cap))
            remaining -= kept
    return out


def cap_rows(rows: Sequence[Sequence[Any]], byte_cap: int) -> tuple[list[list[Any]], bool]:
    """Bound rows already fetched to ``byte_cap``; returns ``(rows, truncated)``."""
    kept: list[list[Any]] = []
    used = 0
    for row in rows:
        size = row_size(row)
        if used + size <= byte_cap:
            kept.append(list(row))
            used += size
            continue
        if not kept:
            kept.append(shrink_row(row, byte_cap))
        return kept, True
    return kept, False


def fetch_capped(
    fetchmany: Callable[[int], Sequence[Sequence[Any]]],
    row_cap: int,
    byte_cap: int,
    batch_size: int = 500,
) -> tuple[list[list[Any]], bool]:
    """Fetch rows through a DB-API ``fetchmany`` until the row or byte cap is reached.

    Returns ``(rows, truncated)``. ``truncated`` is True when more rows existed than
    ``row_cap`` (callers ask the database for ``row_cap + 1``), when a row did not fit in
    ``byte_cap``, or when the first row had to be cut to fit (see :func:`shrink_row`).

    The first batch is a single row; later batches are sized so that rows of the average size
    seen so far would about fill the remaining budget (at most ``batch_size``), so large rows
    are not fetched by the hundred.
    """
    rows: list[list[Any]] = []
    used = 0
    want = _FIRST_BATCH
    while True:
        batch = fetchmany(max(1, min(want, row_cap + 1 - len(rows))))
        if not batch:
            return rows, False
        for row in batch:
            if len(rows) == row_cap:
                return rows, True
            size = row_size(row)
            if used + size > byte_cap:
                if not rows:
                    rows.append(shrink_row(row, byte_cap))
                return rows, True
            rows.append(list(row))
            used += size
        average = max(used // max(len(rows), 1), 1)
        want = max(1, min(batch_size, (byte_cap - used) // average + 1))


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", errors="replace")
    return str(value)
