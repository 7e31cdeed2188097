"""The access policy's names checked against a source's catalog.

A misspelt table or column in ``BA_ACCESS_POLICY`` protects nothing and leaves the real one open,
so every table the policy names must exist in its source, and every column it hides or grants
must exist in that table: otherwise the policy is an error at start-up, and a source whose
catalog no longer matches (a table renamed since) is closed when it is checked again
(`agent_core.governance.availability`). Objects that read a protected table without being protected
themselves -- a view over it, a child table or partition of it -- are reported as warnings: the
policy applies to the names it lists, and such an object is another way to the same rows.

Blocking (catalog queries); database drivers load on first use.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

from agent_core.data.errors import TableNotFound
from agent_core.data.source_config import DataSourceConfig
from agent_core.governance.policy import SourcePolicy
from agent_core.governance.rewrite import TableKey, fold

_TIMEOUT_S = 10.0


@dataclass
class PolicyCheck:
    """What is wrong (``errors``) and worth a warning (``warnings``) about one source's policy."""

    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def check_policy_names(cfg: DataSourceConfig, governed: SourcePolicy) -> PolicyCheck:
    """Compare the tables and columns ``governed`` names with ``cfg``'s catalog.

    Raises the data layer's errors when the catalog cannot be read.
    """
    from sqlalchemy.exc import NoSuchTableError

    from agent_core.data.sources import describe_source_table, list_source_tables

    check = PolicyCheck()
    tables = list_source_tables(cfg)
    protected = {TableKey.parse(name) for name in governed.tables}
    for name, table in governed.tables.items():
        key = TableKey.parse(name)
        found = [
            t for t in tables
            if fold(t.name) == key.name and (key.schema is None or fold(t.schema_name or "") == key.schema)
        ]  # fmt: skip
        if not found:
            spelled = [t.name for t in tables] + [f"{t.schema_name}.{t.name}" for t in tables if t.schema_name]
            near = difflib.get_close_matches(name, spelled)
            hint = f" (did you mean {', '.join(sorted(set(near)))}?)" if near else ""
            check.errors.append(f"source {cfg.name!r} has no table {name!r}{hint}")
            continue
        named = [*table.hidden_columns, *(c for granted in table.column_grants.values() for c in granted)]
        # An unqualified name protects the table of that name in every schema: a column is
        # unknown when none of them has it.
        seen: list[str] = []
        for match in found:
            try:
                seen += [c.name for c in describe_source_table(cfg, match.name, match.schema_name).columns]
            except (TableNotFound, NoSuchTableError):  # dropped since it was listed
                continue
            for schema, reader, kind in _readers(cfg, match.schema_name or "main", match.name):
                if TableKey(fold(reader), fold(schema)) in protected or TableKey(fold(reader), None) in protected:
                    continue
                check.warnings.append(
                    f"the {kind} {schema}.{reader} of source {cfg.name!r} reads the protected table {name!r} "
                    "but the access policy does not list it: its rows are not filtered (list it, or do not "
                    "grant the bot's role access to it)"
                )
        unknown = sorted({c for c in named if fold(c) not in {fold(n) for n in seen}})
        if unknown:
            columns = ", ".join(dict.fromkeys(seen))
            check.errors.append(
                f"table {name!r} of source {cfg.name!r} has no column {', '.join(map(repr, unknown))} (its columns: {columns})"
            )
    return check


def _readers(cfg: DataSourceConfig, schema: str, table: str) -> list[tuple[str, str, str]]:
    """(schema, name, kind) of the views, child tables and partitions that read ``schema.table``."""
    if cfg.kind == "postgresql":
        from agent_core.data.sources import _postgres_connection

        with _postgres_connection(cfg, _TIMEOUT_S) as conn:
            relation = conn.execute(
                "SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %s AND c.relname = %s",
                (schema, table),
            ).fetchone()
            if relation is None:
                return []
            rows = conn.execute(
                "SELECT DISTINCT vn.nspname, v.relname, 'view' FROM pg_depend d "
                "JOIN pg_rewrite r ON r.oid = d.objid JOIN pg_class v ON v.oid = r.ev_class "
                "JOIN pg_namespace vn ON vn.oid = v.relnamespace "
                "WHERE d.classid = 'pg_rewrite'::regclass AND d.refobjid = %(t)s AND v.oid <> %(t)s "
                "UNION SELECT cn.nspname, c.relname, "
                "CASE WHEN c.relispartition THEN 'partition' ELSE 'child table' END FROM pg_inherits i "
                "JOIN pg_class c ON c.oid = i.inhrelid JOIN pg_namespace cn ON cn.oid = c.relnamespace "
                "WHERE i.inhparent = %(t)s ORDER BY 1, 2",
                {"t": relation[0]},
            ).fetchall()
        return [(str(s), str(n), str(k)) for s, n, k in rows]
    if cfg.kind == "mysql":
        from agent_core.data.sources import _mysql_connection

        with _mysql_connection(cfg, _TIMEOUT_S) as conn, conn.cursor() as cursor:
            cursor.execute(
                "SELECT TABLE_SCHEMA, TABLE_NAME FROM information_schema.VIEWS "
                "WHERE VIEW_DEFINITION LIKE %s ORDER BY 1, 2",
                (f"%`{schema}`.`{table}`%",),
            )
            return [(str(s), str(n), "view") for s, n in cursor.fetchall()]
    from agent_core.data.sources import _duckdb_rows

    rows = _duckdb_rows(
        cfg,
        "SELECT schema_name, view_name FROM duckdb_views() WHERE NOT internal "
        "AND regexp_matches(lower(sql), ?) ORDER BY 1, 2",
        [rf"\b{re.escape(table.lower())}\b"],
    )
    return [(str(s), str(n), "view") for s, n in rows]
