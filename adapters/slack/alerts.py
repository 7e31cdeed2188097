"""A monitor's alert as a Slack message: the headline, what moved against the expectation, the
root cause and the provenance line, with Acknowledge / Mute 7 days buttons while it is open
(who acted, once someone did), in the alert's language."""

from __future__ import annotations

from typing import Any

from agent_core.i18n import t
from agent_core.monitors.model import AlertStatus, AlertView, MonitorAction

ACKNOWLEDGE_ACTION = "ba_monitor_acknowledge"
MUTE_ACTION = "ba_monitor_mute"
ACTIONS = {ACKNOWLEDGE_ACTION: MonitorAction.ACKNOWLEDGE, MUTE_ACTION: MonitorAction.MUTE}
_SECTION_CHARS = 3000  # Slack's limit on a section's text


def alert_blocks(alert: AlertView) -> tuple[str, list[dict[str, Any]]]:
    """The fallback text and Block Kit blocks of an alert."""
    facts = "\n".join(f"• {_escape(fact)}" for fact in alert.facts)
    body = f":rotating_light: *{_escape(alert.headline)}*\n{facts}"
    language = alert.language
    if alert.root_cause:
        body += "\n" + t(language, "*Root cause:* {cause}", cause=_escape(alert.root_cause))
    blocks: list[dict[str, Any]] = [{"type": "section", "text": {"type": "mrkdwn", "text": _within(body)}}]
    monitor = t(language, "Monitor `{name}`", name=_escape(alert.monitor))
    footer = [monitor] + ([_escape(alert.provenance)] if alert.provenance else [])
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": _within(" · ".join(footer))}]})
    if alert.status is AlertStatus.OPEN:
        blocks.append(
            {
                "type": "actions",
                "block_id": f"monitor-alert:{alert.id}",
                "elements": [
                    _button(t(language, "Acknowledge"), ACKNOWLEDGE_ACTION, alert.id, "primary"),
                    _button(t(language, "Mute 7 days"), MUTE_ACTION, alert.id, None),
                ],
            }
        )
    else:
        blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": outcome(alert)}]})
    return alert.headline, blocks


def outcome(alert: AlertView) -> str:
    """Who acknowledged or muted the alert (mrkdwn)."""
    language = alert.language
    who = f"<@{alert.acted_by}>" if alert.acted_by else t(language, "someone")
    if alert.status is AlertStatus.MUTED and alert.muted_until is not None:
        until = f"{alert.muted_until:%Y-%m-%d %H:%M}"
        return ":mute: " + t(language, "Muted by {who} until {until} UTC", who=who, until=until)
    return ":white_check_mark: " + t(language, "Acknowledged by {who}", who=who)


def already_done(alert: AlertView) -> str:
    """What a click on an alert someone else acted on first is told privately."""
    return t(alert.language, "Already done: {outcome}.", outcome=outcome(alert))


def _button(label: str, action_id: str, value: str, style: str | None) -> dict[str, Any]:
    button: dict[str, Any] = {
        "type": "button",
        "text": {"type": "plain_text", "text": label},
        "action_id": action_id,
        "value": value,
    }
    if style is not None:
        button["style"] = style
    return button


def _escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _within(text: str) -> str:
    return text if len(text) <= _SECTION_CHARS else text[: _SECTION_CHARS - 1] + "…"
