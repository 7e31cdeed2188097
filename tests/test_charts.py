"""make_chart through the real tool: every chart type renders a readable PNG with Chinese text,
posted as a produced file; data from SQL or workspace files; clear errors."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from matplotlib import font_manager, image
from matplotlib.figure import Figure
from matplotlib.text import Text
from pydantic import ValidationError

from agent_core.charts.fonts import CJK_FONT_FAMILY, CJK_PROBE_TEXT, font_covers
from agent_core.charts.spec import HEIGHT_PX, WIDTH_PX
from agent_core.data.conversation import demo_database
from agent_core.data.demo import ensure_demo_database
from agent_core.run_context import RunContext
from agent_core.toolkit.files import conversation_workspace
from agent_core.toolkit.protocol import ErrorType, ToolError
from agent_core.tools.charts import ChartResult, MakeChartTool

CHINESE = "华东区销售额订单数环比"
REGION_ZH = (
    "CASE region WHEN 'East China' THEN '华东' WHEN 'North China' THEN '华北' "
    "WHEN 'South China' THEN '华南' WHEN 'West China' THEN '西部' ELSE '华中' END"
)


@pytest.fixture
def ctx(tmp_path: Path) -> RunContext:
    ctx = RunContext(thread_id="slack:T1:C1:1700000001.000100", data_dir=tmp_path / "data")
    ensure_demo_database(demo_database(ctx))
    return ctx


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> list[Figure]:
    """Every figure the tool saves, to inspect what was drawn."""
    saved: list[Figure] = []
    original = Figure.savefig

    def savefig(self: Figure, *args: Any, **kwargs: Any) -> None:
        saved.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", savefig)
    return saved


async def make(ctx: RunContext, **args: Any) -> ChartResult:
    tool = MakeChartTool()
    return await tool.run(tool.Input(**args), ctx)


def assert_no_tofu(figure: Figure) -> None:
    """Every text of the figure has a real glyph for each character in the font it uses."""
    texts = [t for t in figure.findobj(Text) if t.get_text().strip()]
    assert any(any("\u4e00" <= ch <= "\u9fff" for ch in t.get_text()) for t in texts)
    for text in texts:
        font = font_manager.get_font(font_manager.findfont(text.get_fontproperties()))
        missing = [
            ch for ch in text.get_text() if not ch.isspace() and font.get_char_index(ord(ch)) == 0
        ]
        assert not missing, f"{text.get_text()!r} has no glyphs for {missing} in {font.fname}"


# --- font ------------------------------------------------------------------------------------


def test_a_cjk_font_is_registered_and_covers_chinese() -> None:
    assert CJK_FONT_FAMILY is not None
    assert font_covers(CJK_FONT_FAMILY, CHINESE + CJK_PROBE_TEXT)
    # The check itself catches tofu: DejaVu Sans has no Chinese glyphs.
    assert not font_covers("DejaVu Sans", CHINESE)
    assert not font_covers("No Such Font Family", CHINESE)


# --- chart types -----------------------------------------------------------------------------

CASES: dict[str, dict[str, Any]] = {
    "line": {
        "sql": f"SELECT date AS 日期, {REGION_ZH} AS 地区, sum(gmv) AS 销售额 FROM demo.sales "
        "WHERE date >= '2026-10-01' GROUP BY ALL ORDER BY 1",
        "x": "日期",
        "y": "销售额",
        "series": "地区",
        "subtitle": "2026年10月，单位：元",
        "annotations": [{"x": "2026-10-20", "label": "App故障"}],
    },
    "bar": {
        "sql": f"SELECT {REGION_ZH} AS 地区, sum(orders) AS 订单数 FROM demo.sales "
        "GROUP BY 1 ORDER BY 2 DESC",
        "x": "地区",
        "y": ["订单数"],
    },
    "stacked_bar": {
        "sql": "SELECT strftime(date, '%Y-%m') AS 月份, channel AS 渠道, sum(gmv) AS 销售额 "
        "FROM demo.sales GROUP BY ALL ORDER BY 1",
        "x": "月份",
        "y": "销售额",
        "series": "渠道",
    },
    "scatter": {
        "sql": f"SELECT orders AS 订单数, gmv AS 销售额, {REGION_ZH} AS 地区 FROM demo.sales "
        "WHERE date = '2026-10-01'",
        "x": "订单数",
        "y": "销售额",
        "series": "地区",
    },
    "combo": {
        "sql": "SELECT strftime(date, '%Y-%m') AS 月份, sum(gmv) AS 销售额, sum(orders) AS 订单数 "
        "FROM demo.sales GROUP BY 1 ORDER BY 1",
        "x": "月份",
        "y": "销售额",
        "y2": "订单数",
        "y_label": "销售额（元）",
        "y2_label": "订单数",
    },
}


@pytest.mark.parametrize("chart_type", list(CASES))
async def test_each_chart_type_renders_a_chat_sized_png_with_chinese(
    ctx: RunContext, figures: list[Figure], chart_type: str
) -> None:
    title = f"{CHINESE}（{chart_type}）"
    result = await make(ctx, chart_type=chart_type, title=title, **CASES[chart_type])

    assert result.path.startswith("/charts/") and result.path.endswith(".png")
    assert result.chart_type == chart_type and result.points > 0 and result.series
    produced, data = ctx.turn.produced_files
    assert produced.mime_type == "image/png" and produced.title == title
    assert data.mime_type == "text/csv" and Path(data.path).name == Path(result.data_path).name
    real = Path(produced.path)
    assert real == await conversation_workspace(ctx).real_path(result.path)
    assert real.read_bytes().startswith(b"\x89PNG")
    assert image.imread(real).shape[:2] == (HEIGHT_PX, WIDTH_PX)

    [figure] = figures
    assert_no_tofu(figure)
    axes = figure.get_axes()
    assert len(axes) == (2 if chart_type == "combo" else 1)
    if chart_type == "combo":
        assert [s.axis for s in result.series] == ["left", "right"]
        assert axes[1].get_ylabel() == "订单数"
        assert "," in axes[1].yaxis.get_major_formatter()(200_000, 0)  # thousands separators


async def test_line_chart_of_dates_uses_a_date_axis(ctx: RunContext) -> None:
    result = await make(ctx, chart_type="line", title="Daily GMV", **CASES["line"])
    assert result.x_kind == "time" and result.categories == 31
    assert sorted(s.name for s in result.series) == ["华东", "华中", "华北", "华南", "西部"]
    assert result.notes == []  # the annotation date is on the axis


async def test_many_categories_are_grouped_into_other(ctx: RunContext) -> None:
    sql = (
        "SELECT region || ' / ' || channel AS segment, sum(gmv) AS gmv FROM demo.sales "
        "GROUP BY 1 ORDER BY 2 DESC"
    )
    result = await make(
        ctx, chart_type="bar", title="GMV by segment", sql=sql, x="segment", y="gmv",
        max_categories=6, horizontal=True,
    )  # fmt: skip
    assert result.categories == 6 and any("summed into 'Other'" in n for n in result.notes)


async def test_chart_from_a_gb18030_csv_in_the_workspace(ctx: RunContext) -> None:
    csv_text = '月份,收入,成本\n2026-01,"1,200",800\n2026-02,1500,900\n2026-03,1300,950\n'
    await conversation_workspace(ctx).write("/uploads/财务.csv", csv_text.encode("gb18030"))
    result = await make(
        ctx, chart_type="bar", title="收入与成本", data_file="/uploads/财务.csv", x="月份",
        y=["收入", "成本"],
    )  # fmt: skip
    assert [s.name for s in result.series] == ["收入", "成本"] and result.points == 6


async def test_chart_from_json_in_sql_query_shape(ctx: RunContext) -> None:
    data = '{"columns": ["day", "gmv"], "rows": [["2026-10-01", 10.5], ["2026-10-02", 12]]}'
    await conversation_workspace(ctx).write("/data/gmv.json", data)
    result = await make(
        ctx, chart_type="line", title="GMV", data_file="/data/gmv.json", x="day", y="gmv"
    )
    assert result.x_kind == "time" and result.points == 2


async def test_years_stay_labels_and_percent_text_is_numeric(
    ctx: RunContext, figures: list[Figure]
) -> None:
    await conversation_workspace(ctx).write("/data/rate.csv", "year,rate\n2024,12.5%\n2025,14%\n")
    result = await make(
        ctx, chart_type="line", title="Rate", data_file="/data/rate.csv", x="year", y="rate"
    )
    assert result.x_kind == "category" and result.points == 2
    labels = [t.get_text() for t in figures[0].axes[0].get_xticklabels()]
    assert labels == ["2024", "2025"]  # not "2,024"


async def test_identical_charts_share_one_file(ctx: RunContext) -> None:
    first = await make(ctx, chart_type="bar", title="Orders", **CASES["bar"])
    second = await make(ctx, chart_type="bar", title="Orders", **CASES["bar"])
    assert first.path == second.path and len(ctx.turn.produced_files) == 4  # PNG and CSV, twice


# --- errors ----------------------------------------------------------------------------------


async def chart_error(ctx: RunContext, **args: Any) -> ToolError:
    with pytest.raises(ToolError) as caught:
        await make(ctx, **args)
    return caught.value


async def test_errors_tell_the_model_what_to_fix(ctx: RunContext) -> None:
    error = await chart_error(
        ctx, chart_type="bar", title="t", sql="SELECT region, sum(gmv) AS gmv FROM demo.sales "
        "GROUP BY 1", x="regio", y="gmv",
    )  # fmt: skip
    assert error.error_type is ErrorType.INVALID_PARAMETERS and "region, gmv" in str(error)
    error = await chart_error(
        ctx, chart_type="bar", title="t", sql="SELECT region, channel FROM demo.sales LIMIT 3",
        x="region", y="channel",
    )  # fmt: skip
    assert error.error_type is ErrorType.INVALID_PARAMETERS and "not numeric" in str(error)
    error = await chart_error(
        ctx, chart_type="line", title="t", sql="SELECT * FROM demo.sales", x="date", y="gmv"
    )
    assert error.error_type is ErrorType.INVALID_PARAMETERS and "Aggregate" in str(error)
    error = await chart_error(
        ctx, chart_type="line", title="t", sql="DROP TABLE demo.sales", x="a", y="b"
    )
    assert error.error_type is ErrorType.PERMISSION_DENIED
    error = await chart_error(
        ctx, chart_type="line", title="t", data_file="/etc/passwd", x="a", y="b"
    )
    assert error.error_type is ErrorType.PERMISSION_DENIED
    error = await chart_error(
        ctx, chart_type="line", title="t", data_file="/charts/x.csv", x="a", y="b"
    )
    assert error.error_type is ErrorType.INVALID_PARAMETERS
    assert ctx.turn.produced_files == []


def test_input_validation() -> None:
    base = {"title": "t", "x": "a", "y": "b"}
    with pytest.raises(ValidationError, match="exactly one of"):
        MakeChartTool.Input(chart_type="line", **base)
    with pytest.raises(ValidationError, match="needs `y2`"):
        MakeChartTool.Input(chart_type="combo", sql="SELECT 1", **base)
    with pytest.raises(ValidationError, match="exactly one `y`"):
        MakeChartTool.Input(
            chart_type="line", sql="SELECT 1", series="s", **{**base, "y": ["b", "c"]}
        )
    with pytest.raises(ValidationError, match="horizontal"):
        MakeChartTool.Input(chart_type="line", sql="SELECT 1", horizontal=True, **base)
