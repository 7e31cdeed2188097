"""The approval request as a Feishu card (JSON 2.0): what the paused query would run, the SQL in
a collapsed panel, and Approve / Reject buttons while it is pending — its outcome once decided —
in the asker's language.

A button's click comes back as a `card.action.trigger` callback whose `action.value` is the
button's callback value: ``{"approval_id": …, "choice": "approve" | "reject"}``
(`adapters.feishu.card_actions` reads it).
"""

from __future__ import annotations

from typing import Any

from agent_core.governance.approval import ApprovalStatus, ApprovalView
from agent_core.i18n import Language, t
from agent_core.messages import ClickChoice

APPROVE: ClickChoice = "approve"
REJECT: ClickChoice = "reject"
# Feishu refuses a markdown element's text past this many characters; the SQL is shown collapsed.
_MAX_SQL_CHARS = 2_900

_TEMPLATES = {
    ApprovalStatus.APPROVED: "green",
    ApprovalStatus.REJECTED: "red",
    ApprovalStatus.EXPIRED: "grey",
    ApprovalStatus.WITHDRAWN: "grey",
}


def approval_card(view: ApprovalView, language: Language) -> dict[str, Any]:
    """The card of ``view`` in ``language``: its buttons while pending, its outcome once decided."""
    request = view.request
    if request.estimated_rows is not None:
        estimate = t(language, "~{rows} rows", rows=f"{request.estimated_rows:,}")
    else:
        estimate = t(language, "unknown")
    approvers = _at(view.asker)
    if request.approvers_group:
        approvers = t(language, "{asker} or a member of `{group}`", asker=approvers, group=_escape(request.approvers_group))
    facts = t(
        language,
        "A query on `{source}` waits for approval ({reasons}).\n"
        "**Tables:** {tables}  **Estimated scan:** {estimate}\n"
        "**Who may approve:** {who}",
        source=_escape(request.source),
        reasons=_escape("; ".join(request.reasons)),
        tables=_escape(", ".join(request.tables)) or t(language, "none"),
        estimate=estimate,
        who=approvers,
    )
    elements: list[dict[str, Any]] = [
        {"tag": "markdown", "element_id": "facts", "content": facts},
        {
            "tag": "collapsible_panel",
            "element_id": "sql",
            "expanded": False,
            "header": {"title": {"tag": "plain_text", "content": "SQL"}},
            "elements": [{"tag": "markdown", "content": f"```sql\n{request.sql[:_MAX_SQL_CHARS]}\n```"}],
        },
    ]
    if view.status is ApprovalStatus.PENDING:
        template, title = "orange", t(language, "Approval needed")
        elements.append(
            {
                "tag": "column_set",
                "element_id": "buttons",
                "columns": [
                    _button_column(view.id, APPROVE, t(language, "Approve"), "primary_filled"),
                    _button_column(view.id, REJECT, t(language, "Reject"), "danger"),
                ],
            }
        )
    else:
        template = _TEMPLATES[view.status]
        title, line = _outcome(view, language)
        elements.append({"tag": "markdown", "element_id": "outcome", "content": line})
    return {
        "schema": "2.0",
        "config": {"update_multi": True},  # everyone in the chat sees the decision
        "header": {"title": {"tag": "plain_text", "content": title}, "template": template},
        "body": {"elements": elements},
    }


def _outcome(view: ApprovalView, language: Language) -> tuple[str, str]:
    """The header title of a decided request and the line naming who decided."""
    who = _at(view.decided_by) if view.decided_by else t(language, "nobody")
    if view.status is ApprovalStatus.APPROVED:
        return t(language, "Approved"), "✅ " + t(language, "Approved by {who}", who=who)
    if view.status is ApprovalStatus.REJECTED:
        return t(language, "Rejected"), "❌ " + t(language, "Rejected by {who}", who=who)
    if view.status is ApprovalStatus.EXPIRED:
        return t(language, "Expired"), "⌛ " + t(language, "Expired before anyone decided")
    return t(language, "Withdrawn"), "↩️ " + t(language, "Withdrawn: a newer message came first")


def _button_column(approval_id: str, choice: ClickChoice, label: str, kind: str) -> dict[str, Any]:
    return {
        "tag": "column",
        "width": "auto",
        "elements": [
            {
                "tag": "button",
                "element_id": choice,
                "text": {"tag": "plain_text", "content": label},
                "type": kind,
                "behaviors": [{"type": "callback", "value": {"approval_id": approval_id, "choice": choice}}],
            }
        ],
    }


def _at(open_id: str) -> str:
    return f"<at id={open_id}></at>"


def _escape(text: str) -> str:
    """Card markdown treats these as markup; shown as typed."""
    return text.replace("<", "&lt;").replace(">", "&gt;")
