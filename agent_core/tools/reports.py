"""`generate_report`: a Markdown report saved in the workspace and posted into the conversation.

The model supplies the words (title, summary, findings, caveats, next steps) and points at the
evidence: tables from SQL queries or given rows, and charts it already made with make_chart.
The tool lays them out in a fixed structure, runs the queries through the same guarded DuckDB
path as sql_query, writes ``/reports/<slug>-<date>.md`` and attaches the file to the answer.
The Markdown here is the user's document; what goes back to the model is raw information.
"""

from __future__ import annotations

import math
import re
from datetime import date, datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, model_validator

from agent_core.messages import OutboundFile
from agent_core.run_context import RunContext
from agent_core.toolkit.files import conversation_workspace, workspace_errors
from agent_core.toolkit.protocol import ErrorType, Tool, ToolError
from agent_core.toolkit.queries import query_conversation_data
from agent_core.tools.charts import slugify
from agent_core.workspace import FileAlreadyExists, WorkspaceBackend, normalize_virtual_path

if TYPE_CHECKING:
    from agent_core.tools.deps import ToolDeps

MAX_TABLE_ROWS = 200
SUMMARY_CHARS = 300

Language = Literal["en", "zh"]

_HEADINGS: dict[Language, dict[str, str]] = {
    "en": {
        "prepared": "Prepared",
        "summary": "Executive summary",
        "key_figures": "Key figures",
        "findings": "Findings",
        "implication": "Implication",
        "charts": "Charts",
        "caveats": "Caveats",
        "next_steps": "Next steps",
        "queries": "Appendix: queries",
        "shown": "First {shown} rows shown; the query returned more.",
    },
    "zh": {
        "prepared": "生成日期",
        "summary": "摘要",
        "key_figures": "关键数据",
        "findings": "主要发现",
        "implication": "影响",
        "charts": "图表",
        "caveats": "注意事项",
        "next_steps": "后续行动",
        "queries": "附录：查询语句",
        "shown": "仅显示前 {shown} 行，查询结果更多。",
    },
}


# --- input -----------------------------------------------------------------------------------


def build(deps: ToolDeps) -> list[Tool]:
    return [GenerateReportTool()]


class ReportTable(BaseModel):
    title: str | None = Field(
        None, max_length=200, description="Heading of the table, e.g. 'GMV by region (¥)'."
    )
    sql: str | None = Field(
        None,
        max_length=20_000,
        description="A read-only DuckDB query whose result is the table (uploads by plain name, "
        'demo data as demo.sales). Name the columns as they should appear (AS "GMV (¥)").',
    )
    columns: list[str] | None = Field(
        None, max_length=30, description="Column headers, when giving `rows` instead of `sql`."
    )
    rows: list[list[Any]] | None = Field(
        None,
        max_length=MAX_TABLE_ROWS,
        description="Table rows (one list of values per row, same order as `columns`).",
    )
    max_rows: int = Field(
        20, ge=1, le=MAX_TABLE_ROWS, description="Most rows to show (reports read best at ≤10)."
    )
    note: str | None = Field(
        None, max_length=500, description="Caption under the table: unit, source, filters."
    )

    @model_validator(mode="after")
    def _one_source(self) -> ReportTable:
        if (self.sql is None) == (self.rows is None):
            raise ValueError("give a table either `sql` or `columns` + `rows`")
        if self.rows is not None:
            if not self.columns:
                raise ValueError("`rows` need `columns`")
            width = len(self.columns)
            if any(len(row) != width for row in self.rows):
                raise ValueError(f"every row must have {width} values, one per column")
        return self


class ReportFinding(BaseModel):
    headline: str = Field(
        ...,
        min_length=1,
        max_length=300,
        description="The insight as one full sentence with its key number.",
    )
    text: str | None = Field(
        None,
        max_length=5000,
        description="Evidence in Markdown: what happened, how big, where, since when, compared "
        "with what.",
    )
    charts: list[str] = Field(
        default_factory=list,
        max_length=4,
        description="Paths of charts made with make_chart (/charts/….png) that support it.",
    )
    tables: list[ReportTable] = Field(default_factory=list, max_length=4)
    implication: str | None = Field(
        None, max_length=1000, description="What it means for the business / the decision."
    )


class ReportSection(BaseModel):
    heading: str = Field(..., min_length=1, max_length=200)
    body: str = Field(..., min_length=1, max_length=20_000, description="Markdown content.")


