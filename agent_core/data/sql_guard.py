"""Read-only guard for model-written SQL.

The guard parses SQL with sqlglot (never with regular expressions) and accepts exactly one
query statement: ``SELECT``, ``WITH … SELECT``, DuckDB's ``FROM …`` shorthand, and set
operations (``UNION`` / ``INTERSECT`` / ``EXCEPT``) of those. Everything else is refused with an
:class:`UnsafeSQLError` whose message the model and the user can act on.

What is checked, on the whole syntax tree (so sub-queries and CTEs are covered too):

* statement kind — allowlist: only queries; DML, DDL, ``ATTACH``, ``COPY``, ``PRAGMA``,
  ``SET``, ``INSTALL``/``LOAD``, ``CALL``, ``EXPORT``/``IMPORT``, transactions … are refused,
  including data-modifying CTEs (``WITH x AS (DELETE … RETURNING …)``);
* ``SELECT … INTO`` and row locks (``FOR UPDATE``);
* functions — a denylist of names that read or write files, reach the network, run SQL held in
  a string, change settings or touch server state (``read_csv``, ``glob``, ``*_scan``,
  ``pg_read_file``, ``lo_import``, ``dblink``, ``set_config``, ``load_file`` …);
  PostgreSQL ``pg_*`` functions are refused unless on a small allowlist of harmless
  introspection helpers;
* table functions in ``FROM`` — allowlist (``range``, ``generate_series``, ``unnest``,
  JSON set-returning functions, DuckDB catalog views …);
* DuckDB replacement scans — a table "name" that looks like a file path or URL
  (``FROM 'data.csv'``, ``FROM "s3://…"``) is refused.

The guard is the first of several layers: the executors also open connections read-only (DuckDB
``read_only=True`` plus ``enable_external_access=false``; PostgreSQL/MySQL read-only sessions)
so that a gap in the guard still cannot write or escape.

The SQL returned is regenerated from the syntax tree without comments, so what runs is exactly
what was checked (no parser-differential tricks with comments or odd tokens).
"""

from __future__ import annotations

from typing import Literal

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from agent_core.data.errors import SQLParseError, UnsafeSQLError

Dialect = Literal["duckdb", "postgres", "mysql"]

