"""The check that a configured source's database role can only read.

The SQL guard and the read-only sessions are two layers; the database role is the third and the
only one enforced by the server itself. A role that can do more than read turns any gap in the
first two into an incident: a superuser can read server files (``pg_read_file``), list
directories, terminate other sessions and reload the configuration even inside a read-only
transaction; MySQL ``FILE`` reads server files, ``SUPER`` / ``PROCESS`` / ``CONNECTION_ADMIN``
reach other sessions.

:func:`check_source_privileges` connects to one source and lists what its role can do beyond
reading:

* PostgreSQL — superuser (``rolsuper``), ``CREATEROLE`` / ``CREATEDB`` / ``REPLICATION``;
  membership in a superuser role or in the predefined roles that reach files, programs, other
  sessions or all data (``pg_read_server_files``, ``pg_write_server_files``,
  ``pg_execute_server_program``, ``pg_signal_backend``, ``pg_read_all_settings``,
  ``pg_monitor``, ``pg_write_all_data`` …); owning the database; ``CREATE`` on the database;
  owning or having ``CREATE`` on a schema it can use; owning or having ``INSERT`` /
  ``UPDATE`` / ``DELETE`` / ``TRUNCATE`` / ``TRIGGER`` / ``REFERENCES`` on a table, view or
  column, or ``USAGE`` / ``UPDATE`` on a sequence, in those schemas.
* MySQL / MariaDB — every privilege in ``SHOW GRANTS`` (including those of granted roles) other
  than ``SELECT``, ``SHOW VIEW``, ``SHOW DATABASES`` and ``USAGE``: ``FILE``, ``SUPER``,
  ``PROCESS``, ``ALL PRIVILEGES``, write privileges, ``PROXY``, ``WITH GRANT OPTION`` ….
* DuckDB — nothing: the file is always opened ``read_only=True`` without external access.

:func:`agent_core.governance.availability.verify_sources` runs the check for every source at
start-up, with :func:`read_only_role_instructions` in its refusal.
"""

from __future__ import annotations

import re
from typing import Any

import psycopg

from agent_core.data.errors import QueryFailed
from agent_core.data.source_config import DataSourceConfig, _sqlalchemy_url
from agent_core.data.sources import _mysql_connection, _postgres_connection

_CHECK_TIMEOUT_S = 15.0
_MAX_LISTED = 5  # objects named per problem; the rest are counted

# PostgreSQL predefined roles that give more than reading the tables a role was granted.
_POSTGRES_RISKY_ROLES: dict[str, str] = {
    "pg_read_server_files": "reads any file on the database server",
    "pg_write_server_files": "writes files on the database server",
    "pg_execute_server_program": "runs programs on the database server",
    "pg_signal_backend": "can cancel or terminate other sessions",
    "pg_read_all_settings": "reads every setting, including server file paths",
    "pg_read_all_stats": "sees other sessions' queries",
    "pg_stat_scan_tables": "can take locks through monitoring functions",
    "pg_monitor": "sees other sessions' queries and every setting",
    "pg_write_all_data": "can write to every table",
    "pg_read_all_data": "can read every table, not only the granted ones",
    "pg_checkpoint": "can force checkpoints",
    "pg_maintain": "can VACUUM, ANALYZE, CLUSTER, REFRESH and LOCK every table",
    "pg_create_subscription": "can create logical-replication subscriptions",
    "pg_use_reserved_connections": "can use reserved connection slots",
    "pg_signal_autovacuum_worker": "can signal autovacuum workers",
}
_POSTGRES_SYSTEM_SCHEMA_FILTER = (
    "n.nspname NOT IN ('pg_catalog', 'information_schema') AND n.nspname NOT LIKE 'pg\\_%'"
)

