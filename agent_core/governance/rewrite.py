"""Rewriting a query's syntax tree so every protected table is read through its filter.

Each reference to a protected table -- wherever it is: FROM, JOIN, subqueries, CTE bodies,
UNION branches, LATERAL, derived tables -- is replaced by a derived table with the reference's
own name or alias::

    orders AS o   →   (SELECT _ba_rows.id, _ba_rows.region, … FROM orders AS _ba_rows
                       WHERE _ba_rows.region = 'East' OFFSET 0) AS o

The derived table selects only the columns the audience may read, so ``*``, ``o.*``, a hidden
column in WHERE / GROUP BY / ORDER BY / JOIN ON / a function argument, or the row-as-a-value
forms (``SELECT o FROM orders o``) cannot reach a hidden column or a filtered-out row: outside
it, they do not exist. The filter's columns are qualified with the inner alias, so a column
the table lacks is an error rather than a reference to an outer query.

The filtered derived table is an optimization fence: the database evaluates none of the
query's own expressions on a row the filter leaves out. Without one the planner merges the
derived table into the outer query and may evaluate an outer condition (``amount::int2``,
``sqrt(amount)``, ``IF(amount > 98765, EXP(1000), 1)``, a slow function) before the filter, on
every row -- its error or its running time then tells about rows the asker may not see. The
fence is a row limit that never limits: a planner may neither merge a derived table with a
LIMIT/OFFSET into the outer query nor push an outer condition below it, since both would
change which rows the limit keeps. PostgreSQL and DuckDB get ``OFFSET 0`` (PostgreSQL's
``is_simple_subquery`` / ``subquery_is_pushdown_safe``; DuckDB keeps a limit operator between
the two filters), MariaDB/MySQL ``LIMIT 18446744073709551615`` (no merge and no condition
push-down into a derived table with an explicit limit). PostgreSQL's ``AS MATERIALIZED`` CTE
would fence too but stores every filtered row; DuckDB pushes filters into a materialized CTE.
The one kind of condition copied inside the fence is a comparison of the table's columns with
literals, which can neither fail nor take a row-dependent time (see ``_push_safe_conditions``).
``tests/test_governance_barrier.py`` checks the plans and the error oracles on all three.

CTEs are renamed to private names first (``WITH orders AS …`` becomes ``WITH _ba_cte_0 AS …``,
its references ``_ba_cte_0 AS orders``), so afterwards every remaining table name means a real
table. That makes the rewrite safe even where CTE scoping is subtle: a reference is either
routed to a CTE (whose own body was rewritten) or wrapped -- never left open.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sqlglot import exp

from agent_core.data.sql_allowlist import ROW_COUNT_COLUMNS, ROW_COUNT_FUNCTIONS
from agent_core.data.sql_guard import restrict_catalog_columns
from agent_core.governance.audience import TableView
from agent_core.governance.errors import AccessDenied
from agent_core.governance.row_filter import parse_row_filter

ROWS_ALIAS = "_ba_rows"
# A LIMIT no table reaches: the fence of MariaDB/MySQL, which have OFFSET only after a LIMIT.
_MYSQL_NO_LIMIT = 18446744073709551615
_CTE_PREFIX = "_ba_cte_"
# Catalog views that hold sample values of every column (most common values, histograms).
_VALUE_CATALOGS = frozenset({"pg_stats", "pg_stats_ext", "pg_stats_ext_exprs", "column_statistics"})

ColumnLookup = Callable[[str], list[str]]


@dataclass(frozen=True)
class TableKey:
    """A protected table as the policy names it (case-folded)."""

    name: str
    schema: str | None

    @classmethod
    def parse(cls, text: str) -> TableKey:
        schema, _, name = fold(text).rpartition(".")
        return cls(name, schema or None)


def fold(text: str) -> str:
    """Look-alike spellings compare equal: matching errs towards protecting."""
    return unicodedata.normalize("NFKC", text).casefold()


def rewrite_protected_tables(
    statement: exp.Expr,
    views: dict[TableKey, TableView],
    dialect: str,
    columns: ColumnLookup,
) -> list[TableView]:
    """Route every reference to a table of ``views`` through its filter, in place.

    ``columns`` returns the column names of a table reference (SQL text) in order; it is asked
    only for tables with hidden columns. Returns the views that were applied. Raises
    :class:`AccessDenied` for a query the policy cannot allow.
    """
    refuse_value_catalogs(statement)
    if any(view.row_filters is not None for view in views.values()):
        refuse_row_counts(statement, dialect)
    cte_references = isolate_ctes(statement)
    applied: list[tuple[exp.Subquery, TableView]] = []
    for table in list(statement.find_all(exp.Table)):
        if id(table) in cte_references or not isinstance(table.this, exp.Identifier):
            continue  # a CTE, or a table function (the SQL guard checks those)
        view = _view_for(table, views, dialect)
        if view is None:
            continue
        visible = _visible_columns(table, view, dialect, columns)
        wrapper = _filtered_source(table, view, visible, dialect)
        _unqualify_schema_columns(statement, table)
        if isinstance(table.parent, exp.Summarize):
            table.replace(wrapper.this)  # DuckDB summarizes a query, not an aliased one
        else:
            table.replace(wrapper)
        applied.append((wrapper, view))
        if view.row_filters is not None and dialect in _PUSHDOWN_DIALECTS:
            _push_safe_conditions(wrapper, _known_columns(table, visible, dialect, columns))
    for wrapper, view in applied:
        _refuse_hidden_references(wrapper, view)
    return _unique(view for _, view in applied)


def refuse_value_catalogs(statement: exp.Expr) -> None:
    for table in statement.find_all(exp.Table):
        if isinstance(table.this, exp.Identifier) and fold(table.name) in _VALUE_CATALOGS:
            raise AccessDenied(
                f"{table.name} is not available for this data source: it shows sample values "
                "of every column, including ones the access policy protects."
            )


def refuse_row_counts(statement: exp.Expr, dialect: str) -> None:
    """Keep the catalog's row counts and table sizes from an audience whose rows are filtered.

    Decided once, as ``search_schema`` does (:mod:`agent_core.governance.catalog_access`):
    where the policy filters rows of a table for the audience, how many rows it has is not
    theirs to know. Here it holds for every table of the source, since a table's count also
    shows in its indexes, sequences, partitions and TOAST table. The catalog views lose those
    columns (``SELECT *`` leaves them out); naming one, or a size function, is refused.
    """
    withheld = restrict_catalog_columns(statement, dialect, ROW_COUNT_COLUMNS)
    for node in statement.walk():
        if isinstance(node, exp.Column) and fold(node.name) in withheld:
            named = node.name
        elif isinstance(node, exp.Anonymous) and fold(node.name) in ROW_COUNT_FUNCTIONS:
            named = f"{node.name}()"
        else:
            continue
        raise AccessDenied(
            f"{named} is not available for this data source: it counts or sizes table rows, "
            "and the access policy filters the rows of some tables here."
        )


# --- CTEs -------------------------------------------------------------------------------------


def isolate_ctes(statement: exp.Expr) -> set[int]:
    """Give every CTE a private name and point the references that mean it at that name.

    Returns the ids of the rewritten references (they read a CTE, not a table).
    """
    ctes = list(statement.find_all(exp.CTE))
    if not ctes:
        return set()
    private = {id(cte): f"{_CTE_PREFIX}{i}" for i, cte in enumerate(ctes)}
    bound = [(table, cte) for table in statement.find_all(exp.Table) if (cte := _binding(table))]
    for table, cte in bound:
        if not table.args.get("alias"):
            table.set("alias", exp.TableAlias(this=table.this.copy()))
        table.set("this", exp.to_identifier(private[id(cte)]))
    for cte in ctes:
        alias = cte.args.get("alias")
        if isinstance(alias, exp.TableAlias):
            alias.set("this", exp.to_identifier(private[id(cte)]))
    return {id(table) for table, _ in bound}


def _binding(table: exp.Table) -> exp.CTE | None:
    """The CTE an unqualified table name refers to where it stands, or None for a table."""
    if table.args.get("db") or table.args.get("catalog") or not isinstance(table.this, exp.Identifier):
        return None
    name = fold(table.name)
    came_from: exp.Expr | None = None
    child: exp.Expr = table
    node = table.parent
    while node is not None:
        if isinstance(node, exp.With):
            came_from = child
        clause = node.args.get("with_")
        if isinstance(clause, exp.With):
            ctes = list(clause.expressions)
            if child is clause and came_from is not None and not clause.args.get("recursive"):
                # Inside a CTE body: only the CTEs defined before it are visible.
                ctes = ctes[: next(i for i, cte in enumerate(ctes) if cte is came_from)]
            for cte in reversed(ctes):
                if fold(cte.alias) == name:
                    return cte
        child, node = node, node.parent
    return None


# --- matching ---------------------------------------------------------------------------------


def _view_for(table: exp.Table, views: dict[TableKey, TableView], dialect: str) -> TableView | None:
    name = fold(table.name)
    schema = _known_schema(table, dialect)
    matches = [
        (key, view)
        for key, view in views.items()
        if key.name == name and (key.schema is None or schema is None or key.schema == schema)
    ]
    if len(matches) > 1:
        names = ", ".join(sorted(view.table for _, view in matches))
        raise AccessDenied(
            f"Name the schema of {table.name}: the access policy protects several tables of "
            f"that name ({names})."
        )
    return matches[0][1] if matches else None


def _known_schema(table: exp.Table, dialect: str) -> str | None:
    """The schema a reference names for sure; None when unqualified or ambiguous.

    In DuckDB ``x.orders`` may be catalog x or schema x, so only a three-part name says.
    """
    if dialect == "duckdb" and not table.args.get("catalog"):
        return None
    return fold(table.db) if table.db else None


# --- the filtered derived table --------------------------------------------------------------


def _visible_columns(
    table: exp.Table, view: TableView, dialect: str, columns: ColumnLookup
) -> list[str] | None:
    """The columns the audience may read, in table order; None when none is hidden."""
    if not view.hidden_columns:
        return None
    alias = table.args.get("alias")
    if isinstance(alias, exp.TableAlias) and alias.columns:
        raise AccessDenied(
            f"Column aliases on {table.name} ({alias.sql(dialect)}) are not supported: some of "
            "its columns are hidden by the access policy. Rename columns in the SELECT list."
        )
    reference = exp.Table(
        this=table.this.copy(),
        db=table.args["db"].copy() if table.args.get("db") else None,
        catalog=table.args["catalog"].copy() if table.args.get("catalog") else None,
    )
    visible = [c for c in columns(reference.sql(dialect)) if fold(c) not in view.hidden_columns]
    if not visible:
        raise AccessDenied(f"No column of {view.table} is open here.")
    return visible


def _filtered_source(
    table: exp.Table, view: TableView, visible: list[str] | None, dialect: str
) -> exp.Subquery:
    inner = table.copy()
    inner.set("pivots", None)
    inner.set("alias", exp.TableAlias(this=exp.to_identifier(ROWS_ALIAS)))
    projections: list[exp.Expr] = (
        [exp.Star()]
        if visible is None
        else [exp.column(name, table=ROWS_ALIAS, quoted=True) for name in visible]
    )
    select = exp.Select(expressions=projections).from_(inner, copy=False)
    condition = _row_condition(view, dialect)
    if condition is not None:
        select.set("where", exp.Where(this=condition))
        _fence(select, dialect)
    outer_alias = table.args.get("alias")
    alias = outer_alias.copy() if outer_alias else exp.TableAlias(this=table.this.copy())
    wrapper = exp.Subquery(this=select, alias=alias)
    if table.args.get("pivots"):
        wrapper.set("pivots", [pivot.copy() for pivot in table.args["pivots"]])
    return wrapper


def _fence(select: exp.Select, dialect: str) -> None:
    """Keep the planner from evaluating outer expressions before the filter (module doc)."""
    if dialect == "mysql":
        select.set("limit", exp.Limit(expression=exp.Literal.number(_MYSQL_NO_LIMIT)))
    else:
        select.set("offset", exp.Offset(expression=exp.Literal.number(0)))


def _row_condition(view: TableView, dialect: str) -> exp.Expr | None:
    """The OR of the audience's filters with columns qualified by the inner alias."""
    if view.row_filters is None:
        return None
    if not view.row_filters:
        return exp.false()
    conditions = []
    for text in view.row_filters:
        condition = parse_row_filter(text, dialect).copy()
        for column in condition.find_all(exp.Column):
            column.set("table", exp.to_identifier(ROWS_ALIAS))
        conditions.append(exp.Paren(this=condition))
    return exp.or_(*conditions)


