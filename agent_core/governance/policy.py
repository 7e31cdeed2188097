"""The access policy file (``BA_ACCESS_POLICY``) as typed models; its YAML shape is public::

    groups:                        # members as platform:user_id
      east_sales: [slack:U01EAST, feishu:ou_7d8a]
      finance: [slack:U02FIN]
    sources:
      dwh:                         # a name from BA_DATASOURCES
        groups: [east_sales, finance, default]      # who may use the source at all
        tables:
          orders:                  # as named in SQL; schema.orders names one schema's table
            row_filters:           # SQL condition over the table's columns, per group
              east_sales: "region = 'East'"
              finance: "true"
              default: "false"     # a group without a filter sees no rows
            hidden_columns: [customer_email]        # nobody reads these through the bot…
            column_grants: {finance: [customer_email]}  # …except these groups
        require_approval: true     # every query on it waits for Approve in the thread…
        approvers: finance         # …by the asker or a member of this group
        owners: [slack:U02FIN]     # confirm examples learned from 👍 on its answers
    metrics:                       # a governed metric (BA_SEMANTIC_DIR) may require it too
      revenue: {require_approval: true, approvers: finance}
    channels:                      # the audience of a shared place
      slack:C0SALES: east_sales

Everyone is in the group ``default``. A table without ``row_filters`` keeps all its rows (only
its column rules apply); a source the file does not name is not governed at all.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_GROUP = "default"

GroupName = Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_.-]{0,63}$")]
# A chat identity: the platform, a colon, the platform's id of the user or channel.
ChatId = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*:\S+$")]
ColumnName = Annotated[str, Field(min_length=1, max_length=128)]
# ``table`` or ``schema.table``, as written in SQL (unquoted).
TableName = Annotated[str, Field(pattern=r"^[^.\s]+(\.[^.\s]+)?$")]


class TablePolicy(BaseModel):
    """What each group may read of one table."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # None: every row for everyone; otherwise a group without an entry sees no rows.
    row_filters: dict[GroupName, str] | None = None
    hidden_columns: list[ColumnName] = Field(default_factory=list)
    column_grants: dict[GroupName, list[ColumnName]] = Field(default_factory=dict)


class SourcePolicy(BaseModel):
    """Who may use one data source, and the rules of its protected tables."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    groups: list[GroupName]
    tables: dict[TableName, TablePolicy] = Field(default_factory=dict)
    require_approval: bool = False
    # Who besides the asker may approve its queries (a group of the file); None: the asker only.
    approvers: GroupName | None = None
    # Data owners: they confirm the examples a 👍 on an answer from this source proposes.
    owners: list[ChatId] = Field(default_factory=list)


class MetricPolicy(BaseModel):
    """Whether answers computed from one governed metric wait for an approval."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    require_approval: bool = False
    approvers: GroupName | None = None


class AccessPolicy(BaseModel):
    """The whole policy file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    groups: dict[GroupName, list[ChatId]] = Field(default_factory=dict)
    sources: dict[str, SourcePolicy] = Field(default_factory=dict)
    metrics: dict[str, MetricPolicy] = Field(default_factory=dict)
    channels: dict[ChatId, GroupName] = Field(default_factory=dict)