# Statement nodes that must not appear anywhere in the tree. Besides these, ``exp.Command`` —
# sqlglot's fallback for syntax it does not model (LOAD, CALL, RESET, VACUUM, EXPLAIN …) — is
# refused too: unknown means no.
_FORBIDDEN_NODES: dict[type[exp.Expression], str] = {
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

# Exact function names (lower case) that are refused in every dialect. Names that exist in only
# one engine are harmless to refuse in the others, and one list is easier to audit.
_DENIED_FUNCTIONS: frozenset[str] = frozenset(
    {
        # DuckDB: file and network readers, metadata readers, SQL-in-a-string, secrets.
        "glob",
        "sniff_csv",
        "parquet_metadata",
        "parquet_schema",
        "parquet_file_metadata",
        "parquet_kv_metadata",
        "parquet_bloom_probe",
        "query",
        "query_table",
        "json_execute_serialized_sql",
        "duckdb_secrets",
        "which_secret",
        "load_aws_credentials",
        "getenv",
        "checkpoint",
        "force_checkpoint",
        "sqlite_attach",
        "postgres_query",
        "postgres_execute",
        "mysql_query",
        "mysql_execute",
        # PostgreSQL: settings, sequences (writes), SQL-in-a-string.
        "set_config",
        "nextval",
        "setval",
        "query_to_xml",
        "query_to_xmlschema",
        "query_to_xml_and_xmlschema",
        "cursor_to_xml",
        "cursor_to_xmlschema",
        "loread",
        "lowrite",
        # MySQL: file reads, locks, CPU burners, common UDF backdoors.
        "load_file",
        "benchmark",
        "get_lock",
        "release_lock",
        "release_all_locks",
        "master_pos_wait",
        "source_pos_wait",
        "sys_exec",
        "sys_eval",
    }
)

# Name prefixes / suffixes that are refused: whole families of file, network or admin functions.
_DENIED_PREFIXES: tuple[str, ...] = ("read_", "lo_", "dblink", "iceberg_", "delta_", "ducklake_")
_DENIED_SUFFIXES: tuple[str, ...] = ("_scan", "_attach")
_DENIED_INFIXES: tuple[str, ...] = ("_scan_",)

# PostgreSQL's pg_* namespace mixes harmless helpers with file access and server administration
# (pg_read_file, pg_ls_dir, pg_terminate_backend …), so it is allowlisted rather than denylisted.
_ALLOWED_PG_FUNCTIONS: frozenset[str] = frozenset(
    {
        "pg_typeof",
        "pg_sleep",  # harmless: every executor enforces a statement timeout
        "pg_size_pretty",
        "pg_column_size",
        "pg_relation_size",
        "pg_table_size",
        "pg_indexes_size",
        "pg_total_relation_size",
        "pg_database_size",
        "pg_get_viewdef",
        "pg_get_constraintdef",
        "pg_get_indexdef",
        "pg_get_expr",
        "pg_get_userbyid",
        "pg_get_serial_sequence",
        "pg_table_is_visible",
        "pg_encoding_to_char",
        "pg_client_encoding",
        "pg_backend_pid",
        "pg_is_in_recovery",
        "pg_postmaster_start_time",
        "pg_input_is_valid",
    }
)

# Functions allowed in table position (FROM / JOIN / LATERAL). Anything else there is refused,
# because table position is where file readers (read_csv, postgres_scan …) are used.
_ALLOWED_TABLE_FUNCTIONS: frozenset[str] = frozenset(
    {
        "range",
        "generate_series",
        "exploding_generate_series",
        "unnest",
        "generate_subscripts",
        "json_each",
        "json_each_text",
        "jsonb_each",
        "jsonb_each_text",
        "json_array_elements",
        "json_array_elements_text",
        "jsonb_array_elements",
        "jsonb_array_elements_text",
        "json_to_recordset",
        "jsonb_to_recordset",
        "json_object_keys",
        "jsonb_object_keys",
        "json_tree",
        "regexp_matches",
        "regexp_split_to_table",
        "string_to_table",
        "duckdb_tables",
        "duckdb_views",
        "duckdb_columns",
        "duckdb_schemas",
        "duckdb_databases",
        "duckdb_types",
        "duckdb_functions",
        "duckdb_constraints",
        "duckdb_indexes",
        "pragma_table_info",
        "pragma_show_tables",
    }
)

# Typed sqlglot classes for table functions whose sql_names() differ from the SQL spelling.
_ALLOWED_TABLE_FUNCTION_TYPES: tuple[type[exp.Expression], ...] = (
    exp.GenerateSeries,
    exp.ExplodingGenerateSeries,
    exp.Unnest,
    exp.JSONTable,
)

# Characters that never appear in a sensible table name but always in a path or URL; DuckDB
# would treat such a "table" as a file to scan.
_PATH_CHARS = ("/", "\\", ":", ".", "~", "*", "?")


def ensure_read_only(sql: str, dialect: Dialect | str = "duckdb") -> str:
    """Return ``sql`` normalized if it is one read-only query, else raise.

    ``dialect`` is a sqlglot dialect name: ``duckdb``, ``postgres`` or ``mysql``.

    Raises :class:`SQLParseError` if the SQL cannot be parsed and :class:`UnsafeSQLError` if it
    is anything but a single SELECT-like query free of file, network and state-changing
    functions. The returned SQL is regenerated from the parsed tree (comments dropped) and is
    the text that must be executed.
    """
    statement = _parse_single(sql, dialect)
    if not _is_query(statement):
        raise UnsafeSQLError(
            f"Only read-only queries are allowed (SELECT, WITH … SELECT, UNION …); "
            f"refused: {_describe(statement)}."
        )
    for node in statement.walk():
        _check_node(node, dialect)
    return statement.sql(dialect=dialect, comments=False)


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
            exp.Subquery(this=statement, alias=exp.TableAlias(this=exp.to_identifier("_capped")))
        )
        .limit(limit)
    )
    return wrapped.sql(dialect=dialect, comments=False)


def _parse_single(sql: str, dialect: str) -> exp.Expression:
    """Parse ``sql`` and return its only statement, refusing zero or several statements."""
    try:
        # Empty statements (a trailing ";;") parse as None and are dropped.
        statements = [s for s in sqlglot.parse(sql, read=dialect) if s is not None]
    except (ParseError, TokenError) as error:
        raise SQLParseError(f"The SQL could not be parsed ({_first_line(error)}).") from error
    if not statements:
        raise SQLParseError("The SQL is empty.")
    if len(statements) > 1:
        raise UnsafeSQLError(
            f"Only one statement is allowed per query; got {len(statements)} (separated by ';')."
        )
    return statements[0]


