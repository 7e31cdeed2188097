"""Read-only guard for model-written SQL.

The guard parses SQL with sqlglot (never with regular expressions) and accepts exactly one
query statement: ``SELECT``, ``WITH … SELECT``, DuckDB's ``FROM …`` shorthand, and set
operations (``UNION`` / ``INTERSECT`` / ``EXCEPT``) of those. Everything else is refused with an
:class:`UnsafeSQLError` (the tools report it as ``permission_denied``) whose message names what
was refused, so the model and the user can act on it.

What is checked, on the whole syntax tree (so sub-queries, CTEs, lambdas and arguments of
arguments are covered too):

* statement kind — only queries; DML, DDL, ``ATTACH``, ``COPY``, ``PRAGMA``, ``SET``,
  ``INSTALL``/``LOAD``, ``CALL``, ``EXPORT``/``IMPORT``, transactions … are refused, including
  data-modifying CTEs (``WITH x AS (DELETE … RETURNING …)``) and anything sqlglot could only
  parse as an opaque ``Command``;
* ``SELECT … INTO``, row locks (``FOR UPDATE`` / ``FOR SHARE`` / ``LOCK IN SHARE MODE``),
  optimizer hints (``/*+ SET_VAR(…) */`` can lift the time limit), server variables
  (``@@datadir``), user variables and placeholders (``@x := …``, ``$1``, ``?``);
* functions — an **allowlist** per dialect (:mod:`agent_core.data.sql_allowlist`): aggregates,
  window, math, string, date/time, conditional, cast, JSON and array functions, matched on the
  sqlglot expression class for functions sqlglot knows and on the SQL name for the rest
  (``exp.Anonymous``). A function not on the list — ``ts_stat``/``query_to_xml`` (run SQL given
  as text), ``pg_read_file``/``read_csv``/``load_file`` (files), ``pg_terminate_backend``,
  ``set_config``, ``pg_advisory_lock``/``GET_LOCK``, ``current_setting`` … — is refused by
  name. Schema-qualified calls (``public.f()``, ``x.f()``) are refused: they could reach
  user-defined functions;
* table functions in ``FROM`` — the same allowlist plus, for DuckDB, the catalog functions
  (``duckdb_tables()`` …; not ``duckdb_databases()`` or ``duckdb_settings()``, which show
  paths);
* tables in system schemas — an allowlist of catalog views (``information_schema.tables`` /
  ``columns`` …, PostgreSQL ``pg_catalog`` views for describing tables); ``pg_authid``,
  ``pg_settings``, ``pg_stat_activity``, ``mysql.user``, ``performance_schema``, DuckDB's
  ``system`` catalog and ``pg_catalog`` … are refused. Some views are read by column: the SQL
  returned reads them through a derived table of their allowed columns, so neither ``*`` nor
  a whole row reaches ``pg_attribute.attmissingval`` or ``pg_stats``' sample values, and
  naming such a column is refused;
* DuckDB file scans — a table name that is really a path, URL, glob or file name
  (``FROM '/etc/passwd'``, ``FROM "s3://…"``, ``FROM data.csv``, ``FROM "/srv/x".parquet``)
  is refused before DuckDB's external-access setting would have to stop it;
* nesting — more than :data:`MAX_NESTING` levels of brackets (or a tree too deep for the parser)
  is refused with a clear message instead of a ``RecursionError``; a construct the checks were
  not written for is refused as unparseable rather than crashing them.

The guard is the first of several layers: the executors open connections read-only (DuckDB
``read_only=True`` plus ``enable_external_access=false``; PostgreSQL/MySQL read-only sessions),
and :mod:`agent_core.data.privileges` refuses at start-up a source whose database role can do
more than read.

The SQL returned is regenerated from the syntax tree without comments, so what runs is exactly
what was checked (no parser-differential tricks with comments, quoting or odd tokens).
"""

from __future__ import annotations

import unicodedata
from typing import Literal

from sqlglot import exp
from sqlglot.dialects.dialect import Dialect as SqlglotDialect
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import TokenType