class GenerateReportInput(BaseModel):
    title: str = Field(
        ...,
        min_length=1,
        max_length=200,
        description="Subject and period, e.g. '2026年10月经营分析' or 'Weekly Business Review — "
        "Week 43, 2026'.",
    )
    subtitle: str | None = Field(
        None,
        max_length=300,
        description="One line under the title: data through, comparison baseline, scope.",
    )
    summary: str = Field(
        ...,
        min_length=1,
        max_length=5000,
        description="Executive summary in Markdown, usually 3–5 bullets, each a finding with "
        "its number and implication. It must make sense if it is the only part read.",
    )
    findings: list[ReportFinding | str] = Field(
        ...,
        min_length=1,
        max_length=15,
        description="Findings in order of importance: full objects, or plain sentences for a "
        "short report.",
    )
    tables: list[ReportTable] = Field(
        default_factory=list,
        max_length=10,
        description="Tables shown after the summary, e.g. the key metrics of both periods.",
    )
    charts: list[str] = Field(
        default_factory=list,
        max_length=10,
        description="Chart paths (/charts/….png) not tied to a finding.",
    )
    caveats: list[str] = Field(
        default_factory=list,
        max_length=15,
        description="Data gaps, partial periods, unconfirmed causes, and their effect.",
    )
    next_steps: list[str] = Field(
        default_factory=list, max_length=15, description="Concrete actions, owner when known."
    )
    sections: list[ReportSection] = Field(
        default_factory=list,
        max_length=10,
        description="Further sections at the end, e.g. 'Data and definitions', 'Appendix'.",
    )
    language: Language = Field(
        "en", description="Language of the fixed headings: 'zh' for a Chinese report."
    )
    include_queries: bool = Field(
        True, description="Append the SQL behind each table, so readers can check the numbers."
    )
    filename: str | None = Field(
        None,
        max_length=80,
        description="Short file-name stem; defaults to one made from the title.",
    )


# --- result ----------------------------------------------------------------------------------


class ReportResult(BaseModel):
    """Where the report went and what is in it; the file itself is posted to the thread."""

    path: str  # virtual path, e.g. /reports/weekly-review-2026-11-02.md
    title: str
    size_bytes: int
    sections: list[str]
    findings: int
    tables: int
    charts: list[str]
    summary: str  # the start of the executive summary, to keep in the answer
    notes: list[str] = Field(default_factory=list)


# --- tool ------------------------------------------------------------------------------------


class GenerateReportTool(Tool[GenerateReportInput]):
    name = "generate_report"
    description = (
        "Write a business report as a Markdown file (title, executive summary, key-figure "
        "tables, findings with their charts and tables, caveats, next steps, optional extra "
        "sections), save it in /reports and post it into this conversation. Tables come from "
        "DuckDB queries or given rows; charts must already exist (make_chart). Every number in "
        "the text should come from queries run in this conversation. Afterwards reply with the "
        "main conclusion in two to four lines, not the whole report."
    )
    Input = GenerateReportInput
    timeout_s = 120.0

    async def run(self, args: GenerateReportInput, ctx: RunContext) -> Any:
        words = _HEADINGS[args.language]
        today = date.today()
        workspace = conversation_workspace(ctx)
        notes: list[str] = []
        queries: list[tuple[str, str]] = []  # (table title, SQL) for the appendix
        all_charts: list[str] = []

        async def table(spec: ReportTable) -> list[str]:
            lines, query = await _render_table(ctx, spec, words, notes)
            if query is not None:
                queries.append((spec.title or f"#{len(queries) + 1}", query))
            return lines

        async def charts(paths: list[str]) -> list[str]:
            lines = []
            for path in paths:
                vpath = await _existing_chart(workspace, path)
                all_charts.append(vpath)
                lines += [_chart_markdown(vpath), ""]
            return lines

        sections: list[str] = [words["summary"]]
        out = [f"# {args.title}", ""]
        if args.subtitle:
            out += [f"_{args.subtitle}_", ""]
        out += [f"_{words['prepared']}: {today.isoformat()}_", ""]
        out += [f"## {words['summary']}", "", args.summary.strip(), ""]
        if args.tables:
            sections.append(words["key_figures"])
            out += [f"## {words['key_figures']}", ""]
            for spec in args.tables:
                out += await table(spec)
        sections.append(words["findings"])
        out += [f"## {words['findings']}", ""]
        for number, finding in enumerate(args.findings, start=1):
            if isinstance(finding, str):
                finding = ReportFinding(headline=finding)
            out += [f"### {number}. {finding.headline.strip()}", ""]
            if finding.text:
                out += [finding.text.strip(), ""]
            out += await charts(finding.charts)
            for spec in finding.tables:
                out += await table(spec)
            if finding.implication:
                out += [f"**{words['implication']}:** {finding.implication.strip()}", ""]
        if args.charts:
            sections.append(words["charts"])
            out += [f"## {words['charts']}", ""] + await charts(args.charts)
        for key, items, marker in (
            ("caveats", args.caveats, "-"),
            ("next_steps", args.next_steps, "1."),
        ):
            if items:
                sections.append(words[key])
                out += [f"## {words[key]}", ""] + [f"{marker} {item.strip()}" for item in items]
                out.append("")
        for section in args.sections:
            sections.append(section.heading)
            out += [f"## {section.heading.strip()}", "", section.body.strip(), ""]
        if args.include_queries and queries:
            sections.append(words["queries"])
            out += [f"## {words['queries']}", ""]
            for title, sql in queries:
                out += [f"**{title}**", "", "```sql", sql, "```", ""]
        content = "\n".join(out).rstrip() + "\n"

        stem = slugify(args.filename or args.title, "report")
        vpath, size = await _save(workspace, stem, today, content)
        with workspace_errors():
            real = await workspace.real_path(vpath)
        ctx.turn.produced_files.append(
            OutboundFile(path=str(real), title=args.title, mime_type="text/markdown")
        )
        summary = args.summary.strip()
        return ReportResult(
            path=vpath,
            title=args.title,
            size_bytes=size,
            sections=sections,
            findings=len(args.findings),
            tables=len(args.tables)
            + sum(len(f.tables) for f in args.findings if isinstance(f, ReportFinding)),
            charts=all_charts,
            summary=summary if len(summary) <= SUMMARY_CHARS else summary[:SUMMARY_CHARS] + "…",
            notes=notes,
        )


