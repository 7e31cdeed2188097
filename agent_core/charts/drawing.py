"""Drawing a shaped chart with matplotlib's Agg canvas.

Plain ``Figure`` objects, never pyplot (whose global figure registry is not thread-safe),
1200×700 px at 150 dpi with fonts sized to stay readable when a chat client shows the image at
half size.
"""

from __future__ import annotations

import io
import math
import threading
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

import matplotlib
from matplotlib import dates as mdates
from matplotlib import ticker
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from agent_core.charts.fonts import CJK_FONT_FAMILY
from agent_core.charts.shaping import ChartDataError, Drawn, Series, Table, shape, to_number, to_time
from agent_core.charts.spec import DPI, HEIGHT_PX, OTHER, WIDTH_PX, ChartAnnotation, MakeChartInput, XKind

if TYPE_CHECKING:
    from matplotlib.typing import RcKeyType

_PALETTE = (
    "#2F6DB5",
    "#F28E2B",
    "#59A14F",
    "#E15759",
    "#76B7B2",
    "#EDC948",
    "#B07AA1",
    "#FF9DA7",
    "#9C755F",
    "#4E79A7",
    "#86BCB6",
    "#D4A6C8",
)
_OTHER_COLOR = "#B0B0B0"
_NEGATIVE_COLOR = "#D1495B"
_MARK_COLOR = "#555555"
_MAX_SHORT_TICK_LABELS = 20
_MAX_LONG_TICK_LABELS = 12  # labels longer than 6 characters are rotated and take more room
_MAX_ROW_TICK_LABELS = 30  # horizontal bars: labels stacked vertically, never rotated
# matplotlib's rcParams are process-global and not thread-safe; charts are drawn one at a time.
_render_lock = threading.Lock()


def _style() -> dict[RcKeyType, Any]:
    families = [CJK_FONT_FAMILY, "DejaVu Sans"] if CJK_FONT_FAMILY else ["DejaVu Sans"]
    return {
        # Named families rather than "sans-serif", so each text keeps them outside this style
        # context too. The CJK font also has Latin glyphs; DejaVu Sans fills in anything missing.
        "font.family": families,
        "font.size": 12,
        # No bold anywhere: the bundled CJK font has a regular weight only.
        "figure.titlesize": 17,
        "axes.titlesize": 12.5,
        "axes.titlecolor": "#555555",
        "axes.titlelocation": "left",
        "axes.labelsize": 13,
        "axes.labelcolor": "#333333",
        "xtick.labelsize": 11.5,
        "ytick.labelsize": 11.5,
        "xtick.color": "#444444",
        "ytick.color": "#444444",
        "legend.fontsize": 11.5,
        "legend.frameon": False,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.edgecolor": "#888888",
        "axes.grid": False,  # switched on per chart, for the value axis only
        "grid.color": "#DDDDDD",
        "grid.linewidth": 0.8,
        "axes.axisbelow": True,
        "lines.linewidth": 2.4,
        "figure.facecolor": "white",
    }


def format_number(value: float, _position: Any = None) -> str:
    """Axis and label text of a number: thousands separators, at most two decimals."""
    if not math.isfinite(value):
        return ""
    if abs(value) >= 1000 or float(value).is_integer():
        return f"{value:,.0f}"
    return f"{value:,.2f}".rstrip("0").rstrip(".")


def _time_labels(xs: Sequence[datetime]) -> list[str]:
    with_time = any((x.hour, x.minute, x.second) != (0, 0, 0) for x in xs)
    return [x.strftime("%Y-%m-%d %H:%M" if with_time else "%Y-%m-%d") for x in xs]


def _color(series: Series, index: int) -> str:
    return _OTHER_COLOR if series.name == OTHER else _PALETTE[index % len(_PALETTE)]


