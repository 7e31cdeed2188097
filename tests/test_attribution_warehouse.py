"""Root-cause attribution of a warehouse metric (push-down) and in a monitor's alert: the same
method as over a file, so the answer names a parent whose children all moved alike.

A DuckDB warehouse holds ten weeks of daily sales per region x channel x category; on the last
day every sale in East fell by half and every web sale by 70 %. Both are whole segments of
different dimensions (East & web under both): the answer is region=East and channel=web, not
the region x channel combinations under them."""

from __future__ import annotations

import io
import itertools
import json
from collections.abc import AsyncIterator
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pytest
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from adapters.console.responder import ConsoleResponder
from agent_core.config import AgentConfig
from agent_core.monitors.model import Monitor
from agent_core.monitors.store import MonitorStore
from agent_core.run_context import RunContext
from agent_core.store.db import create_engine, session_factory
from agent_core.tools.analytics_tools import AttributeChangeInput, AttributeChangeTool
from gateway.jobs.monitors import MonitorRunner
from gateway.migrate import upgrade
from tests.test_semantic import write_warehouse_yaml

REGIONS = ["East", "West", "North", "South", "Central"]
CHANNELS = ["app", "web", "store"]
CATEGORIES = ["food", "toys", "home", "books"]
FIRST_DAY = date(2026, 3, 2)
OUTAGE_DAY = FIRST_DAY + timedelta(days=69)  # 2026-05-10, the last day
SALES_YAML = """\
semantic_models:
  - name: sales
    model: ref('sales')
    defaults:
      agg_time_dimension: sold_on
    entities:
      - name: sale
        type: primary
        expr: id
    dimensions:
      - name: sold_on
        type: time
        type_params:
          time_granularity: day
      - name: region
        type: categorical
      - name: channel
        type: categorical
      - name: category
        type: categorical
    measures:
      - name: revenue
        agg: sum
        expr: amount
metrics:
  - name: gmv
    description: Sales revenue.
    type: simple
    type_params:
      measure: revenue
"""


def build_sales(path: Path) -> None:
    rng = np.random.default_rng(5)
    leaves = list(itertools.product(REGIONS, CHANNELS, CATEGORIES))
    level = dict(zip(leaves, rng.lognormal(7, 0.6, len(leaves)), strict=True))
    rows = []
    for day in range(70):
        sold_on = FIRST_DAY + timedelta(days=day)
        weekly = 1.2 if sold_on.weekday() >= 5 else 1.0
        for i, (region, channel, category) in enumerate(leaves):
            amount = level[(region, channel, category)] * weekly * (1 + rng.normal(0, 0.03))
            if sold_on == OUTAGE_DAY:
                amount *= (0.5 if region == "East" else 1.0) * (0.3 if channel == "web" else 1.0)
            rows.append((day * len(leaves) + i, sold_on, region, channel, category, round(amount, 2)))
    frame = pd.DataFrame(rows, columns=["id", "sold_on", "region", "channel", "category", "amount"])
    with duckdb.connect(str(path)) as conn:
        conn.register("frame", frame)
        conn.execute("CREATE TABLE sales AS SELECT * FROM frame")


@pytest.fixture
def config(tmp_path: Path) -> AgentConfig:
    build_sales(tmp_path / "wh.duckdb")
    return AgentConfig(
        model="m",
        data_dir=tmp_path / "data",
        BA_DATASOURCES=json.dumps({"dwh": f"duckdb://{tmp_path / 'wh.duckdb'}"}),
        BA_SEMANTIC_DIR=str(write_warehouse_yaml(tmp_path / "semantic", "dwh", SALES_YAML)),
    )


@pytest.fixture
async def sessions(tmp_path: Path) -> AsyncIterator[async_sessionmaker[AsyncSession]]:
    url = f"sqlite:///{tmp_path / 'gw.db'}"
    upgrade(url)
    engine = create_engine(url)
    yield session_factory(engine)
    await engine.dispose()


async def test_a_pushed_down_attribution_names_the_segments_that_moved_as_a_whole(config: AgentConfig) -> None:
    ctx = RunContext(thread_id="console:local:terminal:1", data_dir=config.data_dir, channel="terminal", user="U1")
    week_before = (OUTAGE_DAY - timedelta(days=7)).isoformat()
    result = await AttributeChangeTool(config).run(
        AttributeChangeInput(
            metric="gmv",
            dimensions=["region", "channel", "category"],
            baseline_period={"start": week_before, "end": week_before},
            comparison_period={"start": OUTAGE_DAY.isoformat(), "end": OUTAGE_DAY.isoformat()},
        ),
        ctx,
    )
    assert [rc.element for rc in result.root_causes] == [{"channel": "web"}, {"region": "East"}]
    assert result.root_causes[0].relative_change == pytest.approx(-0.7, abs=0.05)
    assert result.explained_share == pytest.approx(1.0, abs=0.1)
    assert result.computed_in_source.cube_rows == 5 * 3 * 4


async def test_a_monitors_alert_names_the_parent_segments(
    config: AgentConfig, sessions: async_sessionmaker[AsyncSession]
) -> None:
    monitor = Monitor(name="gmv-watch", metric="gmv", dimensions=["region", "channel", "category"], cron="0 9 * * *",
                      platform="console", workspace="local", channel="terminal", creator="U0OPS", origin="file")  # fmt: skip
    out = io.StringIO()
    runner = MonitorRunner(MonitorStore(sessions, [monitor]), {"console": ConsoleResponder(out)}, config, sessions)
    fire = datetime.combine(OUTAGE_DAY + timedelta(days=1), datetime.min.time(), tzinfo=UTC) + timedelta(hours=9)
    run = await runner.run("gmv-watch", fire, post=False)
    assert run.anomalous and run.alert is not None and run.alert.root_cause is not None
    causes = run.alert.root_cause.split("; ")
    assert causes[0].startswith("channel=web (") and causes[1].startswith("region=East (")
    assert "&" not in run.alert.root_cause  # no combination under them is named
