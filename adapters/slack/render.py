"""Markdown answers → Slack messages: text split within Slack's limits at block boundaries, each
table as a native table block (the first rows, with the full CSV in the thread when it is bigger
than a table block may be); the provenance of a data answer as its closing message; approval
requests with their buttons."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from adapters.markdown_tables import Table, answer_parts, plain_text
from agent_core.catalog.learned import Proposal, ProposalStatus
from agent_core.governance.approval import ApprovalStatus, ApprovalView
from agent_core.i18n import Language, t
from agent_core.provenance import ENGLISH, Provenance, ProvenanceWords

# Slack accepts up to 12,000 characters of `markdown_text`; shorter parts read better in a thread.
MAX_PART_CHARS = 3900
# A table block holds at most 100 rows (the header row is one of them) of at most 20 cells.
MAX_TABLE_ROWS = 100
MAX_TABLE_COLUMNS = 20
# Slack refuses an empty table cell; this shows as one.
_EMPTY_CELL = "–"


@dataclass
class AnswerMessage:
    """One message of an answer: the chat.postMessage fields that carry it, and the table whose
    full CSV belongs in the thread when the message shows only part of it."""

    fields: dict[str, Any]
    full_table: Table | None = None


def answer_messages(markdown: str) -> list[AnswerMessage]:
    """The messages of an answer, in order. Text goes as `markdown_text`; a message with a table
    carries the text before it as a markdown block and the table as a table block (Slack takes
    one table per message, and no `markdown_text` beside blocks)."""
    parts = answer_parts(markdown.strip() or "(empty answer)", budget=MAX_PART_CHARS)
    messages = []
    for part in parts:
        if part.table is None:
            messages.append(AnswerMessage({"markdown_text": part.text}))
            continue
        table = part.table
        shown = table.head(MAX_TABLE_ROWS - 1, MAX_TABLE_COLUMNS)
        cut = shown.rows != table.rows or shown.width != table.width
        lead = "\n\n".join(t for t in (part.text, _cut_note(shown, table) if cut else "") if t)
        blocks: list[dict[str, Any]] = [{"type": "markdown", "text": lead}] if lead else []
        blocks.append(table_block(shown))
        fallback = part.text or f"Table: {', '.join(plain_text(h) for h in table.header)}"
        messages.append(
            AnswerMessage({"text": _within(fallback, 3000), "blocks": blocks}, table if cut else None)
        )
    return messages


def table_block(table: Table) -> dict[str, Any]:
    """A Block Kit table block: the header row, then the body rows, as plain-text cells."""
    rows = [table.header, *table.rows]
    return {
        "type": "table",
        "column_settings": [
            {"align": table.column_align(i), "is_wrapped": True} for i in range(table.width)
        ],
        "rows": [[{"type": "raw_text", "text": plain_text(c) or _EMPTY_CELL} for c in row] for row in rows],
    }


def _cut_note(shown: Table, table: Table) -> str:
    what = []
    if len(shown.rows) < len(table.rows):
        what.append(f"the first {len(shown.rows):,} of {len(table.rows):,} rows")
    if shown.width < table.width:
        what.append(f"the first {shown.width} of {table.width} columns")
    return f"_Showing {' and '.join(what)}; the full table is attached as {table.csv_name()}._"


# Under Slack's 3,000-character limit of a context block's text.
MAX_FOOTER_CHARS = 2900
# The SQL attachment: Slack folds long attachment text behind "Show more".
MAX_SQL_CHARS = 7000
_SQL_COLOR = "#8a8f98"


def provenance_message(provenance: Provenance, words: ProvenanceWords = ENGLISH) -> dict[str, Any]:
    """The message that ends a data answer: its provenance line as a footer (a context block),
    the SQL behind it in an attachment."""
    line = _escape(_within(provenance.summary_line(words), MAX_FOOTER_CHARS))
    sql = _escape(provenance.sql_listing(words, max_chars=MAX_SQL_CHARS))
    return {
        "text": line,
        "blocks": [{"type": "context", "elements": [{"type": "mrkdwn", "text": line}]}],
        "attachments": [
            {
                "color": _SQL_COLOR,
                "title": words.sql_title,
                "text": f"```\n{sql}\n```",
                "mrkdwn_in": ["text"],
                "fallback": words.sql_title,
            }
        ],
    }


def _escape(text: str) -> str:
    """Text as Slack's mrkdwn needs it: &, < and > escaped (they start links and mentions)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _within(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- approval requests ------------------------------------------------------------------------

APPROVE_ACTION = "ba_approval_approve"
REJECT_ACTION = "ba_approval_reject"


def _outcome(view: ApprovalView, language: Language) -> str:
    who = f"<@{view.decided_by}>" if view.decided_by else t(language, "nobody")
    if view.status is ApprovalStatus.APPROVED:
        return t(language, ":white_check_mark: Approved by {who}", who=who)
    if view.status is ApprovalStatus.REJECTED:
        return t(language, ":no_entry: Rejected by {who}", who=who)
    if view.status is ApprovalStatus.EXPIRED:
        return t(language, ":hourglass: Expired before anyone decided")
    return t(language, ":leftwards_arrow_with_hook: Withdrawn: a newer message came first")