async def _save(workspace: WorkspaceBackend, stem: str, day: date, content: str) -> tuple[str, int]:
    """Write ``/reports/<stem>-<day>.md``; a second report of the same name and day gets a
    numeric suffix rather than replacing the first (it may already be shared)."""
    base = f"/reports/{stem}-{day.isoformat()}"
    with workspace_errors():
        for attempt in range(1, 100):
            vpath = f"{base}.md" if attempt == 1 else f"{base}-{attempt}.md"
            try:
                info = await workspace.write(vpath, content)
            except FileAlreadyExists:
                continue
            return vpath, info.size
    raise ToolError(
        f"Too many reports named {stem!r} today; choose another filename.",
        ErrorType.INVALID_PARAMETERS,
    )


async def _existing_chart(workspace: WorkspaceBackend, path: str) -> str:
    with workspace_errors():
        vpath = normalize_virtual_path(path)
        if not (vpath.startswith("/charts/") and vpath.lower().endswith(".png")):
            raise ToolError(
                f"{vpath} is not a chart: give the /charts/….png path make_chart returned.",
                ErrorType.INVALID_PARAMETERS,
            )
        await workspace.stat(vpath)  # FileNotFound → invalid_parameters
    return vpath


def _chart_markdown(vpath: str) -> str:
    """An image link relative to /reports, so it resolves inside the workspace folder."""
    target = ".." + vpath
    if any(ch in target for ch in " ()<>"):
        target = f"<{target}>"
    alt = vpath.rsplit("/", 1)[-1].removesuffix(".png")
    return f"![{alt}]({target})"


async def _render_table(
    ctx: RunContext, spec: ReportTable, words: dict[str, str], notes: list[str]
) -> tuple[list[str], str | None]:
    """Markdown lines of one table, and the SQL that produced it (None for given rows)."""
    if spec.sql is not None:
        result = await query_conversation_data(ctx, spec.sql, max_rows=spec.max_rows)
        columns, rows, truncated, query = result.columns, result.rows, result.truncated, result.sql
    else:
        columns, rows, query = spec.columns or [], spec.rows or [], None
        truncated = len(rows) > spec.max_rows
        rows = rows[: spec.max_rows]
    lines = [f"**{spec.title.strip()}**", ""] if spec.title else []
    numeric = [
        any(_is_number(row[i]) for row in rows)
        and all(_is_number(row[i]) or row[i] is None for row in rows)
        for i in range(len(columns))
    ]
    lines.append("| " + " | ".join(_cell(c) for c in columns) + " |")
    lines.append("|" + "|".join("---:" if n else "---" for n in numeric) + "|")
    lines += [
        "| " + " | ".join(_cell(_format_value(v, columns[i])) for i, v in enumerate(row)) + " |"
        for row in rows
    ]
    lines.append("")
    if truncated:
        lines += [f"_{words['shown'].format(shown=len(rows))}_", ""]
        notes.append(f"Table {spec.title or '(untitled)'!r} was cut to {len(rows)} rows.")
    if spec.note:
        lines += [f"_{spec.note.strip()}_", ""]
    return lines, query


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


# Columns whose integers are identifiers or years, not quantities: no thousands separators.
_PLAIN_NUMBER_WORDS = {"year", "yr", "id", "code", "no"}
_PLAIN_NUMBER_SUFFIXES = ("年", "年份", "编号", "代码", "号")


def _plain_number_column(column: str) -> bool:
    words = set(re.split(r"[^0-9a-z]+", column.lower()))
    return bool(words & _PLAIN_NUMBER_WORDS) or column.strip().endswith(_PLAIN_NUMBER_SUFFIXES)


def _format_value(value: Any, column: str) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, datetime):
        if (value.hour, value.minute, value.second) == (0, 0, 0):
            return value.date().isoformat()
        return value.strftime("%Y-%m-%d %H:%M")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, int):
        return str(value) if _plain_number_column(column) else f"{value:,}"
    if isinstance(value, float | Decimal):
        number = float(value)
        if not math.isfinite(number):
            return str(value)
        if abs(number) >= 1 or number == 0:
            return f"{number:,.2f}"
        return f"{number:.4g}"
    return str(value)


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell (pipes escaped, no line breaks)."""
    return str(text).replace("|", "\\|").replace("\r", " ").replace("\n", " ").strip()