# MySQL / MariaDB privileges a read-only analytics role may hold.
_MYSQL_READ_PRIVILEGES = frozenset({"SELECT", "SHOW VIEW", "SHOW DATABASES", "USAGE"})
_MYSQL_EXPLAINED: dict[str, str] = {
    "FILE": "reads and writes server files (LOAD_FILE, INTO OUTFILE)",
    "SUPER": "administers the server and other sessions",
    "PROCESS": "sees other sessions' queries",
    "ALL PRIVILEGES": "every privilege, including writes",
    "ALL": "every privilege, including writes",
    "PROXY": "can act as other accounts",
    "CONNECTION_ADMIN": "can kill other sessions",
    "SYSTEM_VARIABLES_ADMIN": "can change server settings",
}


def check_source_privileges(cfg: DataSourceConfig) -> list[str]:
    """What the source's database role can do beyond reading; empty when it is read-only.

    Connects to the source (read-only session). Raises :class:`QueryFailed` if the server
    cannot be reached or the catalog cannot be read.
    """
    if cfg.kind == "duckdb":
        return []  # always opened read_only=True without external access
    if cfg.kind == "postgresql":
        return _postgres_problems(cfg)
    return _mysql_problems(cfg)


def read_only_role_instructions(cfg: DataSourceConfig) -> str:
    """How to create a read-only role for ``cfg``'s kind of database (one paragraph)."""
    if cfg.kind == "duckdb":
        return ""
    database = _sqlalchemy_url(cfg).database or "<database>"
    if cfg.kind == "postgresql":
        return (
            "Create a read-only role and point the URL at it, e.g. as a superuser: "
            f"CREATE ROLE ba_reader LOGIN PASSWORD '…'; GRANT CONNECT ON DATABASE {database} "
            "TO ba_reader; then for each schema it should read: GRANT USAGE ON SCHEMA public TO "
            "ba_reader; GRANT SELECT ON ALL TABLES IN SCHEMA public TO ba_reader; ALTER "
            "DEFAULT PRIVILEGES IN SCHEMA public GRANT SELECT ON TABLES TO ba_reader; (on "
            "PostgreSQL 14 and older also: REVOKE CREATE ON SCHEMA public FROM PUBLIC)."
        )
    if cfg.kind == "mysql":
        return (
            "Create a read-only account and point the URL at it, e.g.: CREATE USER "
            "'ba_reader'@'%' IDENTIFIED BY '…'; GRANT SELECT, SHOW VIEW ON "
            f"`{database}`.* TO 'ba_reader'@'%';"
        )


# --- PostgreSQL ------------------------------------------------------------------------------


def _postgres_problems(cfg: DataSourceConfig) -> list[str]:
    try:
        with _postgres_connection(cfg, _CHECK_TIMEOUT_S) as conn:
            return _postgres_problems_on(conn)
    except psycopg.Error as error:
        raise QueryFailed(
            f"Could not read the privileges of {cfg.name!r}: {_first_line(error)}"
        ) from error


