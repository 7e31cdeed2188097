"""What the user sees while a tool call runs: what it is doing, in their language.

A status line, not a log: it names the source or the metric when the call says which, and
never shows SQL or values (a shared channel reads it).
"""

from __future__ import annotations

from agent_core.i18n import Language, t
from agent_core.messages import ToolUseBlock


def step_title(call: ToolUseBlock, language: Language) -> str:
    """The progress line for `call`, e.g. "Querying dwh…" or "Computing attribution…"."""
    args = call.input if isinstance(call.input, dict) else {}
    source = args.get("source")
    metric = args.get("metric")
    match call.name:
        case "sql_query" if isinstance(source, str) and source:
            return t(language, "Querying {source}…", source=source)
        case "sql_query":
            return t(language, "Querying the data…")
        case "query_metric" if isinstance(args.get("metrics"), list) and args["metrics"]:
            names = ", ".join(str(name) for name in args["metrics"][:3])
            return t(language, "Computing {metrics}…", metrics=names)
        case "list_tables" | "describe_table" | "list_metrics" | "search_schema":
            return t(language, "Looking through the data catalog…")
        case "attribute_change" if isinstance(metric, str) and metric:
            return t(language, "Computing what drove {metric}…", metric=metric)
        case "attribute_change":
            return t(language, "Computing attribution…")
        case "detect_anomalies":
            return t(language, "Looking for anomalies…")
        case "make_chart":
            return t(language, "Drawing a chart…")
        case "generate_report":
            return t(language, "Writing the report…")
    return t(language, "Running {tool}…", tool=call.name)