def _unqualify_schema_columns(statement: exp.Expr, table: exp.Table) -> None:
    """``public.orders.id`` still names the derived table, which has no schema, as ``orders``."""
    if table.args.get("alias") or not table.db:
        return
    for column in statement.find_all(exp.Column):
        if (
            column.args.get("db")
            and fold(column.db) == fold(table.db)
            and fold(column.table) == fold(table.name)
        ):
            column.set("db", None)
            column.set("catalog", None)


# --- conditions that may cross the fence -----------------------------------------------------

# A comparison of a column with a literal can neither fail nor take time that depends on the
# row on PostgreSQL (the literal is coerced to the column's type, or the comparison widened,
# when the query is parsed) and on MariaDB/MySQL (a mismatch warns, never errors, in a
# SELECT). Such conditions of the outer query are copied inside the fence too, so the filtered
# table is still read through its indexes (a lookup by id on 2M rows: 4 ms instead of 420 ms
# on PostgreSQL, 0.3 ms instead of 200 ms on MariaDB). DuckDB may cast the column to a wider
# decimal per row, which can fail, and it scans either way (no cost measured from the fence).
_PUSHDOWN_DIALECTS = frozenset({"postgres", "mysql"})
_SAFE_CONDITION_NODES: tuple[type[exp.Expr], ...] = (
    exp.And, exp.Or, exp.Not, exp.Paren, exp.EQ, exp.NEQ, exp.GT, exp.GTE, exp.LT, exp.LTE,
    exp.In, exp.Between, exp.Column, exp.Identifier, exp.Literal, exp.Boolean,
)  # fmt: skip


