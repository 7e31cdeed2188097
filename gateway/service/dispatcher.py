"""Workers that answer inbox events: one turn at a time per thread, many threads at once.

A worker takes a thread's lease, answers its open events oldest first, and lets go. While it
works, a heartbeat keeps the lease alive; if the process dies, the lease expires and any
worker (here or in another process) resumes the thread from what the database holds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping

from opentelemetry import trace

from adapters.base import (
    AnswerStream,
    AnswerStreaming,
    ApprovalPrompts,
    CutAnswerReading,
    LocaleLookup,
    Mentions,
    ProgressDisplay,
    Responder,
)
from agent_core.data.upload_limits import UploadLimits
from agent_core.hooks import TurnObserver
from agent_core.i18n import t
from agent_core.loop import AgentLoop, TurnEnd, TurnResult
from agent_core.messages import (
    ApprovalClick,
    InboundMessage,
    OutboundReply,
    Role,
    StandardMessage,
    TextBlock,
    ToolUseBlock,
    new_id,
)
from agent_core.retry import backoff_delay_s
from agent_core.run_context import RunDeps
from agent_core.store.threads import ThreadStore
from agent_core.toolkit.progress import step_title
from agent_core.toolkit.protocol import ToolResult
from agent_core.tracing import TRACER_NAME
from gateway.service.approval_flow import ApprovalFlow
from gateway.service.attachments import fetch_conversation_tables, ingest_attachments
from gateway.service.earlier_messages import earlier_messages
from gateway.service.inbox import Inbox
from gateway.service.menu import MenuAnswers
from gateway.service.metrics import TURN_DURATION
from gateway.service.outbound import OutboundLedger
from gateway.tables import EventStatus, InboundEventRow

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 5
# How often a running turn looks for a Stop accepted in its thread (by any process).
STOP_POLL_S = 0.5
RESET_COMMANDS = {"new", "reset", "/new", "/reset", "new conversation", "新对话", "重新开始"}

RunDepsFactory = Callable[[InboundMessage, str], RunDeps]
# Ends a turn as stopped, given the answer text written so far and the Stop event.
StopTurn = Callable[[str, InboundMessage], Awaitable[TurnResult]]


class _ProgressObserver(TurnObserver):
    """Forwards a turn's progress to the platform: tool status lines and streamed text."""

    def __init__(self, responder: Responder, msg: InboundMessage, stream: AnswerStream | None) -> None:
        self._progress = responder if isinstance(responder, ProgressDisplay) else None
        self._msg = msg
        self._stream = stream
        self._text = ""
        self._said: list[str] = []  # text written before each tool step

    @property
    def partial(self) -> str:
        """The answer text the model has written in this turn so far (kept when it is stopped)."""
        return "\n\n".join(part for part in [*self._said, self._text] if part.strip())

    async def on_text(self, delta: str) -> None:
        self._text += delta
        if self._stream is not None:
            await self._stream.update(self._text)

    async def on_text_reset(self) -> None:
        self._text = ""

    async def on_tool_start(self, call: ToolUseBlock) -> None:
        if self._text.strip():
            self._said.append(self._text)
        self._text = ""
        if self._progress is not None:
            await self._progress.show_status(self._msg, step_title(call, self._msg.language))

    async def on_tool_end(self, call: ToolUseBlock, result: ToolResult) -> None:
        if result.is_error and self._progress is not None:  # a failed step must not look like a successful one
            kind = result.error_type.value if result.error_type else "error"
            status = t(self._msg.language, "{tool} failed ({kind})", tool=call.name, kind=kind)
            await self._progress.show_status(self._msg, status)