from agent_core.data.errors import SQLParseError, UnsafeSQLError
from agent_core.data.sql_allowlist import (
    CATALOG_COLUMNS,
    CATALOG_VALUE_COLUMNS,
    DIALECTS,
    DUCKDB_CATALOG_VIEW_NAMES,
    DUCKDB_CATALOG_VIEWS,
    DUCKDB_FILE_EXTENSIONS,
    DUCKDB_SYSTEM_CATALOGS,
    DUCKDB_SYSTEM_NAME_PREFIXES,
    DUCKDB_SYSTEM_SCHEMAS,
    FUNCTION_CLASSES,
    FUNCTION_NAMES,
    MYSQL_CATALOG_VIEWS,
    MYSQL_SYSTEM_SCHEMAS,
    PATH_CHARACTERS,
    POSTGRES_CATALOG_VIEWS,
    TABLE_ONLY_FUNCTION_NAMES,
)

Dialect = Literal["duckdb", "postgres", "mysql"]

# Deepest bracket nesting accepted; real analytical queries stay far below this, and sqlglot's
# recursive-descent parser overflows the Python stack at a few hundred levels.
MAX_NESTING = 64

# Statement nodes that must not appear anywhere in the tree. Besides these, ``exp.Command`` —
# sqlglot's fallback for syntax it does not model (LOAD, CALL, RESET, VACUUM, EXPLAIN …) — is
# refused too: unknown means no.
_FORBIDDEN_NODES: dict[type[exp.Expr], str] = {
    exp.Insert: "INSERT",
    exp.Update: "UPDATE",
    exp.Delete: "DELETE",
    exp.Merge: "MERGE",
    exp.Create: "CREATE",
    exp.Drop: "DROP",
    exp.Alter: "ALTER",
    exp.TruncateTable: "TRUNCATE",
    exp.Copy: "COPY",
    exp.Pragma: "PRAGMA",
    exp.Set: "SET",
    exp.Attach: "ATTACH",
    exp.Detach: "DETACH",
    exp.Install: "INSTALL",
    exp.Use: "USE",
    exp.Transaction: "transaction control",
    exp.Commit: "COMMIT",
    exp.Rollback: "ROLLBACK",
    exp.LoadData: "LOAD DATA",
}

# What a check may raise on a syntax tree of a shape it was not written for: refused as
# unparseable instead of escaping as a crash (the guard fails closed).
_UNEXPECTED = (IndexError, KeyError, AttributeError, TypeError, ValueError)

# The alias of a catalog view inside the derived table that reads it by column.
_CATALOG_ALIAS = "_ba_catalog"

_ANONYMOUS_TYPES: tuple[type[exp.Expr], ...] = (exp.Anonymous, exp.AnonymousAggFunc)
_OPENING = {TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.L_BRACE}
_CLOSING = {TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE}

_FUNCTION_HELP = (
    "a query may call only analytical functions (aggregates, window functions, math, text, "
    "date/time, conditionals, casts, JSON and arrays); functions that run SQL given as text, "
    "read files, reach the network, take locks, change settings or reveal server paths are "
    "refused"
)


def ensure_read_only(sql: str, dialect: Dialect | str = "duckdb") -> str:
    """Return ``sql`` normalized if it is one read-only query, else raise.

    ``dialect`` is a sqlglot dialect name: ``duckdb``, ``postgres`` or ``mysql``.

    Raises :class:`SQLParseError` if the SQL cannot be parsed (or is nested too deeply) and
    :class:`UnsafeSQLError` if it is anything but a single SELECT-like query that calls only
    allowlisted functions and reads only user tables and allowlisted catalog views. The
    returned SQL is regenerated from the parsed tree (comments dropped) and is the text that
    must be executed.
    """
    dialect = _checked_dialect(dialect)
    try:
        statement = _parse_single(sql, dialect)
        if not _is_query(statement):
            raise UnsafeSQLError(
                f"Only read-only queries are allowed (SELECT, WITH … SELECT, UNION …); "
                f"refused: {_describe(statement)}."
            )
        for node in statement.walk():
            _check_node(node, dialect)
        _refuse_catalog_values(statement, dialect)
        restrict_catalog_columns(statement, dialect)
        return statement.sql(dialect=dialect, comments=False)
    except RecursionError as error:
        raise _too_deep() from error
    except _UNEXPECTED as error:
        raise _unchecked(error) from error


