"""Database error texts without values from the rows: what the model and the user are shown.

A database's error message may quote the value that failed -- ``invalid input syntax for type
integer: "EAST-123|99"``, ``Could not convert string 'x' to INT32``, ``requested character too
large for encoding: 98765``. On a source governed by an access policy that value can belong to
a row or column the asker may not see (the row filter's fence keeps the query's own
expressions off hidden rows, but an error text is the last place a value could slip through,
and a failed query returns no rows the budget would count). So every quoted span and every
number in the message that the query text itself does not contain is replaced by ``…``: what
the user wrote (a misspelt column, a literal) stays, what came from the data goes. The error's
class stays too -- the SQLSTATE (PostgreSQL), the error number (MySQL/MariaDB), DuckDB's error
type -- so the model can still tell a bad cast from a missing column and fix its query.
"""

from __future__ import annotations

import re

REDACTED = "…"

# A quoted span ('…', "…" or `…`; an apostrophe inside a word such as "can't" opens none) or
# a number not glued to a name (INT16 and orders_2024 stay whole).
_VALUE = re.compile(
    r"""(?<!\w)'(?:[^']|'')*'|"(?:[^"]|"")*"|`[^`]*`|(?<![\w.])\d+(?:\.\d+)?(?:[eE][+-]?\d+)?"""
)


def without_row_values(message: str, sql: str) -> str:
    """``message`` with each quoted span and number that ``sql`` does not contain redacted."""

    def redact(match: re.Match[str]) -> str:
        text = match.group(0)
        if text[0] in "'\"`":
            inner = text[1:-1]
            return text if inner and inner in sql else f"{text[0]}{REDACTED}{text[-1]}"
        return text if re.search(rf"(?<![\w.]){re.escape(text)}(?![\w.])", sql) else REDACTED

    return _VALUE.sub(redact, message)
