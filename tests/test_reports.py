"""generate_report through the real tool: the file's sections, tables and chart links, the
produced file, naming, and errors."""

from __future__ import annotations

from datetime import date
from pathlib import Path
from typing import Any

import pytest

from agent_core.data.conversation import demo_database
from agent_core.data.demo import ensure_demo_database
from agent_core.run_context import RunContext
from agent_core.toolkit.protocol import ErrorType, ToolError
from agent_core.tools.charts import MakeChartTool
from agent_core.tools.reports import GenerateReportTool, ReportResult

TODAY = date.today().isoformat()


@pytest.fixture
def ctx(tmp_path: Path) -> RunContext:
    ctx = RunContext(thread_id="slack:T1:C1:1700000001.000100", data_dir=tmp_path / "data")
    ensure_demo_database(demo_database(ctx))
    return ctx


async def report(ctx: RunContext, **args: Any) -> ReportResult:
    tool = GenerateReportTool()
    return await tool.run(tool.Input(**args), ctx)


async def chart(ctx: RunContext) -> str:
    tool = MakeChartTool()
    result = await tool.run(
        tool.Input(
            chart_type="line",
            title="East China app GMV",
            sql="SELECT date, sum(gmv) AS gmv FROM demo.sales WHERE region = 'East China' "
            "AND channel = 'app' AND date >= '2026-10-01' GROUP BY 1 ORDER BY 1",
            x="date",
            y="gmv",
        ),
        ctx,
    )
    return result.path


async def test_report_file_has_all_sections_in_order(ctx: RunContext) -> None:
    chart_path = await chart(ctx)
    result = await report(
        ctx,
        title="October Review: East China",
        subtitle="Data through 2026-10-31 · vs September",
        summary="- **App GMV fell ~40% on Oct 20–22** in East China, then recovered.",
        tables=[
            {
                "title": "GMV by region (¥)",
                "sql": "SELECT region, sum(gmv) AS gmv, sum(orders) AS orders FROM demo.sales "
                "WHERE date >= '2026-10-01' GROUP BY 1 ORDER BY 2 DESC",
                "note": "October 2026, all channels.",
            }
        ],
        findings=[
            {
                "headline": "The East China app outage cost about ¥300k of GMV",
                "text": "Orders dropped on three days and recovered on Oct 23.",
                "charts": [chart_path],
                "tables": [
                    {
                        "title": "Outage days",
                        "columns": ["Day", "GMV | ¥", "Share"],
                        "rows": [["2026-10-20", 117000.5, 0.0412], ["2026-10-21", 120000, None]],
                    }
                ],
                "implication": "Add app uptime alerts.",
            },
            "Electronics spiked on 618.",
        ],
        caveats=["Synthetic demo data."],
        next_steps=["Confirm the outage window with engineering."],
        sections=[{"heading": "Data and definitions", "body": "GMV = gross merchandise value."}],
    )

    assert result.path == f"/reports/october-review-east-china-{TODAY}.md"
    assert result.findings == 2 and result.tables == 2 and result.charts == [chart_path]
    assert result.sections == [
        "Executive summary",
        "Key figures",
        "Findings",
        "Caveats",
        "Next steps",
        "Data and definitions",
        "Appendix: queries",
    ]
    assert result.summary.startswith("- **App GMV fell")
    produced = ctx.turn.produced_files[-1]
    assert produced.mime_type == "text/markdown" and produced.title == "October Review: East China"
    text = Path(produced.path).read_text(encoding="utf-8")
    assert result.size_bytes == len(text.encode())

    headings = [line for line in text.splitlines() if line.startswith("#")]
    assert headings == [
        "# October Review: East China",
        "## Executive summary",
        "## Key figures",
        "## Findings",
        "### 1. The East China app outage cost about ¥300k of GMV",
        "### 2. Electronics spiked on 618.",
        "## Caveats",
        "## Next steps",
        "## Data and definitions",
        "## Appendix: queries",
    ]
    assert "_Data through 2026-10-31 · vs September_" in text and f"_Prepared: {TODAY}_" in text
    # The SQL table: numeric columns right-aligned, thousands separators, the caption.
    assert "| region | gmv | orders |\n|---|---:|---:|" in text
    assert "| East China | " in text and "_October 2026, all channels._" in text
    # The given rows: pipes escaped, numbers formatted, empty cells for None.
    assert "| Day | GMV \\| ¥ | Share |" in text
    assert "| 2026-10-20 | 117,000.50 | 0.0412 |" in text and "| 2026-10-21 | 120,000 |  |" in text
    assert f"![{Path(chart_path).stem}](..{chart_path})" in text
    assert "**Implication:** Add app uptime alerts." in text
    assert "- Synthetic demo data." in text and "1. Confirm the outage window" in text
    assert "```sql\nSELECT region" in text


async def test_chinese_headings_truncation_and_unique_names(ctx: RunContext) -> None:
    args = {
        "title": "十月经营分析",
        "summary": "华东区App渠道10月20日至22日GMV下降约40%。",
        "findings": ["App故障导致订单下降。"],
        "tables": [{"title": "每日明细", "sql": "SELECT date, gmv FROM demo.sales", "max_rows": 5}],
        "language": "zh",
        "include_queries": False,
    }
    first = await report(ctx, **args)
    assert first.path == f"/reports/十月经营分析-{TODAY}.md"
    assert first.sections == ["摘要", "关键数据", "主要发现"]
    assert first.notes == ["Table '每日明细' was cut to 5 rows."]
    text = Path(ctx.turn.produced_files[-1].path).read_text(encoding="utf-8")
    assert "## 摘要" in text and "仅显示前 5 行" in text and "```sql" not in text
    assert text.count("| 2026-") == 5

    second = await report(ctx, **args)
    assert second.path == f"/reports/十月经营分析-{TODAY}-2.md"
    assert len(ctx.turn.produced_files) == 2


async def report_error(ctx: RunContext, **args: Any) -> ToolError:
    base = {"title": "T", "summary": "S", "findings": ["F"]}
    with pytest.raises(ToolError) as caught:
        await report(ctx, **{**base, **args})
    return caught.value


async def test_errors(ctx: RunContext) -> None:
    error = await report_error(ctx, charts=["/charts/missing.png"])
    assert error.error_type is ErrorType.INVALID_PARAMETERS
    error = await report_error(ctx, charts=["/data/notes.md"])
    assert error.error_type is ErrorType.INVALID_PARAMETERS
    error = await report_error(ctx, charts=["/charts/../../tables.duckdb"])
    assert error.error_type is ErrorType.PERMISSION_DENIED
    error = await report_error(ctx, tables=[{"sql": "DELETE FROM demo.sales"}])
    assert error.error_type is ErrorType.PERMISSION_DENIED
    assert ctx.turn.produced_files == []
    with pytest.raises(ValueError, match="one per column"):
        GenerateReportTool.Input(
            title="T", summary="S", findings=["F"], tables=[{"columns": ["a"], "rows": [[1, 2]]}]
        )