def with_row_limit(sql: str, limit: int, dialect: Dialect | str = "duckdb") -> str:
    """Return ``sql`` (one query) capped to at most ``limit`` rows.

    An existing literal ``LIMIT`` is lowered to ``limit`` if it is larger; a query without a
    limit gets ``LIMIT limit`` appended; anything else (``FETCH FIRST``, a non-literal or
    percentage limit) is wrapped as ``SELECT * FROM (<sql>) AS _capped LIMIT limit`` so the
    original clauses keep their meaning. To detect truncation, ask for ``row_cap + 1`` rows.

    The SQL should already have passed :func:`ensure_read_only`; this function raises
    :class:`SQLParseError` / :class:`UnsafeSQLError` if it is not a single query.
    """
    if limit < 0:
        raise ValueError("limit must be >= 0")
    try:
        statement = _parse_single(sql, dialect)
        if not _is_query(statement):
            raise UnsafeSQLError(
                f"A row limit can only be applied to a query; got {_describe(statement)}."
            )
        current = statement.args.get("limit")
        if current is None:
            statement.set("limit", exp.Limit(expression=exp.Literal.number(limit)))
            return statement.sql(dialect=dialect, comments=False)
        if isinstance(current, exp.Limit) and not current.args.get("offset"):
            value = current.expression
            if isinstance(value, exp.Literal) and not value.is_string and value.this.isdigit():
                if int(value.this) > limit:
                    current.set("expression", exp.Literal.number(limit))
                return statement.sql(dialect=dialect, comments=False)
        wrapped = (
            exp.select("*")
            .from_(
                exp.Subquery(
                    this=statement, alias=exp.TableAlias(this=exp.to_identifier("_capped"))
                )
            )
            .limit(limit)
        )
        return wrapped.sql(dialect=dialect, comments=False)
    except RecursionError as error:
        raise _too_deep() from error
    except _UNEXPECTED as error:
        raise _unchecked(error) from error


def restrict_catalog_columns(
    statement: exp.Expr, dialect: str, exclude: frozenset[str] = frozenset()
) -> frozenset[str]:
    """Read each catalog view of :data:`CATALOG_COLUMNS` in ``statement`` through a derived
    table of its allowed columns less ``exclude`` (in place).

    A reference already read that way (the derived table is exactly such a projection) is
    narrowed, not wrapped again, so checking a checked query changes nothing. Returns the
    columns of ``exclude`` that the views read here would otherwise have shown.
    """
    withheld: set[str] = set()
    for table in list(statement.find_all(exp.Table)):
        key = _catalog_key(table, dialect)
        if key is None:
            continue
        allowed = CATALOG_COLUMNS[dialect][key]
        withheld.update(_fold(c) for c in allowed if _fold(c) in exclude)
        keep = [c for c in allowed if _fold(c) not in exclude]
        select = _catalog_projection(table, allowed)
        if select is not None:
            select.set(
                "expressions", [e for e in select.expressions if _fold(e.name) not in exclude]
            )
            continue
        inner = table.copy()
        inner.set("alias", exp.TableAlias(this=exp.to_identifier(_CATALOG_ALIAS)))
        projection = exp.Select(
            expressions=[exp.column(name, table=_CATALOG_ALIAS) for name in keep]
        ).from_(inner, copy=False)
        alias = table.args.get("alias")
        if alias is None:
            name = table.this if isinstance(table.this, exp.Identifier) else exp.to_identifier(key[1])
            alias = exp.TableAlias(this=name.copy())
        table.replace(exp.Subquery(this=projection, alias=alias.copy()))
    return frozenset(withheld)


def _refuse_catalog_values(statement: exp.Expr, dialect: str) -> None:
    """Name the catalog column that holds row values, instead of a bare "no such column"."""
    if not any(_catalog_key(table, dialect) for table in statement.find_all(exp.Table)):
        return
    for column in statement.find_all(exp.Column):
        if _fold(column.name) in CATALOG_VALUE_COLUMNS:
            raise UnsafeSQLError(
                f"The catalog column {column.name} is not readable: it holds values of table "
                "rows (a column's default for older rows, sample values), which the access "
                "policy may protect. Catalog views show names, types and definitions."
            )


