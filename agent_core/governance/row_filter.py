"""Row filters of the access policy: SQL conditions over one table's own columns.

A filter is spliced into every query that reads its table, so it is held to an allowlist of
syntax-tree node types: comparisons and boolean logic over the table's columns, literals,
arithmetic, casts, intervals and a handful of plain functions. Subqueries, other functions,
qualified column names and comments are refused when the policy file is loaded, so a filter
can neither read another table nor depend on anything but the row it filters.
"""

from __future__ import annotations

from functools import lru_cache

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

# A filter must be one of these at its top (inside any brackets): a condition, not a value.
_CONDITIONS: tuple[type[exp.Expr], ...] = (
    exp.And,
    exp.Or,
    exp.Not,
    exp.EQ,
    exp.NEQ,
    exp.NullSafeEQ,
    exp.NullSafeNEQ,
    exp.GT,
    exp.GTE,
    exp.LT,
    exp.LTE,
    exp.Is,
    exp.In,
    exp.Between,
    exp.Like,
    exp.ILike,
    exp.Boolean,
)
_VALUES: tuple[type[exp.Expr], ...] = (
    exp.Paren,
    exp.Column,
    exp.Identifier,
    exp.Literal,
    exp.Null,
    exp.Neg,
    exp.Add,
    exp.Sub,
    exp.Mul,
    exp.Div,
    exp.Cast,
    exp.DataType,
    exp.DataTypeParam,
    exp.Interval,
    exp.Var,  # the unit of an INTERVAL
)
_FUNCTIONS: dict[type[exp.Expr], str] = {
    exp.Lower: "lower",
    exp.Upper: "upper",
    exp.Trim: "trim",
    exp.Coalesce: "coalesce",
    exp.CurrentDate: "current_date",
    exp.CurrentTimestamp: "current_timestamp",
}
_ALLOWED = _CONDITIONS + _VALUES + tuple(_FUNCTIONS)


class RowFilterError(ValueError):
    """A row filter is not a condition over its table's columns; the message says why."""


@lru_cache(maxsize=512)
def parse_row_filter(text: str, dialect: str) -> exp.Expr:
    """The checked syntax tree of one row filter in ``dialect`` (shared: copy before changing).

    Raises :class:`RowFilterError`.
    """
    try:
        statements = [s for s in sqlglot.parse(text, read=dialect or None) if s is not None]
    except (ParseError, TokenError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise RowFilterError(f"is not valid SQL ({first})") from None
    if len(statements) != 1:
        raise RowFilterError("must be exactly one condition")
    condition = statements[0]
    for node in condition.walk():
        _check_node(node)
    top = condition
    while isinstance(top, exp.Paren):
        top = top.this
    if not isinstance(top, _CONDITIONS):
        raise RowFilterError(
            f"must be a condition such as region = 'East' or true, not {top.sql(dialect or None)!r}"
        )
    return condition


def _check_node(node: exp.Expr) -> None:
    if node.comments:
        raise RowFilterError("must not contain comments")
    if isinstance(node, exp.Func) and not isinstance(node, _ALLOWED):
        allowed = ", ".join(sorted(_FUNCTIONS.values()))
        name = node.name if isinstance(node, exp.Anonymous) else node.sql_name()
        raise RowFilterError(f"may not call {name.lower()}() (allowed: {allowed})")
    if not isinstance(node, _ALLOWED):
        what = "a subquery" if isinstance(node, exp.Query) else node.key.upper()
        raise RowFilterError(
            f"may only compare the table's columns with literal values; {what} is not allowed"
        )
    if isinstance(node, exp.Column) and (node.table or not isinstance(node.this, exp.Identifier)):
        raise RowFilterError(
            f"must name the table's columns without a prefix ({node.name or '*'}, not "
            f"{node.sql()})"
        )
