"""Approval in the thread: what a paused tool call asks for, and who may answer it.

A query over a source (or metric) that the access policy marks ``require_approval``, or whose
estimated scan exceeds ``BA_APPROVAL_ROWS``, does not run until someone approves it in the
thread: the asker, or a member of the source's (metric's) ``approvers`` group. These are the
light models every layer shares (the gate in `agent_core.toolkit.approval_gate`, the table in `approval_store`,
the loop's pause, the responders' buttons); nothing here imports a parser or a driver.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel

from agent_core.governance.policy import AccessPolicy
from agent_core.state import ApprovalRequest

# How much of the SQL an approval request carries (it is shown collapsed in the thread).
MAX_SHOWN_SQL_CHARS = 2_800


class ApprovalStatus(StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    WITHDRAWN = "withdrawn"  # a newer message in the thread came before any decision


class ApprovalView(BaseModel):
    """An approval as the responders render it (the request, and its decision once made)."""

    id: str
    request: ApprovalRequest
    asker: str  # platform user id
    status: ApprovalStatus = ApprovalStatus.PENDING
    decided_by: str | None = None  # platform user id of the decider
    message_ref: str | None = None  # the platform's id of the posted request (to update it)


class ApprovalVerdict(BaseModel):
    """A decision as the paused turn receives it: run the call, or answer it with an error."""

    tool_use_id: str
    approval_id: str
    approved: bool
    message: str  # the error result when not approved


def may_decide(view: ApprovalView, platform: str, user: str) -> bool:
    """True if ``user`` (on ``platform``) may approve or reject ``view``."""
    return user == view.asker or f"{platform.lower()}:{user}" in view.request.approvers


def verdict_of(view: ApprovalView, who: str | None) -> ApprovalVerdict:
    """What the paused call gets for a settled approval (``who``: how to name the decider)."""
    status = view.status
    messages = {
        ApprovalStatus.APPROVED: "",
        ApprovalStatus.REJECTED: f"The query was rejected by {who or 'an approver'}; it did not run.",
        ApprovalStatus.EXPIRED: "The approval request expired before anyone decided; the query did not run.",
        ApprovalStatus.WITHDRAWN: "The approval request was withdrawn; the query did not run.",
    }
    return ApprovalVerdict(
        tool_use_id=view.request.tool_use_id,
        approval_id=view.id,
        approved=status is ApprovalStatus.APPROVED,
        message=messages.get(status, "The query did not run."),
    )


def approvers_of(policy: AccessPolicy, group: str | None) -> list[str]:
    """The members of ``group`` as platform:user_id (none for no group)."""
    return list(policy.groups.get(group, [])) if group else []