def _known_columns(
    table: exp.Table, visible: list[str] | None, dialect: str, columns: ColumnLookup
) -> Callable[[], set[str]]:
    """The table's column names (folded), looked up only when a condition could cross."""

    def known() -> set[str]:
        if visible is not None:
            return {fold(name) for name in visible}
        reference = exp.Table(
            this=table.this.copy(),
            db=table.args["db"].copy() if table.args.get("db") else None,
            catalog=table.args["catalog"].copy() if table.args.get("catalog") else None,
        )
        return {fold(name) for name in columns(reference.sql(dialect))}

    return known


def _push_safe_conditions(wrapper: exp.Subquery, known: Callable[[], set[str]]) -> None:
    """Copy the outer WHERE's comparisons of this table's columns with literals inside the fence.

    Only where the copy cannot change the answer: the derived table is the FROM of a SELECT
    whose joins cannot make its rows NULL-extended (no RIGHT or FULL join), the condition holds
    only columns of this table (known to be its own, not a select-list alias or an outer
    query's) and literals (no IS NULL: NULL-extended rows of an outer join would pass it), and
    the outer WHERE keeps the condition as well.
    """
    select = wrapper.parent.parent if isinstance(wrapper.parent, exp.From) else None
    if not isinstance(select, exp.Select) or wrapper.args.get("pivots"):
        return
    where = select.args.get("where")
    joins = select.args.get("joins") or []
    if where is None or any(join.side in ("RIGHT", "FULL") for join in joins):
        return
    alias = fold(wrapper.alias_or_name)
    outputs = {fold(e.alias) for e in select.expressions if isinstance(e, exp.Alias)}
    conjuncts = list(where.this.flatten()) if isinstance(where.this, exp.And) else [where.this]
    candidates = []
    for conjunct in conjuncts:
        nodes = list(conjunct.walk())
        cols = [node for node in nodes if isinstance(node, exp.Column)]
        if cols and all(isinstance(node, _SAFE_CONDITION_NODES) for node in nodes) and all(
            isinstance(col.this, exp.Identifier)
            and not col.args.get("db")
            and (fold(col.table) == alias if col.table else not joins)
            and fold(col.name) not in outputs
            for col in cols
        ):
            candidates.append(conjunct)
    if not candidates:
        return
    names = known()
    inner = wrapper.this
    for conjunct in candidates:
        copy = conjunct.copy()
        columns = list(copy.find_all(exp.Column))
        if any(fold(col.name) not in names for col in columns):
            continue
        for col in columns:
            col.set("table", exp.to_identifier(ROWS_ALIAS))
        inner.set("where", exp.Where(this=exp.and_(inner.args["where"].this, exp.Paren(this=copy))))


