"""The `where` filter of a metric query: a boolean condition over dimension names and literals.

It is parsed with sqlglot in the source's dialect and accepted only if every node is on a short
allowlist (comparisons, AND/OR/NOT, IN/BETWEEN/LIKE/IS NULL over dimensions and literal values,
`DATE '…'` literals). Anything else — a second statement (``1=1; DROP …``), a subquery, a
comment, a function call, a column that is not a dimension — is refused with
:class:`UnsafeFilterError` before any SQL is built. Dimension names are then replaced by the
dimension's SQL expression, so the filter can only ever compare dimension values.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from agent_core.semantic.errors import UnsafeFilterError

MAX_FILTER_CHARS = 2000

_LOGIC = (exp.And, exp.Or, exp.Not, exp.Paren)
_PREDICATES = (exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE, exp.In, exp.Between, exp.Like, exp.ILike, exp.Is)
_VALUES = (exp.Literal, exp.Null, exp.Boolean, exp.Neg)
_ALLOWED = (*_LOGIC, *_PREDICATES, *_VALUES, exp.Column, exp.Identifier, exp.Cast, exp.DataType)
_LITERAL_CASTS = {exp.DataType.Type.DATE, exp.DataType.Type.TIMESTAMP, exp.DataType.Type.DATETIME}


def parse_filter(text: str, dialect: str) -> exp.Expr:
    """The filter's syntax tree, checked against the allowlist; raises UnsafeFilterError."""
    if len(text) > MAX_FILTER_CHARS:
        raise UnsafeFilterError(f"The where filter is longer than {MAX_FILTER_CHARS} characters.")
    try:
        tokens = sqlglot.Dialect.get_or_raise(dialect).tokenize(text)
        statements = sqlglot.parse(text, read=dialect)
    except (ParseError, TokenError) as exc:
        raise UnsafeFilterError(f"The where filter is not a valid condition: {str(exc).splitlines()[0]}") from None
    if any(token.comments for token in tokens):
        raise UnsafeFilterError("The where filter may not contain comments.")
    parsed = [s for s in statements if s is not None]
    if len(parsed) != 1:
        raise UnsafeFilterError("The where filter must be one condition (no ';' or further statements).")
    condition = parsed[0]
    if not isinstance(condition, _LOGIC + _PREDICATES):
        raise UnsafeFilterError("The where filter must be a condition such as region = 'East' AND channel IN ('app', 'web').")
    for node in condition.walk():
        _check_node(node)
    return condition


def compile_filter(text: str, dialect: str, dimension_sql: Callable[[str], exp.Expr]) -> exp.Expr:
    """The filter with each dimension name replaced by ``dimension_sql(name)`` (which raises for
    an unknown name)."""
    condition = parse_filter(text, dialect)

    def replace(node: exp.Expr) -> exp.Expr:
        if isinstance(node, exp.Column):
            return dimension_sql(node.name).copy()
        return node

    return condition.transform(replace, copy=True)


def _check_node(node: exp.Expr) -> None:
    if isinstance(node, exp.Subquery | exp.Select | exp.Query):
        raise UnsafeFilterError("The where filter may not contain subqueries.")
    if isinstance(node, exp.In) and (node.args.get("query") or node.args.get("unnest") or node.args.get("field")):
        raise UnsafeFilterError("The where filter may not contain subqueries: IN takes a list of values.")
    if isinstance(node, exp.Column) and (node.table or node.args.get("db") or node.args.get("catalog")):
        raise UnsafeFilterError(f"Use dimension names in the where filter (e.g. customer__region), not {node.sql()!r}.")
    if isinstance(node, exp.Cast):
        if not isinstance(node.this, exp.Literal) or node.to.this not in _LITERAL_CASTS:
            raise UnsafeFilterError("The where filter may only cast a literal to DATE or TIMESTAMP.")
    if isinstance(node, exp.Neg) and not isinstance(node.this, exp.Literal):
        raise UnsafeFilterError("The where filter may only negate a number.")
    if not isinstance(node, _ALLOWED):
        if isinstance(node, exp.Func):
            kind = f"function {node.name.upper() if isinstance(node, exp.Anonymous) else node.sql_name()}"
        else:
            kind = type(node).__name__
        raise UnsafeFilterError(
            f"The where filter may not use {kind}: only comparisons (=, <>, <, >, IN, BETWEEN, LIKE, "
            "IS NULL) of dimensions with literal values, joined by AND, OR, NOT."
        )