class Dispatcher:
    def __init__(
        self,
        inbox: Inbox,
        ledger: OutboundLedger,
        store: ThreadStore,
        agent: AgentLoop | None,
        responders: Mapping[str, Responder],
        run_deps: RunDepsFactory,
        approvals: ApprovalFlow,
        menu: MenuAnswers,
        concurrency: int = 8,
        lease_seconds: float = 60.0,
        poll_interval_s: float = 1.0,
        upload_limits: UploadLimits | None = None,
        on_capacity: Callable[[bool], None] | None = None,
    ) -> None:
        self._inbox = inbox
        self._ledger = ledger
        self._store = store
        self._agent = agent
        self._responders = responders
        self._run_deps = run_deps
        self._concurrency = concurrency
        self._lease_seconds = lease_seconds
        self._poll_interval_s = poll_interval_s
        self._upload_limits = upload_limits or UploadLimits()
        self._approvals = approvals
        self._menu = menu
        self._process_id = f"{socket.gethostname()}:{os.getpid()}:{new_id()[:8]}"
        self._tasks: list[asyncio.Task[None]] = []
        # Told False when the last free slot is taken and True when one frees again: a
        # supervised worker passes it on to serve, which then stops waking it for new work.
        self._on_capacity = on_capacity
        self._full = False

    def start(self) -> None:
        self._slots = asyncio.Semaphore(self._concurrency)
        # Workers on other replicas hear of new events through the database, not a poll.
        self._tasks = [
            asyncio.create_task(self._claim_loop(), name="dispatcher"),
            asyncio.create_task(self._inbox.listen_for_work(), name="inbox-listener"),
            asyncio.create_task(self._approvals.expire_overdue(), name="approval-expiry"),
        ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._tasks = []

    async def _claim_loop(self) -> None:
        """One task claims work and starts a worker per claimed thread, up to the concurrency.

        A single claimer (rather than every idle worker polling) keeps the database quiet: a
        burst of accepted events wakes one query, not one per worker.
        """
        while True:
            await self._slots.acquire()
            try:
                self._inbox.wakeup.clear()
                claimed = await self._claim_thread()
            except Exception:
                log.exception("dispatcher could not claim work")
                claimed = None
            if claimed is None:
                self._slots.release()
                # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancellation
                # that lands in the same loop iteration as the wakeup, and stop() would hang.
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(self._poll_interval_s):
                        await self._inbox.wakeup.wait()
                continue
            thread_key, owner = claimed
            task = asyncio.create_task(self._work_thread(thread_key, owner))
            self._tasks.append(task)
            task.add_done_callback(self._worker_done)
            if self._slots.locked() and self._on_capacity is not None:
                self._full = True
                self._on_capacity(False)

    def _worker_done(self, task: asyncio.Task[None]) -> None:
        self._slots.release()
        if self._full and self._on_capacity is not None:
            self._full = False
            self._on_capacity(True)
        if task in self._tasks:
            self._tasks.remove(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("dispatcher worker failed", exc_info=task.exception())

    async def _claim_thread(self) -> tuple[str, str] | None:
        owner = f"{self._process_id}/{new_id()[:8]}"
        for thread_key in await self._inbox.threads_with_work():
            if await self._inbox.acquire_lease(thread_key, owner, self._lease_seconds):
                return thread_key, owner
        return None

    async def _work_thread(self, thread_key: str, owner: str) -> None:
        """Answer the thread's open events, oldest first, while holding its lease."""
        heartbeat = asyncio.create_task(self._keep_lease(thread_key, owner))
        try:
            while (row := await self._inbox.next_event(thread_key)) is not None:
                if not await self._answer(row):
                    break  # failed: it waits for its retry time
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat
            await self._inbox.release_lease(thread_key, owner)
            self._inbox.wakeup.set()  # the thread may have more work, or others may be waiting

    async def _keep_lease(self, thread_key: str, owner: str) -> None:
        while True:
            await asyncio.sleep(self._lease_seconds / 3)
            if not await self._inbox.acquire_lease(thread_key, owner, self._lease_seconds):
                log.error("lost the lease on %s", thread_key)

    async def _answer(self, row: InboundEventRow) -> bool:
        """Answer one event; True when it is settled (answered or given up on)."""
        assert row.id is not None
        msg = InboundMessage.model_validate_json(row.payload)
        responder = self._responders.get(msg.platform)
        if responder is None:
            log.error("event %s: platform %s is not configured; dropping it", row.id, msg.platform)
            await self._inbox.finish(row.id, EventStatus.FAILED, "platform not configured")
            return True
        if msg.stop:
            # Nothing left to do: the turn it stopped ended first (`_stoppable`), or none ran.
            await self._inbox.finish(row.id, EventStatus.DONE)
            return True
        await self._inbox.start(row.id)
        if msg.locale is None and isinstance(responder, LocaleLookup):  # here, not on the acknowledgement path
            msg = msg.model_copy(update={"locale": await responder.user_locale(msg.user, msg.workspace)})
        attempt = row.attempts + 1
        delivery_id = f"ev{row.id}"
        try:
            if attempt == 1 and msg.approval is None and isinstance(responder, ProgressDisplay):
                await responder.show_progress(msg)
            reply = await self._reply_for(row, msg, responder, delivery_id)
            if reply is not None:  # None: the turn waits for an approval, or nothing to say
                await self._deliver(row.id, msg, responder, reply, delivery_id)
            if msg.approval is None and isinstance(responder, ProgressDisplay):
                await responder.clear_progress(msg)
            await self._inbox.finish(row.id, EventStatus.DONE)
            return True
        except Exception as exc:
            ref = new_id()[:12]
            log.exception("event %s attempt %d failed (reference %s)", row.id, attempt, ref)
            if attempt < MAX_ATTEMPTS:
                delay = backoff_delay_s(attempt, first_s=1.0, max_s=60.0)
                await self._inbox.retry_later(row.id, delay, f"{type(exc).__name__} ({ref})")
                return False
            await self._inbox.finish(row.id, EventStatus.FAILED, f"{type(exc).__name__} ({ref})")
            with contextlib.suppress(Exception):
                apology = t(msg.language, "Sorry, something went wrong while answering this message. (reference {ref})", ref=ref)
                await responder.deliver(msg, OutboundReply(text=apology), f"{delivery_id}-failed")
            return True

    async def _reply_for(
        self, row: InboundEventRow, msg: InboundMessage, responder: Responder, delivery_id: str
    ) -> OutboundReply | None:
        if msg.approval is not None:
            return await self._decide(row, msg, msg.approval, responder, delivery_id)
        if msg.menu is not None:
            return await self._menu.reply(msg)
        if msg.is_dm and msg.text.strip().lower() in RESET_COMMANDS:
            await self._store.reset(msg.thread)
            return OutboundReply(text=t(msg.language, "Started a fresh conversation. What would you like to analyse?"))
        if self._agent is None:
            return OutboundReply(
                text=t(
                    msg.language,
                    "The analysis model is not configured yet (set ANTHROPIC_API_KEY). Your message was received.",
                )
            )
        thread_id = await self._store.open(msg.thread, dm_owner=msg.user if msg.is_dm else None)
        await self._approvals.withdraw_superseded(thread_id, msg, responder)
        agent = self._agent

        async def stop_turn(partial: str, stop: InboundMessage) -> TurnResult:
            note = t(msg.language, "_Stopped by {who}._", who=_mention(responder, stop.user))
            message = _user_message(thread_id, msg, [])
            return await agent.stop_turn(thread_id, message, msg.dedupe_key, partial, note)

        assert row.id is not None
        if (stop := await self._inbox.stop_after(row.thread_key, row.id)) is not None:
            # Stopped before it ran, or while a process that died was running it: the text
            # that process had shown is all there is of the answer.
            partial = await responder.cut_answer(msg, delivery_id) if isinstance(responder, CutAnswerReading) else ""
            stream = await _open_stream(responder, msg, delivery_id)  # retires what it left
            result = await stop_turn(partial, stop)
            if stream is not None:
                await stream.close()
            return OutboundReply(text=result.text, answer_id=delivery_id)
        deps = self._run_deps(msg, thread_id)
        await fetch_conversation_tables(deps)
        notes = await ingest_attachments(responder, msg, deps, self._upload_limits) if msg.attachments else []
        earlier = await earlier_messages(self._store, responder, msg, thread_id)

        async def turn(observer: TurnObserver) -> TurnResult:
            message = _user_message(thread_id, msg, notes, earlier)
            return await agent.run_turn(thread_id, message, event_key=msg.dedupe_key, deps=deps, observer=observer)

        result = await self._traced(row, msg, thread_id, responder, delivery_id, turn, stop_turn)
        return await self._reply_or_ask(result, msg, thread_id, responder, delivery_id)

    async def _traced(
        self,
        row: InboundEventRow,
        msg: InboundMessage,
        thread_id: str,
        responder: Responder,
        delivery_id: str,
        turn: Callable[[TurnObserver], Awaitable[TurnResult]],
        stop_turn: StopTurn,
    ) -> TurnResult:
        """Run ``turn`` (a new one or a resumed one) with live progress, in a trace span, until
        it ends or a Stop in its thread ends it (`stop_turn`)."""
        stream = await _open_stream(responder, msg, delivery_id)
        observer = _ProgressObserver(responder, msg, stream)
        tracer = trace.get_tracer(TRACER_NAME)
        started = time.perf_counter()
        outcome = "error"
        try:
            with tracer.start_as_current_span("turn", attributes={"ba.platform": msg.platform, "ba.thread_id": thread_id}):
                ended = await self._stoppable(row, turn(observer))
                result = await stop_turn(observer.partial, ended) if isinstance(ended, InboundMessage) else ended
                outcome = "stopped" if isinstance(ended, InboundMessage) else result.end.value
                return result
        finally:
            TURN_DURATION.labels(outcome).observe(time.perf_counter() - started)
            if stream is not None:
                await stream.close()

    async def _stoppable(self, row: InboundEventRow, work: Awaitable[TurnResult]) -> TurnResult | InboundMessage:
        """The turn's result, or the Stop that cancelled it first. Cancelling the turn cancels
        the model stream and any running query (`agent_core.data.interrupt`); the loop saves the
        thread's state on its way out."""
        assert row.id is not None
        task = asyncio.ensure_future(work)
        watcher = asyncio.create_task(self._watch_for_stop(row.thread_key, row.id))
        try:
            await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                return task.result()
            task.cancel()
            await asyncio.wait({task})  # not `await task`: our own cancellation must pass
            if not task.cancelled() and task.exception() is None:
                return task.result()  # it finished before the cancellation reached it
            return watcher.result()
        finally:
            task.cancel()
            watcher.cancel()

    async def _watch_for_stop(self, thread_key: str, row_id: int) -> InboundMessage:
        while True:
            await asyncio.sleep(STOP_POLL_S)
            try:
                stop = await self._inbox.stop_after(thread_key, row_id)
            except Exception:
                log.exception("could not look for a stop in %s", thread_key)
                continue
            if stop is not None:
                return stop

    async def _reply_or_ask(
        self, result: TurnResult, msg: InboundMessage, thread_id: str, responder: Responder, delivery_id: str
    ) -> OutboundReply | None:
        """The answer to post, or None after posting the approval request the turn waits for."""
        if result.approval is None:
            rated = result.end in _RATED  # an answer, not an apology or a budget notice
            return OutboundReply(
                text=result.text,
                files=result.files,
                provenance=result.provenance,
                answer_id=delivery_id if rated else None,
            )
        if not isinstance(responder, ApprovalPrompts):  # nobody could approve it: it stays unrun
            text = t(msg.language, "This query needs an approval, which cannot be given on this platform; it was not run.")
            return OutboundReply(text=text)
        await self._approvals.ask(thread_id, msg, result.approval, responder)
        return None

    async def _decide(
        self,
        row: InboundEventRow,
        click: InboundMessage,
        action: ApprovalClick,
        responder: Responder,
        delivery_id: str,
    ) -> OutboundReply | None:
        """Settle an approval (`ApprovalFlow.decide`) and resume its turn, as the asker, with
        the decision."""
        if self._agent is None:
            return None
        settled = await self._approvals.decide(click, action, responder)
        if settled is None:
            return None
        origin = settled.origin
        thread_id = await self._store.open(origin.thread, dm_owner=origin.user if origin.is_dm else None)
        verdicts = await self._approvals.verdicts(thread_id)
        deps = self._run_deps(origin, thread_id)  # the asker's identity: their policy applies
        await fetch_conversation_tables(deps)
        agent = self._agent

        async def turn(observer: TurnObserver) -> TurnResult:
            return await agent.resume_turn(thread_id, verdicts, deps, observer)

        async def stop_turn(partial: str, stop: InboundMessage) -> TurnResult:
            note = t(origin.language, "_Stopped by {who}._", who=_mention(responder, stop.user))
            message = _user_message(thread_id, origin, [])
            return await agent.stop_turn(thread_id, message, origin.dedupe_key, partial, note)

        result = await self._traced(row, origin, thread_id, responder, delivery_id, turn, stop_turn)
        return await self._reply_or_ask(result, origin, thread_id, responder, delivery_id)

    async def _deliver(
        self, row_id: int, msg: InboundMessage, responder: Responder, reply: OutboundReply, delivery_id: str
    ) -> None:
        pending = await self._ledger.begin(delivery_id, row_id, msg.platform, reply)
        if pending is None:
            return  # posted before a crash; only the bookkeeping was missing
        await responder.deliver(msg, pending.reply, delivery_id, resumed=pending.resumed)
        await self._ledger.mark_sent(delivery_id)


_RATED = frozenset({TurnEnd.ANSWERED, TurnEnd.MAX_TOKENS, TurnEnd.STOPPED})


async def _open_stream(responder: Responder, msg: InboundMessage, delivery_id: str) -> AnswerStream | None:
    """A live answer where the platform streams; None: the answer is posted when it is done."""
    return await responder.open_stream(msg, delivery_id) if isinstance(responder, AnswerStreaming) else None


def _mention(responder: Responder, user: str) -> str:
    """Who `user` is in a note: notified where the platform can, else named by id."""
    return (responder.mention(user).strip() if isinstance(responder, Mentions) else "") or user


def _user_message(
    thread_id: str, msg: InboundMessage, attachment_notes: list[str], earlier: str | None = None
) -> StandardMessage:
    text = msg.text or "(no text)"
    if not msg.is_dm:
        text = f"[from {msg.user_name or msg.user}] {text}"
    if earlier:
        text = f"{earlier}\n\n{text}"
    if attachment_notes:
        text += "\n\nFiles shared with this message:\n" + "\n".join(f"- {n}" for n in attachment_notes)
    return StandardMessage(thread_id=thread_id, role=Role.USER, content=[TextBlock(text=text)])
