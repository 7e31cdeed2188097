"""The analytics core's light input types, shared with the tools that describe their inputs
to the model (pydantic only: importing them loads no numerical stack)."""

from __future__ import annotations

from datetime import date
from typing import Literal

from pydantic import BaseModel, model_validator

Sensitivity = Literal["low", "medium", "high"]


class Period(BaseModel):
    """An inclusive date range."""

    start: date
    end: date

    @model_validator(mode="after")
    def _ordered(self) -> Period:
        if self.end < self.start:
            raise ValueError("period end is before its start")
        return self

    @property
    def days(self) -> int:
        """Number of calendar days in the range."""
        return (self.end - self.start).days + 1
