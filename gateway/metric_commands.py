"""`ba-agent metrics list|query`: the governed metrics (BA_SEMANTIC_DIR, or the bundled demo
model) from the terminal, and the start-up check that their YAML is valid.

Heavy imports (dbt-semantic-interfaces, sqlglot, database drivers) happen inside the commands,
so registering them costs the other commands nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import date, datetime
from decimal import Decimal
from typing import Any

from gateway.config import load_settings
from gateway.startup_checks import verify_semantic_layer


def register(commands: Any) -> None:
    """Add the `metrics` command to the CLI's subparsers."""
    metrics = commands.add_parser("metrics", help="governed metric definitions (dbt Semantic Layer YAML)")
    metric_commands = metrics.add_subparsers(dest="metrics_command", required=True)
    listing = metric_commands.add_parser("list", help="one metric a line: name, type, description")
    listing.set_defaults(func=_list)
    query = metric_commands.add_parser("query", help="compute metrics and print a table")
    query.add_argument("--metrics", required=True, help="comma-separated metric names, e.g. gmv,aov")
    query.add_argument("--group-by", default="", help="comma-separated dimensions, e.g. region,metric_time__week")
    query.add_argument("--where", help="filter over dimensions, e.g. \"region = 'East China'\"")
    query.add_argument("--grain", choices=["day", "week", "month", "quarter", "year"], help="time grain of metric_time")
    query.add_argument("--start", help="first day, YYYY-MM-DD")
    query.add_argument("--end", help="last day, YYYY-MM-DD")
    query.add_argument("--order-by", default="", help="comma-separated names, '-' prefix for descending")
    query.add_argument("--limit", type=int, help="most rows")
    query.add_argument("--source", help="the source defining the metrics (when several do)")
    query.add_argument("--sql", action="store_true", help="also print the compiled SQL")
    query.set_defaults(func=_query)


def _list(_args: argparse.Namespace) -> int:
    from agent_core.tools.metric_tools import MetricCatalog, metric_summaries

    settings = load_settings()
    verify_semantic_layer(settings)
    catalog = MetricCatalog(settings)
    sources = catalog.layer.sources.values()
    summaries = [summary for source in sources for summary in metric_summaries(source)]
    width = max((len(s.name) for s in summaries), default=0)
    for summary in summaries:
        where = f" [{summary.source}]" if len(catalog.layer.sources) > 1 else ""
        print(f"{summary.name:<{width}}  {summary.type:<10}  {summary.description or ''}{where}".rstrip())
    return 0


def _query(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from agent_core.data.demo import demo_database_path, ensure_demo_database
    from agent_core.messages import new_id
    from agent_core.run_context import RunContext
    from agent_core.tools.base import ToolError
    from agent_core.tools.metric_tools import MetricQueryResult, QueryMetricInput, QueryMetricTool
    from gateway.tool_runner import service_audit

    settings = load_settings()
    verify_semantic_layer(settings)
    raw = {
        "metrics": _names(args.metrics),
        "group_by": _names(args.group_by),
        "where": args.where,
        "grain": args.grain,
        "start": args.start,
        "end": args.end,
        "order_by": _names(args.order_by),
        "limit": args.limit,
        "source": args.source,
    }
    try:
        query = QueryMetricInput.model_validate({k: v for k, v in raw.items() if v not in (None, [])})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors())
        print(f"ba-agent: invalid metric query: {problems}", file=sys.stderr)
        return 2
    ensure_demo_database(demo_database_path(settings.data_dir))
    ctx = RunContext(
        thread_id="cli", data_dir=settings.data_dir, channel="cli", user="operator", tool_call_id=f"cli_{new_id()}"
    )

    async def run() -> MetricQueryResult:
        async with service_audit(settings) as audit:  # recorded like any read of a source
            from agent_core.tools.catalog import source_access

            return await QueryMetricTool(settings, source_access(settings, audit)).run(query, ctx)

    try:
        result = asyncio.run(run())
    except ToolError as exc:
        print(f"ba-agent: {exc}", file=sys.stderr)
        return 1
    columns = [*query.output_group_by, *query.metrics]
    print(_table(columns, [[row.get(c) for c in columns] for row in result.rows]))
    if result.truncated:
        print(f"(first {result.row_count} rows)")
    if args.sql:
        print(f"\n{result.sql}")
    return 0


def _names(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _table(columns: list[str], rows: list[list[Any]]) -> str:
    cells = [columns, *([_cell(v) for v in row] for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(columns))]
    numeric = [all(isinstance(row[i], int | float | Decimal) or row[i] is None for row in rows) for i in range(len(columns))]
    lines = []
    for n, line in enumerate(cells):
        padded = [c.rjust(w) if numeric[i] and n else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths, strict=True))]
        lines.append("  ".join(padded).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:,.4f}".rstrip("0").rstrip(".") if abs(value) < 1000 else f"{value:,.2f}"
    if isinstance(value, Decimal):
        return f"{value:,}"
    if isinstance(value, datetime | date):
        return value.isoformat()
    return str(value)
