"""A monitor's alert as a Feishu card (JSON 2.0): the headline, what moved against the
expectation, the root cause and the provenance line, with Acknowledge / Mute 7 days buttons while
it is open — who acted, once someone did — in the alert's language.

A button's click comes back as a `card.action.trigger` callback whose `action.value` is the
button's callback value: ``{"alert_id": …, "monitor_action": "acknowledge" | "mute"}``
(`adapters.feishu.card_actions` reads it). The chart follows in the alert's thread.
"""

from __future__ import annotations

from typing import Any

from agent_core.i18n import t
from agent_core.monitors.model import AlertStatus, AlertView, MonitorAction

# status → header colour
_TEMPLATES = {AlertStatus.OPEN: "red", AlertStatus.ACKNOWLEDGED: "green", AlertStatus.MUTED: "grey"}
# Feishu refuses a markdown element's text past about this many characters.
_MAX_MARKDOWN_CHARS = 2_900


def alert_card(alert: AlertView) -> dict[str, Any]:
    """The card of ``alert``: its buttons while open, who acted on it once someone did."""
    language = alert.language
    lines = [f"- {_escape(fact)}" for fact in alert.facts]
    if alert.root_cause:
        lines.append(t(language, "**Root cause:** {cause}", cause=_escape(alert.root_cause)))
    footer = [t(language, "Monitor `{name}`", name=_escape(alert.monitor))]
    if alert.provenance:
        footer.append(_escape(alert.provenance))
    elements: list[dict[str, Any]] = [
        {"tag": "markdown", "element_id": "facts", "content": _within("\n".join(lines))},
        {"tag": "markdown", "element_id": "footer", "content": _within(" · ".join(footer)), "text_size": "notation"},
    ]
    if alert.status is AlertStatus.OPEN:
        elements.append(
            {
                "tag": "column_set",
                "element_id": "buttons",
                "columns": [
                    _button_column(alert.id, MonitorAction.ACKNOWLEDGE, t(language, "Acknowledge"), "primary_filled"),
                    _button_column(alert.id, MonitorAction.MUTE, t(language, "Mute 7 days"), "default"),
                ],
            }
        )
    else:
        elements.append({"tag": "markdown", "element_id": "outcome", "content": outcome(alert)})
    return {
        "schema": "2.0",
        "config": {"update_multi": True},  # everyone in the chat sees who acted
        "header": {
            "title": {"tag": "plain_text", "content": alert.headline},
            "template": _TEMPLATES[alert.status],
        },
        "body": {"elements": elements},
    }


def outcome(alert: AlertView) -> str:
    """Who acknowledged or muted the alert (card markdown, the actor mentioned)."""
    language = alert.language
    who = f"<at id={alert.acted_by}></at>" if alert.acted_by else t(language, "someone")
    if alert.status is AlertStatus.MUTED and alert.muted_until is not None:
        until = f"{alert.muted_until:%Y-%m-%d %H:%M}"
        return "🔇 " + t(language, "Muted by {who} until {until} UTC", who=who, until=until)
    return "✅ " + t(language, "Acknowledged by {who}", who=who)


def _button_column(alert_id: str, action: MonitorAction, label: str, kind: str) -> dict[str, Any]:
    return {
        "tag": "column",
        "width": "auto",
        "elements": [
            {
                "tag": "button",
                "element_id": action.value,
                "text": {"tag": "plain_text", "content": label},
                "type": kind,
                "behaviors": [{"type": "callback", "value": {"alert_id": alert_id, "monitor_action": action.value}}],
            }
        ],
    }


def _escape(text: str) -> str:
    """Card markdown treats these as markup; shown as typed."""
    return text.replace("<", "&lt;").replace(">", "&gt;")


def _within(text: str) -> str:
    return text if len(text) <= _MAX_MARKDOWN_CHARS else text[: _MAX_MARKDOWN_CHARS - 1] + "…"
