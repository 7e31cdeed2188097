"""The standard tool set -- which module builds each tool, imported only when a tool of it is
built -- and the prompt section that describes the data and tools it reaches."""

from __future__ import annotations

import importlib
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, cast

from agent_core.config import AgentConfig
from agent_core.data.demo import DEMO_DESCRIPTION, demo_database_path, ensure_demo_database

if TYPE_CHECKING:
    from agent_core.toolkit.protocol import Tool
    from agent_core.tools.deps import ToolDeps, ToolModule

# Tool name -> the module whose `build(deps)` makes it, in the order the model sees the tools.
# Modules are imported when their tools are built, so `ba-agent tool run NAME` loads that one
# tool's dependencies rather than every tool's.
STANDARD_TOOLS: dict[str, str] = {
    "sql_query": "agent_core.tools.sql",
    "list_tables": "agent_core.tools.data_tools",
    "describe_table": "agent_core.tools.data_tools",
    "list_metrics": "agent_core.tools.metric_tools",
    "query_metric": "agent_core.tools.metric_tools",
    "detect_anomalies": "agent_core.tools.analytics_tools",
    "attribute_change": "agent_core.tools.analytics_tools",
    "make_chart": "agent_core.tools.charts",
    "generate_report": "agent_core.tools.reports",
    "ls": "agent_core.tools.files",
    "read_file": "agent_core.tools.files",
    "write_file": "agent_core.tools.files",
    "edit_file": "agent_core.tools.files",
    "grep": "agent_core.tools.files",
    "glob": "agent_core.tools.files",
    # Built only with the service database and data sources (its catalog lives there).
    "search_schema": "agent_core.tools.schema_tools",
}


def _module(name: str) -> ToolModule:
    return cast("ToolModule", importlib.import_module(name))


def standard_tools(deps: ToolDeps) -> list[Tool]:
    """Every standard tool ``deps`` allows, in the table's order."""
    return [tool for module in dict.fromkeys(STANDARD_TOOLS.values()) for tool in _module(module).build(deps)]


def default_tools(deps: ToolDeps) -> list[Tool]:
    """Tools every conversation gets. Builds the demo database if it is missing.

    ``deps.config.datasources`` are the operator-configured databases (``BA_DATASOURCES``);
    each tool enforces their channel/user allowlists per conversation. With the service
    database (``deps.sessions``) and data sources, `search_schema` searches their stored
    catalog, and every query on a source takes one governed path, limited and audited
    (``deps.access``, see `ToolDeps.of`).
    """
    ensure_demo_database(demo_database_path(deps.config.data_dir))
    return standard_tools(deps)


def build_tool(deps: ToolDeps, name: str) -> Tool | None:
    """The standard tool called `name` alone (None if there is none or ``deps`` do not allow
    it), demo database included."""
    module = STANDARD_TOOLS.get(name)
    if module is None:
        return None
    # DuckDB opens the demo database without holding the GIL: the check runs while the tool's
    # modules import, off a one-shot command's start-up time.
    with ThreadPoolExecutor(max_workers=1) as pool:
        demo = pool.submit(ensure_demo_database, demo_database_path(deps.config.data_dir))
        tool = next((tool for tool in _module(module).build(deps) if tool.name == name), None)
        demo.result()
    return tool


def tools_prompt_section(config: AgentConfig) -> str:
    """What data and tools exist, for the system prompt.

    Stable text only: it is part of the cached prompt prefix, so no dates, counts or
    per-conversation details (source names are not listed either, since allowlists make them
    differ between conversations; list_tables shows the ones available).
    """
    lines = [
        "## Data you can query",
        DEMO_DESCRIPTION,
        "",
        "Files the user uploads in a conversation become tables of that conversation only "
        "(query them by plain name); list_tables shows them with the file each came from, and "
        "describe_table shows columns, value ranges and sample rows.",
    ]
    if config.datasources:
        lines.append(
            "Company databases may also be available, depending on the channel and user: "
            "list_tables names the ones open here; query them with sql_query(source=...) in "
            "their own SQL dialect. Their schemas can be large: call search_schema with the "
            "question first, which returns the few relevant tables with their columns and "
            "verified example queries, instead of listing and describing tables one by one."
        )
    lines += [
        "",
        "## Tools and workspace",
        "- list_metrics, query_metric: the governed metric definitions and their values (by "
        "dimension, time grain, date range); use them first when a metric fits the question.",
        "- sql_query: read-only SQL; aggregate in the query.",
        "- make_chart: a PNG chart (line, bar, stacked_bar, scatter, combo) posted to the chat; "
        "Chinese labels work.",
        "- generate_report: a Markdown report file posted to the chat.",
        "- ls, read_file, write_file, edit_file, grep, glob: this conversation's workspace: "
        "/uploads (the user's files, read-only), /data (working files), /charts, /reports.",
    ]
    return "\n".join(lines)
