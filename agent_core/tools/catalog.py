"""The standard tool set and the prompt section that describes the data and tools it reaches."""

from __future__ import annotations

import importlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from agent_core.config import AgentConfig
from agent_core.data.demo import DEMO_DESCRIPTION, demo_database_path, ensure_demo_database

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import async_sessionmaker
    from sqlmodel.ext.asyncio.session import AsyncSession

    from agent_core.data.access import SourceAccess
    from agent_core.governance.audit import AuditTrail
    from agent_core.toolkit.protocol import Tool


@dataclass(frozen=True)
class ToolEntry:
    """Where a standard tool's class lives. Its module is imported when the tool is built, so
    `ba-agent tool run NAME` loads that one tool's dependencies rather than every tool's."""

    name: str
    module: str
    class_name: str
    takes_sources: bool = False  # built with the operator's `BA_DATASOURCES`
    takes_config: bool = False  # built with the whole AgentConfig (e.g. BA_SEMANTIC_DIR too)
    governed: bool = False  # reads data from the sources: built with the governed path (SourceAccess)

    def build(self, config: AgentConfig, access: SourceAccess | None = None) -> Tool:
        tool_class = getattr(importlib.import_module(self.module), self.class_name)
        extra = {"access": access} if self.governed else {}
        if self.takes_config:
            return tool_class(config, **extra)
        if self.takes_sources:  # the sources, and the access policy that governs them
            tool: Tool = tool_class(config.datasources, access_policy=config.access_policy, **extra)
        else:
            tool = tool_class()
        return tool


STANDARD_TOOLS: tuple[ToolEntry, ...] = (
    ToolEntry("sql_query", "agent_core.tools.sql", "SqlQueryTool", takes_sources=True, governed=True),
    ToolEntry("list_tables", "agent_core.tools.data_tools", "ListTablesTool", takes_sources=True),
    ToolEntry("describe_table", "agent_core.tools.data_tools", "DescribeTableTool", takes_sources=True, governed=True),
    ToolEntry("list_metrics", "agent_core.tools.metric_tools", "ListMetricsTool", takes_config=True),
    ToolEntry("query_metric", "agent_core.tools.metric_tools", "QueryMetricTool", takes_config=True, governed=True),
    ToolEntry("detect_anomalies", "agent_core.tools.analytics_tools", "DetectAnomaliesTool", takes_config=True, governed=True),
    ToolEntry("attribute_change", "agent_core.tools.analytics_tools", "AttributeChangeTool", takes_config=True, governed=True),
    ToolEntry("make_chart", "agent_core.tools.charts", "MakeChartTool", takes_config=True, governed=True),
    ToolEntry("generate_report", "agent_core.tools.reports", "GenerateReportTool"),
    ToolEntry("ls", "agent_core.tools.files", "LsTool"),
    ToolEntry("read_file", "agent_core.tools.files", "ReadFileTool"),
    ToolEntry("write_file", "agent_core.tools.files", "WriteFileTool"),
    ToolEntry("edit_file", "agent_core.tools.files", "EditFileTool"),
    ToolEntry("grep", "agent_core.tools.files", "GrepTool"),
    ToolEntry("glob", "agent_core.tools.files", "GlobTool"),
)


def default_tools(config: AgentConfig, sessions: async_sessionmaker[AsyncSession] | None = None) -> list[Tool]:
    """Tools every conversation gets. Builds the demo database if it is missing.

    ``config.datasources`` are the operator-configured databases (``BA_DATASOURCES``); each
    tool enforces their channel/user allowlists per conversation. With ``sessions`` (the
    service database) and data sources, `search_schema` searches their stored catalog, and
    every query on a source takes one governed path, limited and audited (`source_access`).
    """
    ensure_demo_database(demo_database_path(config.data_dir))
    access = source_access(config, audit_trail(config, sessions) if sessions is not None else None)
    tools = [entry.build(config, access) for entry in STANDARD_TOOLS]
    if sessions is not None and config.datasources:
        from agent_core.tools.schema_tools import search_schema_tool

        tools.append(search_schema_tool(config, sessions))
    return tools


def audit_trail(config: AgentConfig, sessions: async_sessionmaker[AsyncSession]) -> AuditTrail | None:
    """The data-access audit trail in the service database (None without data sources: the
    demo data and uploads are the conversation's own, not audited)."""
    if not config.datasources:
        return None
    from agent_core.governance.audit import AuditTrail

    return AuditTrail(sessions, daily_rows=config.user_daily_rows)


def source_access(config: AgentConfig, audit: AuditTrail | None) -> SourceAccess:
    """The process's one governed path to the configured sources: their access policy, the
    audit trail and the daily row budget it keeps (none without ``audit``)."""
    from agent_core.data.access import SourceAccess

    return SourceAccess(config.datasources, config.access_policy, audit)


def build_tool(config: AgentConfig, name: str, audit: AuditTrail | None = None) -> Tool | None:
    """The standard tool called `name` alone (None if there is none), demo database included."""
    for entry in STANDARD_TOOLS:
        if entry.name == name:
            # DuckDB opens the demo database without holding the GIL: the check runs while the
            # tool's modules import, off a one-shot command's start-up time.
            with ThreadPoolExecutor(max_workers=1) as pool:
                demo = pool.submit(ensure_demo_database, demo_database_path(config.data_dir))
                tool = entry.build(config, source_access(config, audit) if entry.governed else None)
                demo.result()
            return tool
    return None


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
