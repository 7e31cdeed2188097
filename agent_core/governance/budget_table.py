"""The ``data_row_budget`` table: rows charged to each user per UTC day (see
`agent_core.governance.budget`). Migration ``0007`` creates it for the service."""

from __future__ import annotations

from sqlmodel import Field, SQLModel

BUDGET_TABLE = "data_row_budget"


class DataRowBudgetRow(SQLModel, table=True):
    """One user's rows charged on one UTC day."""

    __tablename__ = BUDGET_TABLE

    platform: str = Field(primary_key=True, max_length=32)
    user_id: str = Field(primary_key=True, max_length=128)
    day: str = Field(primary_key=True, max_length=10)  # YYYY-MM-DD, UTC
    used: int = 0  # rows reserved and not given back
    last_grant: int = 0  # what the latest reservation granted (read back by that statement)