def approval_blocks(view: ApprovalView, language: Language) -> tuple[str, list[dict[str, Any]]]:
    """The fallback text and Block Kit blocks of an approval request: what would run, and the
    Approve / Reject buttons while it is pending (its outcome once decided)."""
    request = view.request
    if request.estimated_rows is not None:
        estimate = t(language, "~{rows} rows", rows=f"{request.estimated_rows:,}")
    else:
        estimate = t(language, "unknown")
    asker = f"<@{view.asker}>"
    if request.approvers_group:
        who = t(language, "{asker} or a member of `{group}`", asker=asker, group=_escape(request.approvers_group))
    else:
        who = asker
    facts = t(
        language,
        "*Approval needed* for a query on `{source}` ({reasons}).\n"
        "*Tables:* {tables}   *Estimated scan:* {estimate}\n"
        "*Who may approve:* {who}",
        source=_escape(request.source),
        reasons=_escape("; ".join(request.reasons)),
        tables=_escape(", ".join(request.tables)) or t(language, "none"),
        estimate=estimate,
        who=who,
    )
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": _within(facts, 3000)}},
        # Collapsed: Slack folds a long code block behind "Show more".
        {"type": "rich_text", "elements": [
            {"type": "rich_text_preformatted", "elements": [{"type": "text", "text": _within(request.sql, 2900)}]}
        ]},
    ]  # fmt: skip
    if view.status is ApprovalStatus.PENDING:
        blocks.append(
            {
                "type": "actions",
                "block_id": f"approval:{view.id}",
                "elements": [
                    _button(t(language, "Approve"), APPROVE_ACTION, view.id, "primary"),
                    _button(t(language, "Reject"), REJECT_ACTION, view.id, "danger"),
                ],
            }
        )
        text = t(language, "Approval needed for a query on {source}", source=request.source)
    else:
        text = _outcome(view, language)
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": text}]})
    return text, blocks


def _button(label: str, action_id: str, value: str, style: str) -> dict[str, Any]:
    return {
        "type": "button",
        "text": {"type": "plain_text", "text": label},
        "action_id": action_id,
        "value": value,
        "style": style,
    }


# --- feedback under answers, example reviews ---------------------------------------------------

FEEDBACK_ACTION = "ba_answer_feedback"
FEEDBACK_COMMENT_VIEW = "ba_feedback_comment"
EXAMPLE_APPROVE_ACTION = "ba_example_approve"
EXAMPLE_REJECT_ACTION = "ba_example_reject"


def feedback_block(answer_id: str, language: Language) -> dict[str, Any]:
    """👍/👎 under an answer (Slack's feedback buttons); the values name the answer."""
    return {
        "type": "context_actions",
        "block_id": f"feedback:{answer_id}",
        "elements": [
            {
                "type": "feedback_buttons",
                "action_id": FEEDBACK_ACTION,
                "positive_button": {
                    "text": {"type": "plain_text", "text": "👍"},
                    "accessibility_label": t(language, "This answer was helpful"),
                    "value": f"up:{answer_id}",
                },
                "negative_button": {
                    "text": {"type": "plain_text", "text": "👎"},
                    "accessibility_label": t(language, "This answer was not helpful"),
                    "value": f"down:{answer_id}",
                },
            }
        ],
    }


def with_blocks(fields: dict[str, Any], blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """A message's fields with `blocks` added at its end. Slack takes no `markdown_text` beside
    blocks: such a message becomes a markdown block (its text the notification fallback)."""
    if not blocks:
        return fields
    if "blocks" in fields:
        return {**fields, "blocks": [*fields["blocks"], *blocks]}
    markdown = str(fields.get("markdown_text") or "")
    return {"text": markdown, "blocks": [{"type": "markdown", "text": markdown}, *blocks]}


def comment_view(answer_id: str, language: Language) -> dict[str, Any]:
    """The optional "what was wrong?" asked after a 👎 (a modal)."""
    return {
        "type": "modal",
        "callback_id": FEEDBACK_COMMENT_VIEW,
        "private_metadata": answer_id,
        "title": {"type": "plain_text", "text": _within(t(language, "Feedback"), 24)},
        "submit": {"type": "plain_text", "text": _within(t(language, "Send"), 24)},
        "close": {"type": "plain_text", "text": _within(t(language, "Skip"), 24)},
        "blocks": [
            {
                "type": "input",
                "block_id": "comment",
                "optional": True,
                "label": {"type": "plain_text", "text": t(language, "What was wrong?")},
                "element": {"type": "plain_text_input", "action_id": "comment", "multiline": True, "max_length": 3000},
            }
        ],
    }


def example_review_blocks(proposal: Proposal, language: Language) -> tuple[str, list[dict[str, Any]]]:
    """The DM asking a data owner to confirm a proposed example (or showing the decision)."""
    facts = t(
        language,
        "*A 👍 proposed a verified example* for `{source}` (by {who}).\n*Question:* {question}",
        source=_escape(proposal.source),
        who=_escape(proposal.proposed_by),
        question=_escape(_within(proposal.question, 1500)),
    )
    blocks: list[dict[str, Any]] = [
        {"type": "section", "text": {"type": "mrkdwn", "text": _within(facts, 3000)}},
        {"type": "rich_text", "elements": [
            {"type": "rich_text_preformatted", "elements": [{"type": "text", "text": _within(proposal.sql, 2900)}]}
        ]},
    ]  # fmt: skip
    if proposal.status is ProposalStatus.PENDING:
        text = t(language, "Confirm a verified example for {source}?", source=proposal.source)
        blocks.append(
            {
                "type": "actions",
                "block_id": f"example:{proposal.id}",
                "elements": [
                    _button(t(language, "Approve"), EXAMPLE_APPROVE_ACTION, str(proposal.id), "primary"),
                    _button(t(language, "Reject"), EXAMPLE_REJECT_ACTION, str(proposal.id), "danger"),
                ],
            }
        )
    else:
        who = (proposal.decided_by or "").partition(":")[2]
        if proposal.status is ProposalStatus.APPROVED:
            text = t(language, ":white_check_mark: Approved by {who}: search_schema now returns it", who=f"<@{who}>")
        else:
            text = t(language, ":no_entry: Rejected by {who}", who=f"<@{who}>")
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": text}]})
    return text, blocks
