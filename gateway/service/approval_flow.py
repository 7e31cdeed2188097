"""The life of an approval a paused turn waits for: asked in its thread, decided by a click,
withdrawn by a newer message, or expired; and the verdicts the turn then resumes with.

The dispatcher runs the turns (the paused one and the resumed one); everything it does with
`ApprovalStore` goes through `ApprovalFlow`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta

from adapters.base import ApprovalPrompts, Responder
from agent_core.governance.approval import ApprovalStatus, ApprovalVerdict, may_decide, verdict_of
from agent_core.governance.approval_store import ApprovalStore, StoredApproval
from agent_core.messages import ApprovalClick, InboundMessage
from agent_core.state import ApprovalRequest
from gateway.service.inbox import Inbox

log = logging.getLogger(__name__)

_DECISIONS = {"approve": ApprovalStatus.APPROVED, "reject": ApprovalStatus.REJECTED}


def expiry_event(approval: StoredApproval) -> InboundMessage:
    return approval.click("expire", event_id=f"approval-expired:{approval.id}", user=approval.origin.user)


class ApprovalFlow:
    """Asks, settles, withdraws and expires the approvals of paused turns."""

    def __init__(self, approvals: ApprovalStore, inbox: Inbox, ttl: timedelta, poll_interval_s: float = 1.0) -> None:
        self._approvals = approvals
        self._inbox = inbox
        self._ttl = ttl
        self._poll_interval_s = poll_interval_s

    async def ask(self, thread_id: str, msg: InboundMessage, request: ApprovalRequest, responder: ApprovalPrompts) -> None:
        """Store the approval `msg`'s turn paused for and post the request in its thread."""
        approval, created = await self._approvals.open(thread_id, msg, request, self._ttl)
        if approval.message_ref is None:
            # Opened by an earlier attempt and never marked posted: that attempt was cut short
            # (a crash) after opening it, perhaps after posting it too.
            ref = await responder.ask_approval(msg, approval, resumed=not created)
            await self._approvals.set_message_ref(approval.id, ref or "")

    async def decide(self, click: InboundMessage, action: ApprovalClick, responder: Responder) -> StoredApproval | None:
        """Settle the approval `action` names, once: a double click is a duplicate event, a late
        one finds it decided (or expired). The settled approval, whose turn resumes as its asker
        (`origin`); None when nothing changed: unknown, not the clicker's to decide, decided
        before, or withdrawn by a newer message."""
        stored = await self._approvals.get(action.approval_id)
        if stored is None:
            return None
        if action.choice != "expire" and not may_decide(stored, click.platform, click.user):
            return None  # the adapter refuses these; a forged event changes nothing
        late = action.choice == "expire" or click.received_at >= stored.expires_at
        status = ApprovalStatus.EXPIRED if late else _DECISIONS[action.choice]
        settled = await self._approvals.settle(stored.id, status, None if late else click.user)
        if settled is None or settled.status is ApprovalStatus.WITHDRAWN:
            return None
        if isinstance(responder, ApprovalPrompts):
            with contextlib.suppress(Exception):  # the buttons' update is cosmetic
                await responder.show_decision(stored.origin, settled)
        return settled

    async def verdicts(self, thread_id: str) -> list[ApprovalVerdict]:
        """What the thread's paused calls get when its turn resumes: each decided approval's
        verdict (withdrawn ones were superseded, not decided)."""
        return [
            verdict_of(a, who=a.decided_by)
            for a in await self._approvals.settled_in(thread_id)
            if a.status is not ApprovalStatus.WITHDRAWN
        ]

    async def withdraw_superseded(self, thread_id: str, msg: InboundMessage, responder: Responder) -> None:
        """A new message in a thread supersedes the approvals it still waits for. The message
        that asked for one does not: answering it again (after a crash) finds its own pause."""
        for pending in await self._approvals.pending_in(thread_id):
            if pending.origin.dedupe_key == msg.dedupe_key:
                continue
            settled = await self._approvals.settle(pending.id, ApprovalStatus.WITHDRAWN, None)
            if settled is not None and settled.status is ApprovalStatus.WITHDRAWN and isinstance(responder, ApprovalPrompts):
                with contextlib.suppress(Exception):
                    await responder.show_decision(pending.origin, settled)

    async def expire_overdue(self) -> None:
        """Until cancelled, turn each approval nobody decided in time into an "expire" event of
        its thread: the paused turn then resumes with the expiry as its result (a click racing
        it is the same event, so only one of them is accepted)."""
        while True:
            try:
                for approval in await self._approvals.expired_pending():
                    await self._inbox.accept(expiry_event(approval))
            except Exception:
                log.exception("could not expire pending approvals")
            await asyncio.sleep(max(self._poll_interval_s, 1.0))
