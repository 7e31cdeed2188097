"""How many rows a query would scan, by the engine's own planner (EXPLAIN, nothing is run).

The estimate is the largest row count the plan expects at any of its steps: PostgreSQL's
``EXPLAIN (FORMAT JSON)`` "Plan Rows", MySQL/MariaDB's ``EXPLAIN`` ``rows`` column, DuckDB's
``EXPLAIN (FORMAT json)`` "Estimated Cardinality". Blocking: callers run it in a thread.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from agent_core.data.errors import DataError
from agent_core.data.source_config import DataSourceConfig

_ESTIMATE_TIMEOUT_S = 10.0


def estimate_scan_rows(cfg: DataSourceConfig, sql: str) -> int | None:
    """The planner's largest row estimate for ``sql`` (already guarded) on ``cfg``; None when
    the planner gives none. Raises the data layer's errors (the query then runs, or fails,
    as usual and reports its own error)."""
    explain = f"EXPLAIN {sql}"
    if cfg.kind == "postgresql":
        from agent_core.data.sources import _postgres_connection

        with _postgres_connection(cfg, _ESTIMATE_TIMEOUT_S) as conn:
            row = conn.execute(f"EXPLAIN (FORMAT JSON) {sql}").fetchone()
        plan = row[0] if row else []
        plan = json.loads(plan) if isinstance(plan, str) else plan
        return _largest(_numbers(plan, "Plan Rows"))
    if cfg.kind == "mysql":
        from agent_core.data.sources import _mysql_connection

        with _mysql_connection(cfg, _ESTIMATE_TIMEOUT_S) as conn, conn.cursor() as cursor:
            cursor.execute(explain)
            names = [d[0].lower() for d in cursor.description or []]
            rows = cursor.fetchall()
        if "rows" not in names:
            return None
        at = names.index("rows")
        return _largest(float(r[at]) for r in rows if r[at] is not None)
    from agent_core.data.sources import _duckdb_rows

    rows = _duckdb_rows(cfg, f"EXPLAIN (FORMAT json) {sql}")
    plans = [json.loads(value) for _, value in rows if isinstance(value, str) and value.lstrip().startswith("[")]
    return _largest(_numbers(plans, "Estimated Cardinality"))


def safe_estimate(cfg: DataSourceConfig, sql: str) -> int | None:
    """``estimate_scan_rows``, or None when the planner refused (the query reports why)."""
    try:
        return estimate_scan_rows(cfg, sql)
    except (DataError, OSError, ValueError):
        return None
    except Exception as exc:  # a driver's own error: the run will report it
        if type(exc).__module__.split(".")[0] in {"psycopg", "pymysql", "duckdb"}:
            return None
        raise


def _numbers(node: Any, key: str) -> Iterator[float]:
    """Every value of ``key`` anywhere in a JSON plan."""
    if isinstance(node, dict):
        for name, value in node.items():
            if name == key:
                try:
                    yield float(value)
                except (TypeError, ValueError):
                    continue
            else:
                yield from _numbers(value, key)
    elif isinstance(node, list):
        for item in node:
            yield from _numbers(item, key)


def _largest(values: Iterator[float] | Any) -> int | None:
    found = [v for v in values]
    return int(max(found)) if found else None