def _catalog_key(table: exp.Table, dialect: str) -> tuple[str | None, str] | None:
    """The :data:`CATALOG_COLUMNS` key of the view a table reference reads, or None."""
    views = CATALOG_COLUMNS[dialect]
    if isinstance(table.this, exp.Func):
        if dialect != "duckdb" or not isinstance(table.this, _ANONYMOUS_TYPES):
            return None
        key: tuple[str | None, str] = (None, _fold(table.this.name))
        return key if key in views else None
    if not isinstance(table.this, exp.Identifier):
        return None
    parts = [_fold(part.name) for part in table.parts]
    name, schema = parts[-1], parts[-2] if len(parts) >= 2 else None
    if dialect == "duckdb":
        schema = None  # main.duckdb_tables and demo.duckdb_tables mean the built-in view too
    elif dialect == "postgres" and schema is None and name.startswith("pg_"):
        schema = "pg_catalog"
    key = (schema, name)
    return key if key in views else None


def _catalog_projection(table: exp.Table, allowed: tuple[str, ...]) -> exp.Select | None:
    """The derived table ``table`` is already read through, if it projects allowed columns
    only and does nothing else; else None."""
    select = table.parent.parent if isinstance(table.parent, exp.From) else None
    if not isinstance(select, exp.Select) or not isinstance(select.parent, exp.Subquery):
        return None
    if any(value for arg, value in select.args.items() if arg not in ("expressions", "from_")):
        return None
    names = {_fold(c) for c in allowed}
    if all(isinstance(e, exp.Column) and _fold(e.name) in names for e in select.expressions):
        return select
    return None


# --- parsing ---------------------------------------------------------------------------------


def _checked_dialect(dialect: str) -> str:
    if dialect not in DIALECTS:
        raise ValueError(f"unsupported SQL dialect {dialect!r} (expected one of {DIALECTS})")
    return dialect


def _parse_single(sql: str, dialect: str) -> exp.Expr:
    """Parse ``sql`` and return its only statement, refusing zero or several statements."""
    engine = SqlglotDialect.get_or_raise(dialect)
    try:
        tokens = engine.tokenize(sql)
        _check_nesting(tokens)
        # Empty statements (a trailing ";;") parse as None and are dropped.
        statements = [s for s in engine.parser().parse(tokens, sql) if s is not None]
    except (ParseError, TokenError) as error:
        raise SQLParseError(f"The SQL could not be parsed ({_first_line(error)}).") from error
    if not statements:
        raise SQLParseError("The SQL is empty.")
    if len(statements) > 1:
        raise UnsafeSQLError(
            f"Only one statement is allowed per query; got {len(statements)} (separated by ';')."
        )
    return statements[0]


def _check_nesting(tokens: list) -> None:
    """Refuse bracket nesting deeper than :data:`MAX_NESTING` before the recursive parser runs."""
    depth = deepest = 0
    for token in tokens:
        if token.token_type in _OPENING:
            depth += 1
            deepest = max(deepest, depth)
        elif token.token_type in _CLOSING:
            depth -= 1
    if deepest > MAX_NESTING:
        raise SQLParseError(
            f"The SQL nests brackets {deepest} levels deep; at most {MAX_NESTING} are allowed. "
            f"Flatten it, e.g. with a WITH … AS (…) common table expression per step."
        )


def _unchecked(error: Exception) -> SQLParseError:
    """Syntax the parser accepted in a shape the checks do not know: refused, not crashed."""
    return SQLParseError(
        f"The SQL could not be checked ({type(error).__name__} on an unusual construct); "
        "rewrite it with plain SELECT … FROM … syntax."
    )


def _too_deep() -> SQLParseError:
    return SQLParseError(
        "The SQL is nested too deeply to be checked. Flatten it, e.g. with a WITH … AS (…) "
        "common table expression per step, or fewer chained operators."
    )


