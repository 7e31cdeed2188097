"""The standard tool set and the prompt section that describes the data and tools it reaches."""

from __future__ import annotations

from agent_core.config import AgentConfig
from agent_core.data.demo import DEMO_DESCRIPTION, ensure_demo_database
from agent_core.tools.analytics_tools import AttributeChangeTool, DetectAnomaliesTool
from agent_core.tools.base import Tool, ToolContext
from agent_core.tools.charts import MakeChartTool
from agent_core.tools.data_tools import DescribeTableTool, ListTablesTool
from agent_core.tools.files import FILE_TOOLS
from agent_core.tools.reports import GenerateReportTool
from agent_core.tools.sql import SqlQueryTool, demo_database


def default_tools(config: AgentConfig) -> list[Tool]:
    """Tools every conversation gets. Builds the demo database if it is missing.

    ``config.datasources`` are the operator-configured databases (``BA_DATASOURCES``); each
    tool enforces their channel/user allowlists per conversation.
    """
    ensure_demo_database(demo_database(ToolContext(thread_id="-", data_dir=config.data_dir)))
    sources = config.datasources
    return [
        SqlQueryTool(sources),
        ListTablesTool(sources),
        DescribeTableTool(sources),
        DetectAnomaliesTool(),
        AttributeChangeTool(),
        MakeChartTool(),
        GenerateReportTool(),
        *(tool() for tool in FILE_TOOLS),
    ]


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
            "their own SQL dialect."
        )
    lines += [
        "",
        "## Tools and workspace",
        "- sql_query: read-only SQL; aggregate in the query.",
        "- make_chart: a PNG chart (line, bar, stacked_bar, scatter, combo) posted to the chat; "
        "Chinese labels work.",
        "- generate_report: a Markdown report file posted to the chat.",
        "- ls, read_file, write_file, edit_file, grep, glob: this conversation's workspace: "
        "/uploads (the user's files, read-only), /data (working files), /charts, /reports.",
    ]
    return "\n".join(lines)
