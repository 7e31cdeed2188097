"""Deterministic synthetic demo database: one ``sales`` table for trying the agent out.

The table holds daily sales from 2026-05-01 to 2026-10-31 (184 days) for every combination of

* region: East China, North China, South China, West China, Central China
* channel: app, web, offline
* category: Electronics, Apparel, Grocery, Home, Beauty

with columns ``date`` (DATE), ``region``, ``channel``, ``category`` (VARCHAR), ``orders``
(INTEGER) and ``gmv`` (DECIMAL(14,2)) — 13,800 rows. Orders follow regional, channel and
category weights, a weekly pattern (weekends busier, most of all offline), a mild upward trend
(about +12 % over the period) and multiplicative noise from a fixed seed, so every build is
identical.

Injected anomalies an analyst should be able to find (also in :data:`DEMO_ANOMALIES`):

1. **2026-10-20 to 2026-10-22, East China / app, all categories**: orders and GMV drop by about
   40 % (an app outage), then recover on 2026-10-23.
2. **2026-06-18, app and web, Electronics, all regions**: a "618" mid-year promotion spike —
   orders about 2.5× a normal day.

When queried through :func:`agent_core.data.duckdb_engine.run_duckdb_query` the demo database is
attached read-only as catalog ``demo``, so the model sees the table as ``demo.sales``.
"""

from __future__ import annotations

import math
import os
import random
import uuid
from datetime import date, timedelta
from pathlib import Path

import duckdb
from pydantic import BaseModel

# Bump whenever the generated data or schema changes: existing files are rebuilt on next use.
DEMO_VERSION = 1
DEMO_CATALOG = "demo"
DEMO_TABLE = "sales"
DEMO_START = date(2026, 5, 1)
DEMO_END = date(2026, 10, 31)
_SEED = 20261031
_META_TABLE = "_demo_meta"

# name -> relative order volume
_REGIONS: dict[str, float] = {
    "East China": 1.6,
    "North China": 1.1,
    "South China": 1.3,
    "West China": 0.7,
    "Central China": 0.8,
}
# name -> (relative order volume, average-order-value factor)
_CHANNELS: dict[str, tuple[float, float]] = {
    "app": (1.0, 1.0),
    "web": (0.55, 1.08),
    "offline": (0.45, 0.92),
}
# name -> (relative order volume, average order value in CNY)
_CATEGORIES: dict[str, tuple[float, float]] = {
    "Electronics": (0.5, 680.0),
    "Apparel": (1.0, 180.0),
    "Grocery": (2.2, 65.0),
    "Home": (0.6, 260.0),
    "Beauty": (0.8, 150.0),
}
# Weekday multipliers, Monday first; offline stores depend most on weekends.
_WEEKLY: dict[str, tuple[float, ...]] = {
    "app": (0.95, 0.93, 0.95, 0.98, 1.05, 1.15, 1.12),
    "web": (1.02, 1.00, 1.00, 1.00, 1.02, 1.08, 1.05),
    "offline": (0.85, 0.83, 0.86, 0.90, 1.02, 1.32, 1.28),
}
_BASE_ORDERS = 120.0
_TREND_OVER_PERIOD = 0.12
_ORDER_NOISE_SIGMA = 0.08
_AOV_NOISE_SIGMA = 0.03


class DemoAnomaly(BaseModel):
    """A deliberately injected pattern in the demo data (ground truth for evaluations)."""

    start: date
    end: date  # inclusive
    regions: tuple[str, ...]
    channels: tuple[str, ...]
    categories: tuple[str, ...]
    orders_factor: float
    description: str

    def applies(self, day: date, region: str, channel: str, category: str) -> bool:
        return (
            self.start <= day <= self.end
            and region in self.regions
            and channel in self.channels
            and category in self.categories
        )


DEMO_ANOMALIES: tuple[DemoAnomaly, ...] = (
    DemoAnomaly(
        start=date(2026, 10, 20),
        end=date(2026, 10, 22),
        regions=("East China",),
        channels=("app",),
        categories=tuple(_CATEGORIES),
        orders_factor=0.6,
        description=(
            "App outage: East China app orders and GMV drop about 40% from 2026-10-20 to "
            "2026-10-22 (all categories) and recover on 2026-10-23."
        ),
    ),
    DemoAnomaly(
        start=date(2026, 6, 18),
        end=date(2026, 6, 18),
        regions=tuple(_REGIONS),
        channels=("app", "web"),
        categories=("Electronics",),
        orders_factor=2.5,
        description=(
            "618 mid-year promotion: Electronics orders on app and web are about 2.5x a "
            "normal day on 2026-06-18 in every region."
        ),
    ),
)