def _is_query(statement: exp.Expr) -> bool:
    """True for SELECT, set operations of queries, and a parenthesized query."""
    while isinstance(statement, exp.Subquery):
        statement = statement.this
    return isinstance(statement, (exp.Select, exp.SetOperation))


# --- checks ----------------------------------------------------------------------------------


def _check_node(node: exp.Expr, dialect: str) -> None:
    """Raise if ``node`` is a forbidden construct; called for every node of the tree."""
    label = _forbidden_label(node)
    if label is not None:
        raise UnsafeSQLError(f"{label} is not allowed: only read-only queries can run.")
    if isinstance(node, exp.Into):
        raise UnsafeSQLError("SELECT … INTO is not allowed: it creates a table or sets variables.")
    if isinstance(node, exp.Lock):
        raise UnsafeSQLError("Row locks (FOR UPDATE / FOR SHARE) are not allowed.")
    if isinstance(node, exp.Hint):
        raise UnsafeSQLError(
            "Optimizer hints (/*+ … */) are not allowed: they can change session settings such "
            "as the query time limit."
        )
    if isinstance(node, exp.SessionParameter):
        raise UnsafeSQLError(
            f"Server variables ({node.sql(dialect=dialect)}) are not allowed: they reveal the "
            f"server's configuration and file paths."
        )
    if isinstance(node, (exp.Parameter, exp.Placeholder)):
        raise UnsafeSQLError(
            f"Variables and placeholders ({node.sql(dialect=dialect)}) are not allowed; write "
            f"the values into the query."
        )
    if isinstance(node, exp.Func):
        _check_function(node, dialect)
    if isinstance(node, exp.Table):
        _check_table(node, dialect)


def _check_function(func: exp.Func, dialect: str) -> None:
    """Refuse any function (scalar or in FROM) that is not on the dialect's allowlist."""
    parent = func.parent
    name = _function_name(func)
    if isinstance(parent, exp.Dot) and parent.expression is func:
        qualifier = parent.this.sql(dialect=dialect)
        raise UnsafeSQLError(
            f"The qualified function call {qualifier}.{name}() is not allowed: call built-in "
            f"functions by their plain name, e.g. {name}(…); schema-qualified names can reach "
            f"user-defined functions."
        )
    in_table_position = func.arg_key == "this" and isinstance(
        parent, (exp.Table, exp.Lateral, exp.From, exp.Join)
    )
    if isinstance(func, _ANONYMOUS_TYPES):
        allowed = name.isascii() and (
            name in FUNCTION_NAMES[dialect]
            or (in_table_position and name in TABLE_ONLY_FUNCTION_NAMES[dialect])
        )
    else:
        allowed = type(func) in FUNCTION_CLASSES
    if not allowed:
        kind, where = ("table function", " in FROM") if in_table_position else ("function", "")
        raise UnsafeSQLError(f"The {kind} {name}() is not allowed{where}: {_FUNCTION_HELP}.")
    if isinstance(parent, exp.Table) and (parent.args.get("db") or parent.args.get("catalog")):
        raise UnsafeSQLError(
            f"The qualified table function {parent.sql(dialect=dialect)} is not allowed: call "
            f"built-in table functions by their plain name, e.g. {name}(…)."
        )


