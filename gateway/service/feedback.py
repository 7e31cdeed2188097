"""Feedback on answers: 👍/👎 stored per answer and person (a click toggles, the latest counts),
the optional "what was wrong?" kept with it, and the examples a 👍 proposes.

A 👍 on an answer whose numbers came from SQL on a data source (its provenance says which
queries ran where) proposes each such query with the question as a verified example; the
source's data owners (`owners` in the access policy) are asked in a DM, and an operator can
decide with `ba-agent examples review`. Nothing is searched before a person confirms it.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

from sqlalchemy import func, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlmodel import col, select

from adapters.base import ExampleReview, FeedbackClick, Responder
from agent_core.catalog.learned import LearnedExamples, Proposal, ProposalStatus
from agent_core.governance.policy import AccessPolicy
from agent_core.i18n import Language
from agent_core.messages import InboundMessage, OutboundReply, utcnow
from agent_core.provenance import UPLOADS_SOURCE
from gateway.feedback_tables import AnswerFeedbackRow
from gateway.tables import InboundEventRow, OutboundDeliveryRow

# What a typed comment loses before it is stored: control characters other than line breaks
# and tabs. PostgreSQL refuses a NUL in text, and an escape sequence would reach the terminal
# of whoever reads the comments with `ba-agent feedback`.
_UNPRINTABLE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Answer:
    """An answer the bot delivered and the message it answered."""

    answer_id: str
    asked: InboundMessage
    reply: OutboundReply


@dataclass(frozen=True)
class FeedbackSummary:
    answer_id: str
    thread_key: str
    helpful: int
    not_helpful: int
    comments: list[str]
    updated_at: str


class FeedbackStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self._engine = engine
        self._insert = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert

    async def answer(self, answer_id: str) -> Answer | None:
        stmt = (
            select(col(OutboundDeliveryRow.reply), col(InboundEventRow.payload))
            .join(InboundEventRow, col(InboundEventRow.id) == col(OutboundDeliveryRow.event_row_id))
            .where(col(OutboundDeliveryRow.id) == answer_id)
        )
        async with self._engine.connect() as conn:
            row = (await conn.execute(stmt)).first()
        if row is None:
            return None
        return Answer(answer_id, InboundMessage.model_validate_json(row[1]), OutboundReply.model_validate_json(row[0]))

    async def rate(self, click: FeedbackClick, answer: Answer) -> int:
        """Store the click: the same rating again withdraws it (0). The rating now."""
        key = (
            col(AnswerFeedbackRow.answer_id) == click.answer_id,
            col(AnswerFeedbackRow.platform) == click.platform,
            col(AnswerFeedbackRow.user) == click.user,
        )
        async with self._engine.begin() as conn:
            before = (await conn.execute(select(col(AnswerFeedbackRow.rating)).where(*key))).scalar()
            rating = 0 if before == click.rating else click.rating
            now = utcnow()
            record = self._insert(AnswerFeedbackRow).values(
                answer_id=click.answer_id,
                platform=click.platform,
                workspace=answer.asked.workspace,
                channel=answer.asked.channel,
                thread_key=str(answer.asked.thread),
                user=click.user,
                rating=rating,
                created_at=now,
                updated_at=now,
            )
            await conn.execute(
                record.on_conflict_do_update(
                    index_elements=["answer_id", "platform", "user"], set_={"rating": rating, "updated_at": now}
                )
            )
        return rating

    async def comment(self, platform: str, answer_id: str, user: str, text: str) -> bool:
        async with self._engine.begin() as conn:
            result = await conn.execute(
                update(AnswerFeedbackRow)
                .where(
                    col(AnswerFeedbackRow.answer_id) == answer_id,
                    col(AnswerFeedbackRow.platform) == platform,
                    col(AnswerFeedbackRow.user) == user,
                )
                .values(comment=_UNPRINTABLE.sub("", text).strip()[:3000] or None, updated_at=utcnow())
            )
        return bool(result.rowcount)

    async def summaries(self, limit: int = 50) -> list[FeedbackSummary]:
        """The answers rated most recently, newest last: counts of the current ratings and the comments."""
        async with self._engine.connect() as conn:
            rows = (
                await conn.execute(select(AnswerFeedbackRow).order_by(col(AnswerFeedbackRow.updated_at)))
            ).mappings().all()
        by_answer: dict[str, list] = {}
        for row in rows:
            by_answer.setdefault(row["answer_id"], []).append(row)
        summaries = [
            FeedbackSummary(
                answer_id=answer_id,
                thread_key=group[0]["thread_key"],
                helpful=sum(1 for r in group if r["rating"] > 0),
                not_helpful=sum(1 for r in group if r["rating"] < 0),
                comments=[f"{r['platform']}:{r['user']}: {r['comment']}" for r in group if r["comment"]],
                updated_at=f"{max(r['updated_at'] for r in group):%Y-%m-%d %H:%M}",
            )
            for answer_id, group in by_answer.items()
        ]
        return sorted(summaries, key=lambda s: s.updated_at)[-limit:]

    async def totals(self) -> dict[str, int]:
        """How many current 👍 and 👎 there are (for /metrics)."""
        stmt = select(col(AnswerFeedbackRow.rating), func.count()).group_by(col(AnswerFeedbackRow.rating))
        async with self._engine.connect() as conn:
            counts = {rating: count for rating, count in await conn.execute(stmt)}
        return {"helpful": counts.get(1, 0), "not_helpful": counts.get(-1, 0)}


class Feedback:
    """The gateway's `adapters.base.FeedbackActions`."""

    def __init__(
        self,
        store: FeedbackStore,
        learned: LearnedExamples,
        policy: AccessPolicy | None,
        responders: Mapping[str, Responder],
    ) -> None:
        self._store = store
        self._learned = learned
        self._policy = policy
        self._responders = responders
        self._asking: set[asyncio.Task[None]] = set()

    async def rate(self, click: FeedbackClick) -> int | None:
        answer = await self._store.answer(click.answer_id)
        if answer is None or answer.asked.platform != click.platform:
            return None
        rating = await self._store.rate(click, answer)
        if rating > 0:
            try:
                await self._propose(answer, f"{click.platform}:{click.user}")
            except Exception:  # the rating is stored; a proposal is a bonus
                log.exception("could not propose an example from answer %s", click.answer_id)
        return rating

    async def comment(self, platform: str, answer_id: str, user: str, text: str) -> bool:
        return await self._store.comment(platform, answer_id, user, text)

    async def decide_example(self, platform: str, proposal_id: int, approve: bool, user: str) -> Proposal | None:
        proposal = await self._learned.get(proposal_id)
        if proposal is None or f"{platform}:{user}" not in self.owners(proposal.source):
            return None
        return await self._learned.decide(proposal_id, approve, f"{platform}:{user}")

    def owners(self, source: str) -> list[str]:
        rules = self._policy.sources.get(source) if self._policy is not None else None
        return list(rules.owners) if rules is not None else []

    async def _propose(self, answer: Answer, who: str) -> None:
        provenance = answer.reply.provenance
        if provenance is None or not answer.asked.text.strip():
            return
        for access in provenance.accesses:
            if access.source == UPLOADS_SOURCE or "," in access.source or not access.sql.strip():
                continue  # a conversation's own files, or a query over several sources
            proposal = await self._learned.propose(answer.answer_id, answer.asked.text, access.sql, access.source, who)
            if proposal is None or proposal.status is not ProposalStatus.PENDING:
                continue  # proposed before, by an earlier 👍
            log.info("example %d proposed from answer %s (source %s)", proposal.id, answer.answer_id, access.source)
            # After the click's acknowledgement: the proposal is stored, the DMs are a courtesy
            # (`ba-agent examples review` lists it either way).
            task = asyncio.create_task(self._ask_owners(proposal, answer.asked.workspace, answer.asked.language))
            self._asking.add(task)
            task.add_done_callback(self._asking.discard)

    async def _ask_owners(self, proposal: Proposal, workspace: str, language: Language) -> None:
        for owner in self.owners(proposal.source):
            platform, _, owner_id = owner.partition(":")
            responder = self._responders.get(platform)
            try:
                if isinstance(responder, ExampleReview):  # elsewhere `ba-agent examples review` decides
                    await responder.ask_example_review(workspace, owner_id, proposal, language)
            except Exception:
                log.exception("could not ask %s to review example %d", owner, proposal.id)
