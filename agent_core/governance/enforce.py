"""The one entry point every data path calls before a query on a configured source runs.

``enforce(sql, source, dialect, identity, policy=…, columns=…)`` returns the SQL to run and,
when the policy changed the answer, a note for the asker. Every tool that reads a configured
source calls it (`sql_query`, `describe_table`, `query_metric`, push-down analytics and charts);
a scheduled run (report, monitor) calls it with an identity whose audience is its creator's access
joined with its target's (`agent_core.governance.audience.JointAudience`).
"""

from __future__ import annotations

from dataclasses import dataclass

import sqlglot

from agent_core.data.errors import SQLParseError
from agent_core.data.sql_guard import ensure_read_only
from agent_core.governance.audience import (
    Audience,
    Identity,
    JointAudience,
    access_note,
    audience_of,
    source_open,
    table_view,
)
from agent_core.governance.errors import AccessDenied
from agent_core.governance.policy import AccessPolicy
from agent_core.governance.rewrite import ColumnLookup, TableKey, rewrite_protected_tables


@dataclass(frozen=True)
class Enforced:
    """The query as it must run, and what to tell the asker (None: nothing changed)."""

    sql: str
    note: str | None = None


def enforce(
    sql: str,
    source: str,
    dialect: str,
    identity: Identity,
    *,
    policy: AccessPolicy | None,
    columns: ColumnLookup,
) -> Enforced:
    """``sql`` rewritten so ``identity``'s audience reads only what the policy lets it.

    ``dialect`` is the source's sqlglot dialect (duckdb, postgres, mysql); ``columns`` returns
    the column names of a table reference, asked only for tables with hidden columns. Without
    a policy, or for a source the policy does not name, the SQL is returned unchanged (the
    executors still guard it). Raises :class:`AccessDenied`, and the SQL guard's
    :class:`~agent_core.data.errors.UnsafeSQLError` for SQL that is not one read-only query.
    """
    governed = policy.sources.get(source) if policy is not None else None
    if policy is None or governed is None:
        return Enforced(sql)
    audience = require_source(policy, source, identity)
    safe_sql = ensure_read_only(sql, dialect)
    views = {
        TableKey.parse(name): view
        for name, table in governed.tables.items()
        if (view := table_view(name, table, audience)).restricts
    }
    if not views:
        return Enforced(safe_sql)
    try:
        statement = sqlglot.parse_one(safe_sql, read=dialect)
    except sqlglot.errors.SqlglotError as error:  # the regenerated SQL must read back the same
        raise SQLParseError(f"The SQL could not be checked ({error.__class__.__name__}).") from error
    applied = rewrite_protected_tables(statement, views, dialect, columns)
    return Enforced(statement.sql(dialect=dialect, comments=False), access_note(applied, audience))


def require_source(policy: AccessPolicy, source: str, identity: Identity) -> Audience:
    """The audience of ``identity`` if it may use ``source``; raises :class:`AccessDenied`."""
    audience = audience_of(policy, identity)
    governed = policy.sources.get(source)
    if governed is not None and not source_open(governed, audience):
        whom = (
            "this scheduled report or monitor"
            if isinstance(audience, JointAudience)
            else "you" if identity.is_dm else "this channel"
        )
        raise AccessDenied(
            f"The data source {source!r} is not open to {whom} under the access policy."
        )
    return audience


def is_source_open(policy: AccessPolicy | None, source: str, identity: Identity) -> bool:
    """True if the policy lets ``identity``'s audience use ``source`` (or does not govern it)."""
    if policy is None or source not in policy.sources:
        return True
    return source_open(policy.sources[source], audience_of(policy, identity))