def _check_table(table: exp.Table, dialect: str) -> None:
    """Refuse system-catalog tables off the allowlist and (DuckDB) file paths posing as tables."""
    if isinstance(table.this, exp.Func):
        return  # a table function: checked by _check_function
    if table.this is None and table.args.get("rows_from"):
        return  # PostgreSQL ROWS FROM (f(…), g(…)): its functions are checked one by one
    raw_parts = [part.name for part in table.parts]
    shown = ".".join(raw_parts) or table.sql(dialect=dialect)
    if not raw_parts or len(raw_parts) > 3 or not all(
        isinstance(part, exp.Identifier) for part in table.parts
    ):
        raise UnsafeSQLError(
            f"The table name {shown!r} is not allowed: use table, schema.table or "
            f"catalog.schema.table."
        )
    if dialect == "duckdb":
        _check_duckdb_path(raw_parts, shown)
    parts = [_fold(part) for part in raw_parts]
    name = parts[-1]
    schema = parts[-2] if len(parts) >= 2 else None
    catalog = parts[-3] if len(parts) >= 3 else None
    if dialect == "postgres":
        if schema is None and name.startswith("pg_"):
            schema = "pg_catalog"  # pg_catalog is searched first for unqualified names
        if schema is not None and (schema in POSTGRES_CATALOG_VIEWS or schema.startswith("pg_")):
            _require_catalog_view(name, POSTGRES_CATALOG_VIEWS.get(schema), shown, dialect)
    elif dialect == "mysql":
        if schema in MYSQL_SYSTEM_SCHEMAS:
            _require_catalog_view(name, MYSQL_CATALOG_VIEWS.get(schema), shown, dialect)
    else:
        if catalog in DUCKDB_SYSTEM_CATALOGS:
            _require_catalog_view(name, None, shown, dialect)
        if schema in DUCKDB_SYSTEM_SCHEMAS:
            _require_catalog_view(name, DUCKDB_CATALOG_VIEWS.get(schema), shown, dialect)
        elif catalog is None and name.startswith(DUCKDB_SYSTEM_NAME_PREFIXES):
            # Without a catalog, a name missing from the database resolves to DuckDB's
            # built-in views (``main.duckdb_databases`` too).
            _require_catalog_view(name, DUCKDB_CATALOG_VIEW_NAMES, shown, dialect)


def _check_duckdb_path(parts: list[str], shown: str) -> None:
    """DuckDB reads a missing table whose name looks like a file (a "replacement scan")."""
    looks_like_file = any(
        "." in part or any(ch in PATH_CHARACTERS for ch in part) for part in parts
    ) or (len(parts) > 1 and _fold(parts[-1]) in DUCKDB_FILE_EXTENSIONS)
    if looks_like_file:
        raise UnsafeSQLError(
            f"Reading files or URLs is not allowed ({shown!r} looks like a path or file name); "
            f"query the existing tables instead."
        )


def _require_catalog_view(
    name: str, allowed: frozenset[str] | None, shown: str, dialect: str
) -> None:
    if allowed is not None and name in allowed:
        return
    readable = {
        "postgres": "information_schema.tables / columns / views … and the pg_catalog views "
        "that describe tables (pg_tables, pg_views, pg_class, pg_attribute, pg_indexes …)",
        "mysql": "information_schema.tables / columns / views / statistics …",
        "duckdb": "information_schema.tables / columns … and duckdb_tables(), duckdb_columns(), "
        "duckdb_views()",
    }[dialect]
    raise UnsafeSQLError(
        f"Reading the system table {shown!r} is not allowed: of the system catalogs only "
        f"{readable} can be queried."
    )


def _function_name(func: exp.Func) -> str:
    """The lower-case SQL name of a function node, as the user would recognise it."""
    if isinstance(func, _ANONYMOUS_TYPES):
        return func.name.lower()
    return func.sql_name().lower()


def _fold(text: str) -> str:
    """Compatibility-normalized, case-folded text: look-alike spellings of a name compare equal."""
    return unicodedata.normalize("NFKC", text).casefold()


def _forbidden_label(node: exp.Expr) -> str | None:
    """The user-facing name of a forbidden statement node, or None if the node is allowed."""
    if isinstance(node, exp.Command):
        # The fallback node keeps the leading keyword (LOAD, CALL, RESET …) in ``this``.
        return str(node.this).upper()
    for node_type, label in _FORBIDDEN_NODES.items():
        if isinstance(node, node_type):
            return label
    return None


def _describe(statement: exp.Expr) -> str:
    """A short human label for a non-query statement, e.g. 'DROP statement'."""
    label = _forbidden_label(statement)
    if label is None and isinstance(statement, (exp.Column, exp.Identifier, exp.Literal)):
        # A bare keyword sqlglot does not know (e.g. CHECKPOINT) parses as a column reference.
        return "a bare word or expression, not a query"
    return f"{label or statement.key.upper()} statement"


def _first_line(error: Exception) -> str:
    # sqlglot's messages carry an ANSI-highlighted excerpt on later lines; keep the summary.
    return str(error).splitlines()[0].strip() if str(error) else type(error).__name__
