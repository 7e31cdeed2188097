"""`ba-agent metrics list|query`: the governed metrics (BA_SEMANTIC_DIR, or the bundled demo
model) from the terminal, and the start-up check that their YAML is valid.

Heavy imports (dbt-semantic-interfaces, sqlglot, database drivers) happen inside the commands,
so registering them costs the other commands nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from datetime import date, datetime, timedelta
from decimal import Decimal
from typing import Any

from gateway.cli.startup_checks import verify_semantic_layer
from gateway.config import load_settings


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
    from agent_core.semantic.catalog import MetricCatalog, metric_summaries

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
    from agent_core.governance.access import SourceAccess
    from agent_core.messages import new_id
    from agent_core.run_context import RunContext
    from agent_core.semantic.catalog import MetricCatalog, MetricQueryResult, run_metric_query
    from agent_core.semantic.query import MetricQuery, SourcedMetricQuery
    from agent_core.toolkit.pipeline import validation_message
    from agent_core.toolkit.protocol import ToolError
    from gateway.cli.tool_run import service_audit

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
        query = SourcedMetricQuery.model_validate({k: v for k, v in raw.items() if v not in (None, [])})
    except ValidationError as exc:
        print(f"ba-agent: invalid metric query: {validation_message(exc)}", file=sys.stderr)
        return 2
    ensure_demo_database(demo_database_path(settings.data_dir))
    ctx = RunContext(
        thread_id="cli", data_dir=settings.data_dir, channel="cli", user="operator", tool_call_id=f"cli_{new_id()}"
    )

    async def run_query(metric_query: SourcedMetricQuery) -> MetricQueryResult:
        async with service_audit(settings) as audit:  # recorded like any read of a source
            catalog = MetricCatalog(settings, SourceAccess(settings.datasources, settings.access_policy, audit))
            semantics = catalog.source_for(metric_query.metrics, metric_query.source, ctx)
            plain = MetricQuery.model_validate(metric_query.model_dump(exclude={"source"}))
            return await run_metric_query(catalog, semantics, plain, ctx)

    try:
        result = asyncio.run(run_query(query))
    except ToolError as exc:
        print(f"ba-agent: {exc}", file=sys.stderr)
        return 1
    columns = [*query.output_group_by, *query.metrics]
    table = [[row.get(c) for c in columns] for row in result.rows]
    period = f"metric_time__{query.grain}"
    if query.grain in PERIOD_GRAINS and period in columns:
        daily = query.model_copy(update={"grain": "day", "group_by": [], "order_by": [], "limit": None})
        covered = [_as_date(row.get("metric_time__day")) for row in asyncio.run(run_query(daily)).rows]
        days = [day for day in covered if day is not None]
        if days:
            first, last = max(min(days), query.start or date.min), min(max(days), query.end or date.max)
            column = columns.index(period)
            notes = [_partial(_as_date(row[column]), query.grain, first, last) for row in table]
            if any(notes):
                columns.append("note")
                table = [[*row, note] for row, note in zip(table, notes, strict=True)]
    print(_table(columns, table))
    if "note" in columns:
        note = "the data or --start/--end cover only in part; do not compare its total with whole ones"
        print(f"(partial: a {query.grain} {note})")
    if result.truncated:
        print(f"(first {result.row_count} rows)")
    if args.sql:
        print(f"\n{result.sql}")
    return 0


PERIOD_GRAINS = ("week", "month", "quarter", "year")


def _as_date(value: Any) -> date | None:
    if isinstance(value, datetime):
        return value.date()
    if isinstance(value, date):
        return value
    return date.fromisoformat(str(value)[:10]) if value else None


def _partial(start: date | None, grain: str, first: date, last: date) -> str:
    """"partial" when the period starting at `start` reaches before the first or after the
    last day covered (a week is Monday to Sunday, as the query truncates it)."""
    if start is None:
        return ""
    if grain == "week":
        end = start + timedelta(days=6)
    else:
        months = {"month": 1, "quarter": 3, "year": 12}[grain]
        year, month = divmod(start.month - 1 + months, 12)
        end = date(start.year + year, month + 1, 1) - timedelta(days=1)
    if start < first:
        return f"partial (from {first.isoformat()})"
    if end > last:
        return f"partial (to {last.isoformat()})"
    return ""


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
