"""The gate the loop asks before a tool call runs: does this query wait for an approval?

A tool whose calls query a configured source says what a call would run (`QueryPlanner`:
the source and the SQL after the access policy's rewrite, and the metrics it computes). The
gate then applies the policy's ``require_approval`` (source or metric) and ``BA_APPROVAL_ROWS``
(against the engine's EXPLAIN estimate) and returns the `ApprovalRequest` to post, or None.
A call the gate cannot plan (bad input, unknown source…) is let through: running it reports
the problem, and nothing runs that planning refused.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError

from agent_core.data.source_config import DataSourceConfig
from agent_core.governance.approval import MAX_SHOWN_SQL_CHARS, approvers_of
from agent_core.governance.policy import AccessPolicy
from agent_core.messages import ToolUseBlock
from agent_core.run_context import RunContext
from agent_core.state import ApprovalRequest
from agent_core.toolkit.levels import OUTPUT_LEVEL_FIELD


@dataclass(frozen=True)
class PlannedQuery:
    """What one call would run on a configured source."""

    source: DataSourceConfig
    sql: str  # after the access policy's rewrite
    dialect: str  # sqlglot's name for the source's SQL
    metrics: list[str] = field(default_factory=list)


class QueryPlanner(Protocol):
    """A tool that can say, without running anything, which query a call would run."""

    Input: type[BaseModel]

    async def plan_query(self, args: Any, ctx: RunContext) -> PlannedQuery | None: ...


class ToolLookup(Protocol):
    def get(self, name: str) -> Any: ...


class ApprovalGate:
    """Decides, per tool call, whether it must wait for an approval in the thread."""

    def __init__(self, tools: ToolLookup, policy: AccessPolicy | None, approval_rows: int | None) -> None:
        self._tools = tools
        self._policy = policy
        self._rows = approval_rows

    @property
    def active(self) -> bool:
        """False when nothing can require an approval (no rule, no row threshold)."""
        if self._rows is not None:
            return True
        policy = self._policy
        return policy is not None and (
            any(s.require_approval for s in policy.sources.values())
            or any(m.require_approval for m in policy.metrics.values())
        )

    async def check(self, call: ToolUseBlock, ctx: RunContext) -> ApprovalRequest | None:
        """The request to post before ``call`` may run, or None when it may run now."""
        if not self.active:
            return None
        tool = self._tools.get(call.name)
        plan_query = getattr(tool, "plan_query", None)
        if tool is None or plan_query is None:
            return None
        fields = {k: v for k, v in call.input.items() if k != OUTPUT_LEVEL_FIELD}
        try:
            args = tool.Input.model_validate(fields)
        except ValidationError:
            return None
        planned: PlannedQuery | None = await plan_query(args, ctx)
        if planned is None:
            return None
        reasons, group = self._rules(planned)
        from agent_core.governance.approval_estimate import safe_estimate

        estimate = None  # asked when it decides, or when it will be shown
        if self._rows is not None or reasons:
            estimate = await asyncio.to_thread(safe_estimate, planned.source, planned.sql)
        if self._rows is not None and estimate is not None and estimate > self._rows:
            reasons.append(f"the engine estimates {estimate:,} rows, over the {self._rows:,}-row limit")
        if not reasons:
            return None
        return ApprovalRequest(
            tool_use_id=call.id,
            tool_name=call.name,
            source=planned.source.name,
            tables=tables_of(planned.sql, planned.dialect),
            estimated_rows=estimate,
            sql=planned.sql[:MAX_SHOWN_SQL_CHARS],
            reasons=reasons,
            approvers_group=group,
            approvers=approvers_of(self._policy, group) if self._policy is not None else [],
        )

    def _rules(self, planned: PlannedQuery) -> tuple[list[str], str | None]:
        """The policy's reasons to ask (source, metrics) and the group that may approve."""
        reasons: list[str] = []
        group: str | None = None
        if self._policy is None:
            return reasons, group
        source = self._policy.sources.get(planned.source.name)
        if source is not None and source.require_approval:
            reasons.append(f"the source {planned.source.name!r} requires approval")
            group = source.approvers
        for name in planned.metrics:
            metric = self._policy.metrics.get(name)
            if metric is not None and metric.require_approval:
                reasons.append(f"the metric {name!r} requires approval")
                group = group or metric.approvers
        return reasons, group


def tables_of(sql: str, dialect: str) -> list[str]:
    """The tables ``sql`` reads (CTE names excluded), as written, sorted."""
    import sqlglot
    from sqlglot import exp

    try:
        statement = sqlglot.parse_one(sql, read=dialect)
    except sqlglot.errors.ParseError:
        return []
    ctes = {cte.alias_or_name.casefold() for cte in statement.find_all(exp.CTE)}
    names = {
        ".".join(part for part in (table.db, table.name) if part)
        for table in statement.find_all(exp.Table)
        if table.name and table.name.casefold() not in ctes
    }
    return sorted(names)