def _postgres_problems_on(conn: psycopg.Connection) -> list[str]:
    role, superuser, createrole, createdb, replication = _one(
        conn.execute(
            "SELECT rolname, rolsuper, rolcreaterole, rolcreatedb, rolreplication "
            "FROM pg_roles WHERE rolname = current_user"
        ).fetchone()
    )
    if superuser:
        # Implies everything below; listing it all would only bury the point.
        return [
            f"role {role!r} is a superuser (rolsuper): it can read server files, run programs, "
            f"terminate other sessions and reload the server configuration"
        ]
    problems: list[str] = []
    for flag, label in (
        (createrole, "CREATEROLE (can create roles and grant itself more)"),
        (createdb, "CREATEDB (can create databases)"),
        (replication, "REPLICATION (can stream the whole database's changes)"),
    ):
        if flag:
            problems.append(f"role {role!r} has {label}")
    for (name,) in conn.execute(
        "SELECT rolname FROM pg_roles WHERE rolsuper AND rolname <> current_user "
        "AND pg_has_role(current_user, oid, 'MEMBER') ORDER BY 1"
    ):
        problems.append(f"role {role!r} is a member of the superuser role {name!r}")
    for (name,) in conn.execute(
        "SELECT rolname FROM pg_roles WHERE rolname = ANY(%s) "
        "AND pg_has_role(current_user, oid, 'MEMBER') ORDER BY 1",
        [list(_POSTGRES_RISKY_ROLES)],
    ):
        problems.append(f"role {role!r} is a member of {name} ({_POSTGRES_RISKY_ROLES[name]})")
    owns_db, create_on_db, database = _one(
        conn.execute(
            "SELECT pg_has_role(current_user, datdba, 'MEMBER'), "
            "has_database_privilege(current_database(), 'CREATE'), current_database() "
            "FROM pg_database WHERE datname = current_database()"
        ).fetchone()
    )
    if owns_db:
        problems.append(f"role {role!r} owns the database {database!r}")
    elif create_on_db:
        problems.append(f"role {role!r} has CREATE on the database {database!r}")
    schema_rows = conn.execute(
        "SELECT n.nspname, pg_has_role(current_user, n.nspowner, 'MEMBER'), "
        "has_schema_privilege(n.oid, 'CREATE') FROM pg_namespace n "
        f"WHERE {_POSTGRES_SYSTEM_SCHEMA_FILTER} AND has_schema_privilege(n.oid, 'USAGE') "
        "ORDER BY 1"
    ).fetchall()
    for schema, owns, create in schema_rows:
        if owns:
            problems.append(f"role {role!r} owns the schema {schema!r}")
        elif create:
            problems.append(f"role {role!r} has CREATE on the schema {schema!r}")
    writable = conn.execute(
        "SELECT n.nspname, c.relname, pg_has_role(current_user, c.relowner, 'MEMBER') "
        "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        f"WHERE c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S') AND {_POSTGRES_SYSTEM_SCHEMA_FILTER} "
        "AND has_schema_privilege(n.oid, 'USAGE') AND ("
        "pg_has_role(current_user, c.relowner, 'MEMBER') OR CASE WHEN c.relkind = 'S' "
        "THEN has_sequence_privilege(c.oid, 'USAGE, UPDATE') "
        "ELSE has_table_privilege(c.oid, 'INSERT, UPDATE, DELETE, TRUNCATE, TRIGGER, REFERENCES') "
        "OR has_any_column_privilege(c.oid, 'INSERT, UPDATE, REFERENCES') END) "
        "ORDER BY 1, 2"
    ).fetchall()
    owned = [f"{s}.{t}" for s, t, owns in writable if owns]
    written = [f"{s}.{t}" for s, t, owns in writable if not owns]
    if owned:
        problems.append(f"role {role!r} owns {_listing(owned, 'table')}")
    if written:
        problems.append(
            f"role {role!r} has write privileges (INSERT, UPDATE, DELETE, TRUNCATE, TRIGGER, "
            f"REFERENCES or sequence USAGE/UPDATE) on {_listing(written, 'table')}"
        )
    return problems


# --- MySQL / MariaDB -------------------------------------------------------------------------


def _mysql_problems(cfg: DataSourceConfig) -> list[str]:
    import pymysql

    try:
        with _mysql_connection(cfg, _CHECK_TIMEOUT_S) as conn, conn.cursor() as cursor:
            cursor.execute("SELECT CURRENT_USER(), VERSION()")
            account, version = cursor.fetchone()
            grants = _mysql_grants(cursor, is_mariadb="mariadb" in str(version).lower())
    except pymysql.MySQLError as error:
        raise QueryFailed(
            f"Could not read the privileges of {cfg.name!r}: {error.args[-1]}"
        ) from error
    problems: list[str] = []
    for line in grants:
        for problem in _mysql_grant_problems(line):
            if problem not in problems:
                problems.append(problem)
    return [f"account {account!r} has {problem}" for problem in problems]


