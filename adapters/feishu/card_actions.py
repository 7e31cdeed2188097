"""Card action callbacks (`card.action.trigger`, schema 2.0): a click on an approval card's
Approve / Reject button, a monitor alert's Acknowledge / Mute 7 days button, Stop, 👍/👎 and
"what was wrong?" under answers, or a data owner's Approve / Reject on a proposed example, read
from the verified payload, acted on, and answered in the callback response.

Feishu shows the response's toast to the clicker only: that is where a non-approver learns the
request is not theirs, and a late clicker that someone else acted on the alert first. An
approval card is updated by the responder once the decision is made; an alert card is updated
here, once the click is recorded, as Slack's adapter does after its acknowledgement.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from adapters.approval_clicks import ClickAnswer, accept_click
from adapters.base import AcceptMessage, ActOnAlert, FeedbackActions, FeedbackClick, LookupApproval, PlatformId
from adapters.feishu.events import CARD_ACTION, PLATFORM, Ignored, MalformedEvent
from agent_core.catalog.learned import Proposal
from agent_core.i18n import Language, t
from agent_core.messages import ClickChoice, InboundMessage, ThreadKey
from agent_core.monitors.model import AlertStatus, AlertView, MonitorAction

log = logging.getLogger(__name__)

# Shows an alert as it now reads in place of its posted card (`FeishuResponder.update_alert`).
ShowAlert = Callable[[AlertView], Awaitable[None]]
# Asks "what was wrong?" under a 👎'd answer card (message id, chat id, answer id, language).
AskWhatWasWrong = Callable[[str, str, str, Language], Coroutine[Any, Any, None]]
# Shows a data owner's decision on the example card they clicked (message id, the proposal as
# decided, language: `FeishuResponder.show_example_decision`).
ShowExampleDecision = Callable[[str, Proposal, Language], Awaitable[None]]
_ASKING: set[asyncio.Task[None]] = set()  # questions being posted (kept from the collector)


# The ids a callback carries (PlatformId: no control characters, which PostgreSQL would refuse
# in the stores' lookups) are checked here; a click whose value fails is ignored.
class _Operator(BaseModel):
    open_id: PlatformId


class _ApprovalValue(BaseModel):
    approval_id: PlatformId
    choice: ClickChoice


class _AlertValue(BaseModel):
    alert_id: PlatformId
    monitor_action: MonitorAction


class _StopTarget(BaseModel):
    workspace: PlatformId
    chat: PlatformId
    root: PlatformId
    reply_in: PlatformId = ""
    dm: bool = False
    language: Language = Language.EN


class _StopValue(BaseModel):
    stop: _StopTarget


class _FeedbackValue(BaseModel):
    feedback: Literal["up", "down"]
    answer_id: PlatformId
    language: Language = Language.EN


class _ExampleValue(BaseModel):
    example_id: int = Field(ge=1, lt=2**31)  # a proposal's row id (an INTEGER column)
    choice: ClickChoice
    language: Language = Language.EN


class _CommentValue(BaseModel):
    comment_for: PlatformId
    language: Language = Language.EN


class _Action(BaseModel):
    tag: str | None = None
    value: dict[str, Any] | None = None
    form_value: dict[str, Any] | None = None  # a form's inputs, on its submit button's click


class _Context(BaseModel):
    open_message_id: PlatformId = ""
    open_chat_id: PlatformId = ""


class _Header(BaseModel):
    event_id: PlatformId


class _CardActionEvent(BaseModel):
    operator: _Operator
    action: _Action
    context: _Context = _Context()


class ApprovalCardClick(BaseModel):
    """Who clicked which choice on which approval (``event_id``: the callback's, unique per click)."""

    event_id: str
    user: str  # the clicker's open_id
    approval_id: str
    choice: ClickChoice


class AlertCardClick(BaseModel):
    """Who clicked which button on which monitor alert."""

    event_id: str
    user: str  # the clicker's open_id
    alert_id: str
    action: MonitorAction


class StopCardClick(BaseModel):
    """Who clicked Stop on a streaming answer, and the conversation it stops."""

    event_id: str
    user: str
    target: _StopTarget


class FeedbackCardClick(BaseModel):
    event_id: str
    user: str
    answer_id: str
    rating: int
    language: Language
    message_id: str  # the answer card clicked, and its chat: where "what was wrong?" is asked
    chat_id: str


class ExampleCardClick(BaseModel):
    """A click on Approve / Reject of a proposed example's review card."""

    user: str
    proposal_id: int
    approve: bool
    language: Language
    message_id: str  # the review card clicked


class CommentSubmit(BaseModel):
    """A person's answer to "what was wrong?" (the form's Send)."""

    user: str
    answer_id: str
    comment: str
    language: Language


def is_card_action(payload: dict[str, Any]) -> bool:
    header = payload.get("header")
    return isinstance(header, dict) and header.get("event_type") == CARD_ACTION


def parse_card_action(
    payload: dict[str, Any],
) -> ApprovalCardClick | AlertCardClick | StopCardClick | FeedbackCardClick | ExampleCardClick | CommentSubmit | Ignored:
    """The approval or alert click a card action callback carries; Ignored for other card
    actions. Raises MalformedEvent on a callback Feishu does not send."""
    try:
        header = _Header.model_validate(payload.get("header"))
        event = _CardActionEvent.model_validate(payload.get("event"))
    except ValidationError as exc:
        raise MalformedEvent(f"bad {CARD_ACTION} callback: {exc.error_count()} errors") from None
    value = event.action.value or {}
    user = event.operator.open_id
    if "stop" in value:
        try:
            stop = _StopValue.model_validate(value)
        except ValidationError:
            return Ignored("a Stop click without its conversation")
        return StopCardClick(event_id=header.event_id, user=user, target=stop.stop)
    if "feedback" in value:
        try:
            rated = _FeedbackValue.model_validate(value)
        except ValidationError:
            return Ignored("a feedback click without its answer")
        rating = 1 if rated.feedback == "up" else -1
        return FeedbackCardClick(
            event_id=header.event_id,
            user=user,
            answer_id=rated.answer_id,
            rating=rating,
            language=rated.language,
            message_id=event.context.open_message_id,
            chat_id=event.context.open_chat_id,
        )
    if "example_id" in value:
        try:
            example = _ExampleValue.model_validate(value)
        except ValidationError:
            return Ignored("an example decision without its example")
        return ExampleCardClick(
            user=user,
            proposal_id=example.example_id,
            approve=example.choice == "approve",
            language=example.language,
            message_id=event.context.open_message_id,
        )
    if "comment_for" in value:
        try:
            comment = _CommentValue.model_validate(value)
        except ValidationError:
            return Ignored("a comment without its answer")
        text = str((event.action.form_value or {}).get("comment") or "")
        return CommentSubmit(user=user, answer_id=comment.comment_for, comment=text, language=comment.language)
    try:
        approval = _ApprovalValue.model_validate(value)
    except ValidationError:
        pass
    else:
        return ApprovalCardClick(event_id=header.event_id, user=user, approval_id=approval.approval_id, choice=approval.choice)
    try:
        alert = _AlertValue.model_validate(value)
    except ValidationError:
        return Ignored("a card action that is neither an approval choice nor an alert button")
    return AlertCardClick(event_id=header.event_id, user=user, alert_id=alert.alert_id, action=alert.monitor_action)


@dataclass(frozen=True)
class CardActions:
    """Acts on card clicks for both transports: approval choices go to the inbox (through the
    rules every platform shares), alert buttons to the gateway's monitor click handler."""

    accept: AcceptMessage
    approvals: LookupApproval | None = None  # None: approval clicks are answered as unknown
    monitor_actions: ActOnAlert | None = None  # None: alert clicks are answered as unknown
    show_alert: ShowAlert | None = None
    feedback: FeedbackActions | None = None  # None: 👍/👎 clicks are answered as unknown
    ask_what_was_wrong: AskWhatWasWrong | None = None
    show_example_decision: ShowExampleDecision | None = None

    async def answer(self, payload: dict[str, Any], transport: str) -> dict[str, Any]:
        """Act on the click ``payload`` carries; the callback response (a toast, or nothing
        for a card action the bot does not handle). Raises MalformedEvent."""
        click = parse_card_action(payload)
        if isinstance(click, Ignored):
            log.debug("feishu %s: card action ignored: %s", transport, click.reason)
            return {}
        if isinstance(click, AlertCardClick):
            return await self._alert_click(click, transport)
        if isinstance(click, StopCardClick):
            return await self._stop_click(click, transport)
        if isinstance(click, FeedbackCardClick):
            return await self._feedback_click(click, transport)
        if isinstance(click, CommentSubmit):
            return await self._comment(click)
        if isinstance(click, ExampleCardClick):
            return await self._example_decision(click, transport)
        answer = await accept_click(
            self.approvals,
            self.accept,
            platform=PLATFORM,
            approval_id=click.approval_id,
            choice=click.choice,
            user=click.user,
            user_name=None,
            event_id=f"card:{click.event_id}",
        )
        log.info(
            "feishu %s: approval click on %s %s",
            transport,
            click.approval_id,
            "accepted" if answer.accepted else "refused",
        )
        return approval_reply(answer, click.choice)

    async def _stop_click(self, click: StopCardClick, transport: str) -> dict[str, Any]:
        """A Stop goes through the inbox like any event: the worker answering the thread ends
        the turn (once, whichever process holds it)."""
        target = click.target
        thread = ThreadKey(platform=PLATFORM, workspace=target.workspace, channel=target.chat, root=target.root)
        outcome = await self.accept(
            InboundMessage(
                platform=PLATFORM,
                event_id=f"card:{click.event_id}",
                message_id=f"stop:{target.root}:{click.event_id}",
                workspace=target.workspace,
                channel=target.chat,
                thread=thread,
                reply_in_thread=target.reply_in or None,
                user=click.user,
                text="",
                is_dm=target.dm,
                stop=True,
            )
        )
        log.info("feishu %s: stop %s (thread %s)", transport, outcome.value, thread)
        return _toast("success", t(target.language, "Stopping…"))

    async def _feedback_click(self, click: FeedbackCardClick, transport: str) -> dict[str, Any]:
        rating = None
        if self.feedback is not None:
            rating = await self.feedback.rate(FeedbackClick(PLATFORM, click.answer_id, click.user, click.rating))
        log.info("feishu %s: feedback on %s: %s", transport, click.answer_id, rating)
        if rating is None:
            return _toast("warning", t(click.language, "This answer is no longer known."))
        if rating == 0:
            return _toast("success", t(click.language, "Your rating was withdrawn."))
        if rating < 0:
            if self.ask_what_was_wrong is not None and click.message_id:
                # After the callback's answer: a reply card with the optional question.
                task = asyncio.create_task(
                    self.ask_what_was_wrong(click.message_id, click.chat_id, click.answer_id, click.language)
                )
                _ASKING.add(task)
                task.add_done_callback(_ASKING.discard)
            return _toast("success", t(click.language, "Thanks: the team will look at this answer."))
        return _toast("success", t(click.language, "Thanks for the feedback."))

    async def _comment(self, submit: CommentSubmit) -> dict[str, Any]:
        kept = bool(submit.comment.strip()) and self.feedback is not None and await self.feedback.comment(
            PLATFORM, submit.answer_id, submit.user, submit.comment
        )
        log.info("feishu: comment on %s %s", submit.answer_id, "kept" if kept else "not kept")
        return _toast("success", t(submit.language, "Thanks for the feedback."))

    async def _example_decision(self, click: ExampleCardClick, transport: str) -> dict[str, Any]:
        """Record a data owner's decision, then show it on their card; anyone else is told the
        example is not theirs to decide."""
        proposal = None
        if self.feedback is not None:
            proposal = await self.feedback.decide_example(PLATFORM, click.proposal_id, click.approve, click.user)
        log.info("feishu %s: example decision on %d: %s", transport, click.proposal_id,
                 proposal.status if proposal is not None else "refused")  # fmt: skip
        if proposal is None:
            return _toast("warning", t(click.language, "Only the data owners of this source can decide on this example."))
        if self.show_example_decision is not None and click.message_id:
            await self.show_example_decision(click.message_id, proposal, click.language)
        if click.approve:
            return _toast("success", t(click.language, "Approved: search_schema now returns this example."))
        return _toast("success", t(click.language, "Rejected: this example will not be used."))

    async def _alert_click(self, click: AlertCardClick, transport: str) -> dict[str, Any]:
        """Record the click before Feishu gets its answer, then show who acted on the card."""
        acted = None
        if self.monitor_actions is not None:
            acted = await self.monitor_actions(click.alert_id, click.action, click.user)
        log.info("feishu %s: alert click on %s: %s", transport, click.alert_id, "recorded" if acted else "unknown alert")
        if acted is None or acted.alert.platform != PLATFORM:
            return _toast("warning", t(Language.EN, "This alert is no longer known."))
        alert = acted.alert
        if self.show_alert is not None and acted.changed:  # a later click leaves the card as it reads
            await self.show_alert(alert)
        return alert_reply(alert, click.user)


def approval_reply(answer: ClickAnswer, choice: ClickChoice) -> dict[str, Any]:
    """The toast answering an approval click."""
    if answer.accepted:
        done = (
            t(answer.language, "Approved: the query runs now.")
            if choice == "approve"
            else t(answer.language, "Rejected: the query will not run.")
        )
        return _toast("success", done)
    return _toast("warning", answer.note or t(answer.language, "Nothing changed."))


def alert_reply(alert: AlertView, user: str) -> dict[str, Any]:
    """The toast answering ``user``'s click on ``alert`` (as the click left it): what their
    click did, or that someone else acted first."""
    language = alert.language
    until = f"{alert.muted_until:%Y-%m-%d %H:%M}" if alert.muted_until is not None else ""
    muted = alert.status is AlertStatus.MUTED
    if alert.acted_by == user:
        if muted:
            return _toast("success", t(language, "Muted: no alerts from this monitor until {until} UTC.", until=until))
        return _toast("success", t(language, "Acknowledged."))
    if muted:
        return _toast("warning", t(language, "Already done: someone else muted this monitor until {until} UTC.", until=until))
    return _toast("warning", t(language, "Already done: someone else acknowledged this alert."))


def _toast(kind: Literal["success", "warning"], content: str) -> dict[str, Any]:
    return {"toast": {"type": kind, "content": content}}
