"""A data owner's review of an example a 👍 proposed, as a Feishu card (JSON 2.0) sent to the
owner directly: the question and its SQL, Approve / Reject while it waits, who decided once
decided — in the language of the conversation it came from.

A button's click comes back as a `card.action.trigger` callback whose `action.value` is
``{"example_id": …, "choice": "approve" | "reject", "language": …}``
(`adapters.feishu.card_actions` reads it; only the source's owners may decide).
"""

from __future__ import annotations

from typing import Any

from agent_core.catalog.learned import Proposal, ProposalStatus
from agent_core.i18n import Language, t
from agent_core.messages import ClickChoice

APPROVE: ClickChoice = "approve"
REJECT: ClickChoice = "reject"
# Feishu refuses a markdown element's text past this many characters.
_MAX_SQL_CHARS = 2_900
_MAX_QUESTION_CHARS = 1_500


def example_card(proposal: Proposal, language: Language) -> dict[str, Any]:
    """The review card of ``proposal``: its buttons while pending, its outcome once decided."""
    facts = t(
        language,
        "A 👍 proposed a verified example for `{source}` (by {who}).\n**Question:** {question}",
        source=_escape(proposal.source),
        who=_person(proposal.proposed_by),
        question=_escape(proposal.question[:_MAX_QUESTION_CHARS]),
    )
    elements: list[dict[str, Any]] = [
        {"tag": "markdown", "element_id": "facts", "content": facts},
        {"tag": "markdown", "element_id": "sql", "content": f"```sql\n{proposal.sql[:_MAX_SQL_CHARS]}\n```"},
    ]
    title = t(language, "Confirm a verified example for {source}?", source=proposal.source)
    if proposal.status is ProposalStatus.PENDING:
        template = "orange"
        elements.append(
            {
                "tag": "column_set",
                "element_id": "buttons",
                "columns": [
                    _button_column(proposal.id, APPROVE, t(language, "Approve"), "primary_filled", language),
                    _button_column(proposal.id, REJECT, t(language, "Reject"), "danger", language),
                ],
            }
        )
    else:
        who = _person(proposal.decided_by or "")
        if proposal.status is ProposalStatus.APPROVED:
            template, line = "green", "✅ " + t(language, "Approved by {who}", who=who)
        else:
            template, line = "red", "❌ " + t(language, "Rejected by {who}", who=who)
        elements.append({"tag": "markdown", "element_id": "outcome", "content": line})
    return {
        "schema": "2.0",
        "config": {"update_multi": True},  # a card the bot may replace once decided
        "header": {"title": {"tag": "plain_text", "content": title}, "template": template},
        "body": {"elements": elements},
    }


def _button_column(proposal_id: int, choice: ClickChoice, label: str, kind: str, language: Language) -> dict[str, Any]:
    value = {"example_id": proposal_id, "choice": choice, "language": language.value}
    return {
        "tag": "column",
        "width": "auto",
        "elements": [
            {
                "tag": "button",
                "element_id": f"example_{choice}",
                "text": {"tag": "plain_text", "content": label},
                "type": kind,
                "behaviors": [{"type": "callback", "value": value}],
            }
        ],
    }


def _person(who: str) -> str:
    """A `platform:id` person: a Feishu user as a mention, anyone else as written."""
    platform, _, user = who.partition(":")
    return f"<at id={user}></at>" if platform == "feishu" and user else _escape(who)


def _escape(text: str) -> str:
    """Card markdown treats these as markup; shown as typed."""
    return text.replace("<", "&lt;").replace(">", "&gt;")