DEMO_DESCRIPTION = (
    "Demo data: table demo.sales holds synthetic daily e-commerce sales from 2026-05-01 to "
    "2026-10-31, one row per date x region x channel x category. Columns: date (DATE), region "
    "(East China, North China, South China, West China, Central China), channel (app, web, "
    "offline), category (Electronics, Apparel, Grocery, Home, Beauty), orders (INTEGER, number "
    "of orders that day) and gmv (DECIMAL(14,2), gross merchandise value in CNY). The data has "
    "weekly seasonality (busier weekends, strongest offline), a mild upward trend and random "
    "noise, so day-to-day wiggles are normal; look for sustained or sharp deviations."
)


def demo_database_path(data_dir: Path) -> Path:
    """Where the shared, read-only demo database (``demo.sales``) lives under ``BA_DATA_DIR``."""
    return data_dir / "demo" / "demo.duckdb"


def ensure_demo_database(path: Path) -> Path:
    """Build the demo DuckDB database at ``path`` unless an up-to-date one is already there.

    The build writes a uniquely named temporary file in the same directory and renames it over
    ``path`` atomically, so concurrent processes never see a half-built file (if two build at
    once, both produce identical files and the last rename wins). Returns ``path``.
    """
    path = Path(path)
    if _is_current(path):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        _build(tmp)
        os.replace(tmp, path)
    finally:
        # Leftovers only exist if the build failed; DuckDB may also leave a WAL beside it.
        for leftover in (tmp, tmp.with_name(tmp.name + ".wal")):
            leftover.unlink(missing_ok=True)
    return path


def _is_current(path: Path) -> bool:
    """True if ``path`` is a demo database of the current version."""
    if not path.is_file():
        return False
    try:
        with duckdb.connect(str(path), read_only=True) as conn:
            row = conn.execute(f"SELECT max(version) FROM {_META_TABLE}").fetchone()
    except duckdb.Error:
        # Not a DuckDB file, an older layout without the marker table, or corrupt: rebuild.
        return False
    return row is not None and row[0] == DEMO_VERSION


def _build(target: Path) -> None:
    columns = _generate_columns()
    with duckdb.connect(str(target)) as conn:
        conn.execute(
            f"""
            CREATE TABLE {DEMO_TABLE} (
                date DATE NOT NULL,
                region VARCHAR NOT NULL,
                channel VARCHAR NOT NULL,
                category VARCHAR NOT NULL,
                orders INTEGER NOT NULL,
                gmv DECIMAL(14, 2) NOT NULL
            )
            """
        )
        # Whole columns travel as list parameters and are unnested in one statement: much
        # faster than executemany or a huge VALUES literal. GMV travels as text so the stored
        # decimals are exactly the generated ones, never rounded through binary floats.
        conn.execute(
            f"""
            INSERT INTO {DEMO_TABLE}
            SELECT unnest($dates), unnest($regions), unnest($channels), unnest($categories),
                   unnest($orders), CAST(unnest($gmv) AS DECIMAL(14, 2))
            """,
            columns,
        )
        conn.execute(f"CREATE TABLE {_META_TABLE} (version INTEGER NOT NULL)")
        conn.execute(f"INSERT INTO {_META_TABLE} VALUES ({DEMO_VERSION})")
        conn.execute("CHECKPOINT")


def _generate_columns() -> dict[str, list[object]]:
    """The table's columns, rows in a fixed order, noise from a fixed seed."""
    rng = random.Random(_SEED)
    columns: dict[str, list[object]] = {
        name: [] for name in ("dates", "regions", "channels", "categories", "orders", "gmv")
    }
    days = (DEMO_END - DEMO_START).days + 1
    for offset in range(days):
        day = DEMO_START + timedelta(days=offset)
        trend = 1.0 + _TREND_OVER_PERIOD * offset / (days - 1)
        for region, region_weight in _REGIONS.items():
            for channel, (channel_weight, aov_factor) in _CHANNELS.items():
                weekly = _WEEKLY[channel][day.weekday()]
                for category, (category_weight, base_aov) in _CATEGORIES.items():
                    expected = (
                        _BASE_ORDERS
                        * region_weight
                        * channel_weight
                        * category_weight
                        * weekly
                        * trend
                    )
                    for anomaly in DEMO_ANOMALIES:
                        if anomaly.applies(day, region, channel, category):
                            expected *= anomaly.orders_factor
                    orders = max(0, round(expected * math.exp(rng.gauss(0.0, _ORDER_NOISE_SIGMA))))
                    aov = base_aov * aov_factor * (1.0 + rng.gauss(0.0, _AOV_NOISE_SIGMA))
                    columns["dates"].append(day)
                    columns["regions"].append(region)
                    columns["channels"].append(channel)
                    columns["categories"].append(category)
                    columns["orders"].append(orders)
                    columns["gmv"].append(f"{orders * aov:.2f}")
    return columns