def render(args: MakeChartInput, table: Table) -> tuple[bytes, Drawn]:
    """Shape the data and draw it; returns the PNG bytes and what was drawn."""
    drawn = shape(args, table)
    if not drawn.series:
        raise ChartDataError(
            "None of the y values are present: nothing to draw."
        )
    with _render_lock, matplotlib.rc_context(_style()):
        fig = Figure(figsize=(WIDTH_PX / DPI, HEIGHT_PX / DPI), dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.add_subplot()
        if args.chart_type == "scatter":
            axes = _draw_scatter(ax, drawn)
        elif args.chart_type == "line":
            axes = _draw_lines(ax, drawn)
        else:
            axes = _draw_bars(
                ax, drawn, stacked=args.chart_type == "stacked_bar", horizontal=args.horizontal
            )
        # The figure title spans the whole width; the subtitle sits just above the plot.
        fig.suptitle(args.title, x=0.01, horizontalalignment="left")
        if args.subtitle:
            ax.set_title(args.subtitle)
        category_axis, value_axis = (
            (ax.yaxis, ax.xaxis) if args.horizontal else (ax.xaxis, ax.yaxis)
        )
        category_axis.set_label_text(args.x_label or drawn.x_name)
        value_axis.set_label_text(args.y_label or (args.y[0] if len(args.y) == 1 else ""))
        value_axis.set_major_formatter(ticker.FuncFormatter(format_number))
        ax.grid(True, axis="x" if args.horizontal else "y")
        if len(axes) > 1:
            axes[1].set_ylabel(args.y2_label or ", ".join(args.y2 or []))
            axes[1].yaxis.set_major_formatter(ticker.FuncFormatter(format_number))
        for annotation in args.annotations:
            if not _annotate(ax, drawn, annotation, args):
                drawn.notes.append(f"Annotation at {annotation.x!r} is not on the x axis.")
        # Stacked bars list their legend in the order the segments are stacked.
        _legend(fig, axes, reverse=args.chart_type == "stacked_bar" and not args.horizontal)
        buffer = io.BytesIO()
        # No run-time metadata (software version), so equal charts give equal bytes and names.
        fig.savefig(buffer, format="png", dpi=DPI, metadata={"Software": None})
    return buffer.getvalue(), drawn


def _draw_lines(ax: Axes, drawn: Drawn) -> list[Axes]:
    if drawn.x_kind == "category":
        positions: list[Any] = list(range(len(drawn.xs)))
        _category_ticks(ax, [str(x) for x in drawn.xs], horizontal=False)
    else:
        positions = drawn.xs
    few_points = len(drawn.xs) <= 40
    for i, s in enumerate(drawn.series):
        ax.plot(
            positions,
            s.values,
            label=s.name,
            color=_color(s, i),
            marker="o" if few_points else None,
            markersize=4.5,
        )
    _numeric_x_axis(ax, drawn.x_kind)
    return [ax]


def _draw_scatter(ax: Axes, drawn: Drawn) -> list[Axes]:
    for i, s in enumerate(drawn.series):
        assert s.xs is not None  # scatter series always carry their own x values
        ax.scatter(s.xs, s.values, label=s.name, color=_color(s, i), s=36, alpha=0.75, linewidths=0)
    ax.grid(True, axis="both")
    _numeric_x_axis(ax, drawn.x_kind)
    return [ax]


def _numeric_x_axis(ax: Axes, x_kind: XKind) -> None:
    if x_kind == "time":
        _time_axis(ax)
    elif x_kind == "number":
        ax.xaxis.set_major_formatter(ticker.FuncFormatter(format_number))


def _draw_bars(ax: Axes, drawn: Drawn, *, stacked: bool, horizontal: bool) -> list[Axes]:
    """Bars of the left-axis series (grouped or stacked) and lines of right-axis ones (combo)."""
    labels = _time_labels(drawn.xs) if drawn.x_kind == "time" else [str(x) for x in drawn.xs]
    positions = list(range(len(labels)))
    bars = [s for s in drawn.series if s.axis == "left"]
    lines = [s for s in drawn.series if s.axis == "right"]

    def draw(
        offsets: Sequence[float], values: list[float], size: float, base: list[float], **kw: Any
    ) -> Any:
        if horizontal:
            return ax.barh(offsets, values, height=size, left=base, **kw)
        return ax.bar(offsets, values, width=size, bottom=base, **kw)

    group_width = 0.8
    size = group_width if stacked or len(bars) == 1 else group_width / len(bars)
    above = [0.0] * len(positions)  # stacked bars: positive and negative values stack apart
    below = [0.0] * len(positions)
    for i, s in enumerate(bars):
        values = [0.0 if math.isnan(v) else v for v in s.values]
        color: Any = _color(s, i)
        if len(bars) == 1 and any(v < 0 for v in values):
            # A change-by-segment chart: gains and losses in different colours.
            color = [_NEGATIVE_COLOR if v < 0 else color for v in values]
        if stacked:
            bases = [b if v >= 0 else n for v, b, n in zip(values, above, below, strict=True)]
            container = draw(positions, values, size, bases, label=s.name, color=color)
            above = [b + max(v, 0) for v, b in zip(values, above, strict=True)]
            below = [n + min(v, 0) for v, n in zip(values, below, strict=True)]
        else:
            offset = (i - (len(bars) - 1) / 2) * size
            container = draw(
                [p + offset for p in positions],
                values,
                size,
                [0.0] * len(values),
                label=s.name,
                color=color,
            )
        if len(bars) == 1 and not lines and len(positions) <= 15:
            value_labels = [format_number(v) for v in values]
            ax.bar_label(container, labels=value_labels, padding=2, fontsize=10)
    _category_ticks(ax, labels, horizontal=horizontal)
    if not lines:
        return [ax]
    right = ax.twinx()
    right.spines["right"].set_visible(True)
    for i, s in enumerate(lines, start=len(bars)):
        right.plot(positions, s.values, label=s.name, color=_color(s, i), marker="o", markersize=5)
    lowest = min((v for s in lines for v in s.values if not math.isnan(v)), default=0.0)
    right.set_ylim(bottom=min(0.0, lowest))
    return [ax, right]


def _category_ticks(ax: Axes, labels: list[str], *, horizontal: bool) -> None:
    longest = max((len(label) for label in labels), default=0)
    if horizontal:
        most = _MAX_ROW_TICK_LABELS
    else:
        most = _MAX_SHORT_TICK_LABELS if longest <= 6 else _MAX_LONG_TICK_LABELS
    step = max(1, math.ceil(len(labels) / most))
    ticks = list(range(0, len(labels), step))
    if horizontal:
        ax.set_yticks(ticks, [labels[t] for t in ticks])
        ax.set_ylim(len(labels) - 0.4, -0.6)  # first category on top
        return
    ax.set_xticks(ticks, [labels[t] for t in ticks])
    if len(ticks) > 6 or longest > 10:
        for label in ax.get_xticklabels():
            label.set_rotation(30)
            label.set_horizontalalignment("right")
            label.set_rotation_mode("anchor")
    ax.set_xlim(-0.6, len(labels) - 0.4)


def _time_axis(ax: Axes) -> None:
    """Concise date ticks in numeric form (no English month names in a Chinese chart)."""
    locator = mdates.AutoDateLocator(minticks=4, maxticks=10)
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(
        mdates.ConciseDateFormatter(
            locator,
            formats=["%Y", "%Y-%m", "%m-%d", "%H:%M", "%H:%M", "%S.%f"],
            zero_formats=["", "%Y", "%Y-%m", "%m-%d", "%H:%M", "%H:%M"],
            offset_formats=["", "%Y", "%Y", "%Y-%m-%d", "%Y-%m-%d", "%Y-%m-%d %H:%M"],
        )
    )


def _annotation_position(drawn: Drawn, x: str, on_positions: bool) -> Any:
    """Where ``x`` is on the drawn axis: a datetime or number on a scale, or the index of the
    category (``on_positions``: bars and category lines), or None if it is not there."""
    if drawn.x_kind == "time":
        when = to_time(x)
        if when is None:
            return None
        if not on_positions:
            return when
        return drawn.xs.index(when) if when in drawn.xs else None
    if drawn.x_kind == "number" and not on_positions:
        return to_number(x)
    labels = [str(v) for v in drawn.xs]
    return labels.index(x.strip()) if x.strip() in labels else None


def _annotate(ax: Axes, drawn: Drawn, annotation: ChartAnnotation, args: MakeChartInput) -> bool:
    """Draw a dashed marker with a label at the annotation's x; False if x is not on the axis."""
    on_positions = args.chart_type in ("bar", "stacked_bar", "combo") or drawn.x_kind == "category"
    where = _annotation_position(drawn, annotation.x, on_positions)
    if where is None:
        return False
    style: dict[str, Any] = {"color": _MARK_COLOR, "linestyle": "--", "linewidth": 1.2, "zorder": 3}
    text_style: dict[str, Any] = {"color": _MARK_COLOR, "fontsize": 10.5, "textcoords": "offset points"}
    if args.horizontal:
        ax.axhline(where, **style)
        ax.annotate(
            annotation.label,
            xy=(1, where),
            xycoords=("axes fraction", "data"),
            xytext=(-4, -3),
            ha="right",
            va="top",
            **text_style,
        )
    else:
        ax.axvline(where, **style)
        ax.annotate(
            annotation.label,
            xy=(where, 1),
            xycoords=("data", "axes fraction"),
            xytext=(4, -4),
            ha="left",
            va="top",
            **text_style,
        )
    return True


def _legend(fig: Figure, axes: list[Axes], *, reverse: bool) -> None:
    handles, labels = [], []
    for axis in axes:
        h, lab = axis.get_legend_handles_labels()
        handles += h
        labels += lab
    if len(handles) <= 1 and len(axes) == 1:
        return  # one series: the axis label says what it is
    # Outside the plot so it never covers data: a column beside it for many or long names, a
    # row under it for a few short ones.
    if len(handles) > 4 or sum(len(label) for label in labels) > 40:
        fig.legend(handles, labels, loc="outside right upper", reverse=reverse)
    else:
        fig.legend(handles, labels, loc="outside lower center", ncols=len(handles), reverse=reverse)