def _mysql_grants(cursor: Any, *, is_mariadb: bool) -> list[str]:
    """The GRANT lines of the current account and of every role granted to it."""
    cursor.execute("SHOW GRANTS")
    lines = [row[0] for row in cursor.fetchall()]
    roles = [role for line in lines for role in _granted_roles(line)]
    if not roles:
        return lines
    if not is_mariadb:
        # MySQL 8: USING expands the privileges of the granted roles in one statement.
        cursor.execute("SHOW GRANTS FOR CURRENT_USER() USING " + ", ".join(roles))
        return [row[0] for row in cursor.fetchall()]
    # MariaDB shows a role's grants (and those of the roles granted to it) only while it is
    # the session's current role; SHOW GRANTS FOR role needs access to the mysql schema.
    for role in roles:
        cursor.execute(f"SET ROLE {role}")
        cursor.execute("SHOW GRANTS")
        lines += [row[0] for row in cursor.fetchall()]
    cursor.execute("SET ROLE NONE")
    return lines


def _granted_roles(line: str) -> list[str]:
    """Roles granted by a ``GRANT `role` TO …`` line (a line without ``ON``), as quoted text."""
    masked = _mask_quoted(line)
    if not masked.upper().startswith("GRANT ") or " ON " in masked.upper():
        return []
    end = masked.upper().find(" TO ")
    if end < 0:
        return []
    return [part.strip() for part in _split_top_level(line[6:end], masked[6:end]) if part.strip()]


def _mysql_grant_problems(line: str) -> list[str]:
    """Privileges beyond reading in one ``GRANT … ON … TO …`` line."""
    masked = _mask_quoted(line)
    upper = masked.upper()
    on = upper.find(" ON ")
    to = upper.find(" TO ", on + 1)
    if not upper.startswith("GRANT ") or on < 0 or to < 0:
        return []
    target = line[on + 4 : to].strip()
    privileges = [
        re.sub(r"\s*\(.*\)\s*$", "", text).strip().upper()
        for text in _split_top_level(line[6:on], masked[6:on])
    ]
    problems = []
    for privilege in privileges:
        if privilege and privilege not in _MYSQL_READ_PRIVILEGES:
            why = _MYSQL_EXPLAINED.get(privilege)
            if privilege in ("ALL", "ALL PRIVILEGES") and target == "*.*":
                why = "every privilege, including FILE, SUPER and writes"
            problems.append(f"{privilege} on {target}" + (f" ({why})" if why else ""))
    if "WITH GRANT OPTION" in upper[to:]:
        problems.append(f"WITH GRANT OPTION on {target} (can grant its privileges to others)")
    return problems


def _mask_quoted(text: str) -> str:
    """``text`` with everything inside quotes and backticks replaced by ``_`` (same length)."""
    out: list[str] = []
    quote: str | None = None
    for ch in text:
        if quote is None:
            if ch in "`'\"":
                quote = ch
            out.append(ch)
        elif ch == quote:
            quote = None
            out.append(ch)
        else:
            out.append("_")
    return "".join(out)


def _split_top_level(text: str, masked: str) -> list[str]:
    """Split ``text`` on commas outside quotes and parentheses (using its masked twin)."""
    parts: list[str] = []
    depth = start = 0
    for i, ch in enumerate(masked):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


# --- helpers ---------------------------------------------------------------------------------


def _one(row: tuple[Any, ...] | None) -> tuple[Any, ...]:
    if row is None:  # the current role / database always has a catalog row
        raise QueryFailed("The database catalog did not describe the current role or database.")
    return row


def _listing(names: list[str], noun: str) -> str:
    shown = ", ".join(names[:_MAX_LISTED])
    more = f" and {len(names) - _MAX_LISTED} more" if len(names) > _MAX_LISTED else ""
    plural = noun if len(names) == 1 else f"{noun}s"
    return f"{len(names)} {plural} ({shown}{more})"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
