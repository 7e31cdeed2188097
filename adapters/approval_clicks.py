"""A click on an approval request's buttons, checked and accepted into the inbox: the same
rules for every platform, before the platform gets its answer.

Only the asker and the approvers' group may decide; anyone else is told so privately and
nothing is stored. A decision is accepted as the approval's one inbox event, so a double click
(or a second decider) is a duplicate of the first: the decision counts once.
"""

from __future__ import annotations

from dataclasses import dataclass

from adapters.base import AcceptMessage, AcceptOutcome, LookupApproval
from agent_core.governance.approval import ApprovalStatus, may_decide
from agent_core.i18n import Language, t
from agent_core.messages import ClickChoice


@dataclass(frozen=True)
class ClickAnswer:
    accepted: bool
    note: str | None = None  # what to tell the clicker privately, if anything
    language: Language = Language.EN  # the request's (its asker's), for the platform's own answer


async def accept_click(
    lookup: LookupApproval | None,
    accept: AcceptMessage,
    *,
    platform: str,
    approval_id: str,
    choice: ClickChoice,
    user: str,
    user_name: str | None,
    event_id: str,
) -> ClickAnswer:
    """Check ``user``'s click on ``approval_id`` and, if it may decide, commit it to the inbox."""
    stored = await lookup(approval_id) if lookup is not None and approval_id else None
    if stored is None or stored.origin.platform != platform:
        return ClickAnswer(False, t(Language.EN, "This approval request is no longer known."))
    # In the language of the request the note answers (its asker's).
    language = stored.origin.language
    already_decided = t(language, "This request was already decided.")
    if not may_decide(stored, platform, user):
        group = stored.request.approvers_group
        if group:
            note = t(
                language,
                "This request is not yours to approve: only the person who asked or a member of {group} can decide.",
                group=group,
            )
        else:
            note = t(language, "This request is not yours to approve: only the person who asked can decide.")
        return ClickAnswer(False, note)
    if stored.status is not ApprovalStatus.PENDING:
        return ClickAnswer(False, already_decided)
    outcome = await accept(stored.click(choice, event_id=event_id, user=user, user_name=user_name))
    if outcome is AcceptOutcome.DUPLICATE:
        return ClickAnswer(False, already_decided)
    return ClickAnswer(True, language=language)