def _is_query(statement: exp.Expression) -> bool:
    """True for SELECT, set operations of queries, and a parenthesized query."""
    while isinstance(statement, exp.Subquery):
        statement = statement.this
    return isinstance(statement, (exp.Select, exp.SetOperation))


def _check_node(node: exp.Expression, dialect: str) -> None:
    """Raise if ``node`` is a forbidden construct; called for every node of the tree."""
    label = _forbidden_label(node)
    if label is not None:
        raise UnsafeSQLError(f"{label} is not allowed: only read-only queries can run.")
    if isinstance(node, exp.Into):
        raise UnsafeSQLError("SELECT … INTO is not allowed: it creates a table.")
    if isinstance(node, exp.Lock):
        raise UnsafeSQLError("Row locks (FOR UPDATE / FOR SHARE) are not allowed.")
    if isinstance(node, exp.Func):
        _check_function(node)
    if isinstance(node, exp.Table):
        _check_table(node, dialect)


def _check_function(func: exp.Func) -> None:
    """Refuse denylisted functions and table functions outside the allowlist."""
    names = _function_names(func)
    for name in names:
        if _is_denied_function(name):
            raise UnsafeSQLError(
                f"The function {name}() is not allowed: it can read or write files, reach the "
                f"network, run other SQL or change server state."
            )
    in_table_position = isinstance(func.parent, (exp.Table, exp.Lateral))
    if in_table_position and not (
        isinstance(func, _ALLOWED_TABLE_FUNCTION_TYPES) or names & _ALLOWED_TABLE_FUNCTIONS
    ):
        shown = sorted(names)[0] if names else "this function"
        raise UnsafeSQLError(
            f"The table function {shown}() is not allowed in FROM; query the existing tables "
            f"instead (allowed table functions: range, generate_series, unnest, JSON helpers)."
        )


def _check_table(table: exp.Table, dialect: str) -> None:
    """Refuse DuckDB replacement scans: a quoted table name that is really a path or URL."""
    if dialect != "duckdb":
        return
    name = table.this
    if isinstance(name, exp.Identifier) and any(ch in name.name for ch in _PATH_CHARS):
        raise UnsafeSQLError(
            f"Reading files or URLs is not allowed ({name.name!r} looks like a path); "
            f"query the existing tables instead."
        )


def _function_names(func: exp.Func) -> set[str]:
    """Lower-case SQL names a function node may stand for."""
    if isinstance(func, exp.Anonymous):
        return {func.name.lower()}
    return {name.lower() for name in func.sql_names()}


def _is_denied_function(name: str) -> bool:
    if name in _DENIED_FUNCTIONS:
        return True
    if name.startswith("pg_") and name not in _ALLOWED_PG_FUNCTIONS:
        return True
    return (
        name.startswith(_DENIED_PREFIXES)
        or name.endswith(_DENIED_SUFFIXES)
        or any(infix in name for infix in _DENIED_INFIXES)
    )


def _forbidden_label(node: exp.Expression) -> str | None:
    """The user-facing name of a forbidden statement node, or None if the node is allowed."""
    if isinstance(node, exp.Command):
        # The fallback node keeps the leading keyword (LOAD, CALL, RESET …) in ``this``.
        return str(node.this).upper()
    for node_type, label in _FORBIDDEN_NODES.items():
        if isinstance(node, node_type):
            return label
    return None


def _describe(statement: exp.Expression) -> str:
    """A short human label for a non-query statement, e.g. 'DROP statement'."""
    label = _forbidden_label(statement)
    if label is None and isinstance(statement, (exp.Column, exp.Identifier, exp.Literal)):
        # A bare keyword sqlglot does not know (e.g. CHECKPOINT) parses as a column reference.
        return "a bare word or expression, not a query"
    return f"{label or statement.key.upper()} statement"


def _first_line(error: Exception) -> str:
    # sqlglot's messages carry an ANSI-highlighted excerpt on later lines; keep the summary.
    return str(error).splitlines()[0].strip() if str(error) else type(error).__name__