# --- hidden columns ---------------------------------------------------------------------------


def _refuse_hidden_references(wrapper: exp.Subquery, view: TableView) -> None:
    """Name a hidden column the query asks for, instead of a bare "no such column" later.

    The derived table already keeps hidden columns out; this only makes the refusal clear.
    """
    if not view.hidden_columns:
        return
    select = wrapper.parent.parent if wrapper.parent is not None else None
    if not isinstance(select, exp.Select):
        return
    alias = fold(wrapper.alias_or_name)
    outputs = {fold(e.alias) for e in select.expressions if isinstance(e, exp.Alias)}
    inside = {id(node) for node in wrapper.walk()}
    for column in select.find_all(exp.Column):
        name = fold(column.name)
        if id(column) in inside or name not in view.hidden_columns:
            continue
        qualified = bool(column.table)
        if (qualified and fold(column.table) == alias) or (
            not qualified
            and column.find_ancestor(exp.Select) is select
            and name not in outputs
        ):
            raise AccessDenied(
                f"The column {column.name} of {view.table} is not available: the access policy "
                "hides it here."
            )


def _unique(views: Iterable[TableView]) -> list[TableView]:
    seen: dict[str, TableView] = {}
    for view in views:
        seen.setdefault(view.table, view)
    return list(seen.values())
