"""Which calls wait for an approval: the policy file's `require_approval` / `approvers` (checked
with line numbers at start-up) and `BA_APPROVAL_ROWS` against DuckDB's own EXPLAIN estimate."""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

from agent_core.data.source_config import DataSourceConfig
from agent_core.governance.errors import PolicyFileError
from agent_core.governance.loader import load_policy
from agent_core.messages import ToolUseBlock
from agent_core.run_context import ChatOrigin, RunContext
from agent_core.toolkit.approval_gate import ApprovalGate
from agent_core.toolkit.pipeline import ToolPipeline
from agent_core.tools.sql import SqlQueryTool

SQL = "SELECT region, SUM(amount) FROM orders GROUP BY region"


@pytest.fixture
def source(tmp_path: Path) -> DataSourceConfig:
    path = tmp_path / "dwh.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE orders AS SELECT i AS id, 'East' AS region, 1.0 AS amount FROM range(5000) t(i)")
    return DataSourceConfig(name="dwh", url=f"duckdb://{path}")


def ctx(tmp_path: Path) -> RunContext:
    return RunContext(
        thread_id="t", data_dir=tmp_path, channel="D1", user="U1", is_dm=True,
        chat=ChatOrigin(platform="slack", workspace="T1"),
    )  # fmt: skip


def test_an_unknown_approvers_group_fails_naming_its_line(tmp_path: Path) -> None:
    path = tmp_path / "access.yaml"
    path.write_text("groups:\n  finance: [slack:U2]\nsources:\n  dwh:\n    groups: [default]\n"
                    "    require_approval: true\n    approvers: financ\n")  # fmt: skip
    with pytest.raises(PolicyFileError, match="line 7: sources.dwh.approvers: unknown group 'financ'"):
        load_policy(path)


async def test_the_row_threshold_uses_the_engines_estimate(source: DataSourceConfig, tmp_path: Path) -> None:
    tools = ToolPipeline([SqlQueryTool({"dwh": source})])
    call = ToolUseBlock(id="c1", name="sql_query", input={"source": "dwh", "sql": SQL})
    request = await ApprovalGate(tools, None, approval_rows=1000).check(call, ctx(tmp_path))
    assert request is not None and request.estimated_rows == 5000 and request.tables == ["orders"]
    assert "over the 1,000-row limit" in request.reasons[0]
    assert await ApprovalGate(tools, None, approval_rows=10_000).check(call, ctx(tmp_path)) is None
    uploads = ToolUseBlock(id="c2", name="sql_query", input={"sql": "SELECT 1"})
    assert await ApprovalGate(tools, None, approval_rows=0).check(uploads, ctx(tmp_path)) is None


async def test_a_source_that_requires_approval_names_its_approvers(source: DataSourceConfig, tmp_path: Path) -> None:
    path = tmp_path / "access.yaml"
    path.write_text("groups:\n  finance: [slack:U2]\nsources:\n  dwh:\n    groups: [default]\n"
                    "    require_approval: true\n    approvers: finance\n")  # fmt: skip
    policy = load_policy(path, {"dwh": "duckdb"})
    tools = ToolPipeline([SqlQueryTool({"dwh": source}, access_policy=policy)])
    call = ToolUseBlock(id="c1", name="sql_query", input={"source": "dwh", "sql": SQL})
    request = await ApprovalGate(tools, policy, approval_rows=None).check(call, ctx(tmp_path))
    assert request is not None and request.approvers_group == "finance" and request.approvers == ["slack:U2"]
    assert request.reasons == ["the source 'dwh' requires approval"]
