"""The agent loop: run → step → query → observe, until something ends the turn.

`run_turn` runs a turn: it loads the thread's state, then takes steps. A step queries the
model (the request built from the stored conversation, passed through the hooks) and observes
what it asked for (the tool calls, run through the tool pipeline). Whatever ends a turn -- an
answer, a used-up budget, the step limit, an unreachable model -- is a `TurnEnded` raised where
it is noticed and caught in `run_turn` alone; cancellation (`asyncio.CancelledError`) passes
through, after the state is saved.

Every message is stored as soon as it exists, so a turn interrupted by a crash resumes from
the database: a user message is never stored twice and a finished answer is not asked for
again. Everything else that varies (skills, caching, the dangling-call patch, usage,
telemetry…) is a hook; see `agent_core.hooks` for the order.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, Protocol

from agent_core.governance.approval import ApprovalVerdict
from agent_core.hooks import Hook, TurnObserver
from agent_core.hooks.dangling import close_open_calls
from agent_core.i18n import Language, t
from agent_core.messages import OutboundFile, Role, StandardMessage, TextBlock, ToolResultBlock, ToolUseBlock
from agent_core.model import ContextOverflow, ModelClient, ModelResponse, ModelUnavailable
from agent_core.model_errors import ModelErrorKind
from agent_core.provenance import Provenance
from agent_core.request import build_request
from agent_core.run_context import RunContext, RunDeps, TurnState
from agent_core.state import ApprovalRequest, ThreadState, ThreadUsage
from agent_core.toolkit.pipeline import ToolPipeline
from agent_core.toolkit.protocol import ErrorType, ToolResult, error_observation

log = logging.getLogger(__name__)

# Returns a user-facing message when a token budget is used up, else None.
BudgetCheck = Callable[[RunContext], Awaitable[str | None]]


class ConversationStore(Protocol):
    """What the loop needs of a conversation store: `ThreadStore` (the database) or
    `EphemeralThreadStore` (sub-agents)."""

    def revalidate(self, thread_id: str) -> None: ...

    async def history(self, thread_id: str) -> list[StandardMessage]: ...

    async def api_history(self, thread_id: str) -> list[dict[str, Any]]: ...

    async def has_event(self, thread_id: str, event_key: str) -> bool: ...

    async def append(
        self, thread_id: str, messages: list[StandardMessage], event_key: str | None = None
    ) -> None: ...

    async def load_state(self, thread_id: str) -> ThreadState: ...

    async def save_state(self, thread_id: str, state: ThreadState) -> None: ...


class TurnEnd(StrEnum):
    ANSWERED = "answered"
    MAX_TOKENS = "max_tokens"
    REFUSED = "refused"
    MAX_ITERATIONS = "max_iterations"
    MODEL_UNAVAILABLE = "model_unavailable"
    BUDGET_EXHAUSTED = "budget_exhausted"
    AWAITING_APPROVAL = "awaiting_approval"  # paused: `TurnResult.approval` says for what
    STOPPED = "stopped"  # a person stopped it: the partial answer, marked stopped


_ANSWERS = frozenset({TurnEnd.ANSWERED, TurnEnd.MAX_TOKENS})


@dataclass
class TurnResult:
    text: str
    end: TurnEnd
    model_calls: int = 0
    tool_calls: int = 0
    files: list[OutboundFile] = field(default_factory=list)  # made by tools, posted beside the text
    provenance: Provenance | None = None  # the data the answer used (None: no data, or no answer)
    approval: ApprovalRequest | None = None  # what the paused turn waits for (AWAITING_APPROVAL)


class ToolGate(Protocol):
    """Asked before a tool call runs: the approval it must wait for, or None to run it now
    (`agent_core.toolkit.approval_gate.ApprovalGate`)."""

    async def check(self, call: ToolUseBlock, ctx: RunContext) -> ApprovalRequest | None: ...


# --------------------------------------------------------------------------- endings


class TurnEnded(Exception):
    """The turn is over: `text` is its last word; `post` stores it as the assistant's message
    (an answer from the model is stored already)."""

    def __init__(self, text: str, end: TurnEnd, *, post: bool) -> None:
        super().__init__(text)
        self.text = text
        self.end = end
        self.post = post


class Answered(TurnEnded):
    """The model answered; its stop reason says whether the answer is whole."""

    def __init__(self, text: str, stop_reason: str | None = None, language: Language = Language.EN) -> None:
        if stop_reason == "max_tokens":
            note = t(language, "This answer hit the length limit and was cut off. Ask me to continue.")
            super().__init__(f"{text}\n\n_({note})_", TurnEnd.MAX_TOKENS, post=False)
        elif stop_reason == "refusal":
            super().__init__(text or t(language, "I can't help with that request."), TurnEnd.REFUSED, post=False)
        else:
            super().__init__(text, TurnEnd.ANSWERED, post=False)


class BudgetExhausted(TurnEnded):
    def __init__(self, message: str) -> None:
        super().__init__(message, TurnEnd.BUDGET_EXHAUSTED, post=True)


class StepLimitReached(TurnEnded):
    def __init__(self, steps: int, language: Language) -> None:
        note = t(
            language,
            "I stopped after {steps} steps without reaching an answer. "
            "Try narrowing the question, or ask me to continue.",
            steps=steps,
        )
        super().__init__(note, TurnEnd.MAX_ITERATIONS, post=True)


class AwaitingApproval(TurnEnded):
    """A tool call waits for an approval: the turn pauses with the call open (no result stored)
    and continues in `AgentLoop.resume_turn` once the decision is in."""

    def __init__(self, request: ApprovalRequest) -> None:
        super().__init__("", TurnEnd.AWAITING_APPROVAL, post=False)
        self.request = request


class ModelDown(TurnEnded):
    """The model could not be reached (or the context would not fit even after shrinking)."""

    def __init__(self, cause: ModelUnavailable, language: Language) -> None:
        super().__init__(model_down_text(cause, language), TurnEnd.MODEL_UNAVAILABLE, post=True)


def model_down_text(cause: ModelUnavailable, language: Language) -> str:
    """What the user is told when the model could not answer: the truth about why."""
    if cause.kind.misconfigured:
        return t(
            language,
            "Sorry, I can't answer: the bot is misconfigured (its model settings were rejected). "
            "An admin has been told. (reference {ref})",
            ref=cause.ref_id,
        )
    if cause.kind is ModelErrorKind.OVERLOADED:
        return t(
            language,
            "Sorry, the analysis model is overloaded right now; I retried without success. "
            "Please try again in a few minutes. (reference {ref})",
            ref=cause.ref_id,
        )
    return t(
        language,
        "Sorry, I can't reach the analysis model right now. Please try again in "
        "a few minutes. (reference {ref})",
        ref=cause.ref_id,
    )


# --------------------------------------------------------------------------- the loop


class AgentLoop:
    """Runs turns of one agent (system prompt, tools, model) over stored conversations."""

    def __init__(
        self,
        model: ModelClient,
        tools: ToolPipeline,
        store: ConversationStore,
        system_prompt: str,
        max_iterations: int = 20,
        hooks: list[Hook] | None = None,
        budget: BudgetCheck | None = None,
        gate: ToolGate | None = None,
    ) -> None:
        self.model = model
        self.tools = tools
        self.store = store
        self.system_prompt = system_prompt
        self.max_iterations = max_iterations
        self.hooks = hooks or []
        self.budget = budget
        self.gate = gate

    async def aclose(self) -> None:
        """Release the model client's connections (the loop is not used afterwards)."""
        await self.model.aclose()

    async def run_turn(
        self,
        thread_id: str,
        user_message: StandardMessage,
        event_key: str,
        deps: RunDeps,
        observer: TurnObserver | None = None,
        *,
        billed_to: ThreadUsage | None = None,
    ) -> TurnResult:
        """Answer `user_message` in its thread; safe to call again for the same `event_key`.

        `billed_to`: count the turn's model calls in this usage instead of the thread's own (a
        sub-agent's turn counts in its parent thread's).
        """
        observer = observer or TurnObserver()
        ctx = await self._begin(thread_id, user_message, event_key, deps, billed_to)
        paused = ctx.turn.thread.paused
        if paused is not None:  # the same message again (a retry): it still waits
            return TurnResult("", TurnEnd.AWAITING_APPROVAL, approval=paused)
        return await self._run(thread_id, ctx, observer)

    async def resume_turn(
        self,
        thread_id: str,
        verdicts: Sequence[ApprovalVerdict],
        deps: RunDeps,
        observer: TurnObserver | None = None,
    ) -> TurnResult:
        """Continue a turn paused for approval: the open calls run (an approved one with its
        grant) or get the decision's error, then the turn goes on. Safe to call again: once the
        results are stored, it only continues (or re-reads the stored answer)."""
        observer = observer or TurnObserver()
        self.store.revalidate(thread_id)
        ctx = RunContext.start(deps, TurnState(thread=await self.store.load_state(thread_id)))
        history = await self.store.history(thread_id)
        paused = history[-1].tool_uses() if history and history[-1].role is Role.ASSISTANT else []

        async def close_paused_calls() -> None:
            ctx.turn.thread.paused = None
            if paused:
                await self._observe(thread_id, paused, ctx, observer, verdicts)
            for hook in self.hooks:
                await hook.before_run(await self.store.history(thread_id), ctx)

        return await self._run(thread_id, ctx, observer, close_paused_calls)

    async def stop_turn(
        self, thread_id: str, user_message: StandardMessage, event_key: str, partial: str, note: str
    ) -> TurnResult:
        """End the turn of `event_key` as stopped, once it no longer runs (cancelled, or never
        started): open tool calls get "cancelled" results and `partial` (the answer text written
        so far) followed by `note` is stored as the assistant's message, so the conversation goes
        on from there. A turn that had finished answering keeps its answer. Safe to call again."""
        self.store.revalidate(thread_id)
        state = await self.store.load_state(thread_id)
        if not await self.store.has_event(thread_id, event_key):
            await self.store.append(thread_id, [user_message], event_key=event_key)
        history = await self.store.history(thread_id)
        last = history[-1]
        if last.role is Role.ASSISTANT and not last.tool_uses():
            stopped = last.text.endswith(note)
            return TurnResult(last.text, TurnEnd.STOPPED if stopped else TurnEnd.ANSWERED)
        await close_open_calls(self.store, thread_id, history)
        text = f"{partial.strip()}\n\n{note}" if partial.strip() else note
        await self._say(thread_id, text)
        state.paused = None
        await self.store.save_state(thread_id, state)
        return TurnResult(text, TurnEnd.STOPPED)

    async def _run(
        self,
        thread_id: str,
        ctx: RunContext,
        observer: TurnObserver,
        first: Callable[[], Awaitable[None]] | None = None,
    ) -> TurnResult:
        """Take steps until something ends the turn (after ``first``, when given)."""
        turn = ctx.turn
        try:
            if first is not None:
                await first()
            for _ in range(self.max_iterations):
                await self._step(thread_id, ctx, observer)
            raise StepLimitReached(self.max_iterations, ctx.language)
        except AwaitingApproval as paused:
            turn.thread.paused = paused.request
            return TurnResult("", paused.end, turn.model_calls, turn.tool_calls, approval=paused.request)
        except TurnEnded as ended:
            if ended.post:
                await self._say(thread_id, ended.text)
            # Only an answer from the model shows its data; an apology or a cut-off note does not.
            provenance = Provenance.of(turn.data_used) if ended.end in _ANSWERS else None
            return TurnResult(
                ended.text, ended.end, turn.model_calls, turn.tool_calls, turn.produced_files, provenance
            )
        finally:
            await self.store.save_state(thread_id, turn.thread)

    async def _begin(
        self,
        thread_id: str,
        user_message: StandardMessage,
        event_key: str,
        deps: RunDeps,
        billed_to: ThreadUsage | None,
    ) -> RunContext:
        """The turn's context, its hooks run and its user message stored (once per event)."""
        self.store.revalidate(thread_id)
        turn = TurnState(thread=await self.store.load_state(thread_id), billed_to=billed_to)
        ctx = RunContext.start(deps, turn)
        is_new = not await self.store.has_event(thread_id, event_key)
        if is_new:
            turn.thread.paused = None  # a new message supersedes a pending approval
        elif turn.thread.paused is not None:
            return ctx  # a retry of the message whose turn paused: it still waits
        for hook in self.hooks:  # before the new message: a crash may have left calls open
            await hook.before_run(await self.store.history(thread_id), ctx)
        if is_new:
            await self.store.append(thread_id, [user_message], event_key=event_key)
        return ctx

    async def _step(self, thread_id: str, ctx: RunContext, observer: TurnObserver) -> None:
        """Query the model, store its answer, and observe the tool calls it asked for."""
        history = await self.store.history(thread_id)
        last = history[-1]
        if last.role is Role.ASSISTANT:  # answered before a crash; nothing left to ask
            raise Answered(last.text, language=ctx.language)
        if self.budget is not None and (exhausted := await self.budget(ctx)) is not None:
            raise BudgetExhausted(exhausted)
        response = await self._query(thread_id, history, ctx, observer)
        if response is None:  # the context was shrunk after an overflow: step again
            return
        answer = _assistant_message(thread_id, response)
        await self.store.append(thread_id, [answer])
        calls = answer.tool_uses()
        if response.stop_reason != "tool_use" or not calls:
            raise Answered(answer.text, response.stop_reason, ctx.language)
        await self._observe(thread_id, calls, ctx, observer)

    async def _query(
        self, thread_id: str, history: list[StandardMessage], ctx: RunContext, observer: TurnObserver
    ) -> ModelResponse | None:
        """One model call through the hooks; None if the context overflowed and was shrunk."""
        request = build_request(self.system_prompt, self.tools.specs(), await self.store.api_history(thread_id))
        for hook in self.hooks:
            request = await hook.before_model(request, history, ctx)
        try:
            response = await self.model.complete(request, on_text=observer.on_text, on_restart=observer.on_text_reset)
        except ContextOverflow as exc:
            await self._failed(exc, ctx)
            if ctx.turn.overflow_retried or not await self._shrink(history, ctx, exc):
                raise self._down(exc, ctx.language) from exc
            ctx.turn.overflow_retried = True
            await observer.on_text_reset()
            return None
        except ModelUnavailable as exc:
            await self._failed(exc, ctx)
            raise self._down(exc, ctx.language) from exc
        ctx.turn.model_calls += 1
        ctx.turn.thread.model_calls += 1
        for hook in self.hooks:
            await hook.after_model(response, ctx)
        return response

    async def _observe(
        self,
        thread_id: str,
        calls: list[ToolUseBlock],
        ctx: RunContext,
        observer: TurnObserver,
        verdicts: Sequence[ApprovalVerdict] = (),
    ) -> None:
        """Run the tool calls and store their results for the next step; raises
        `AwaitingApproval` first, before any of them runs, if one must wait for a decision."""
        decided = {v.tool_use_id: v for v in verdicts}
        await self._ask_gate(calls, ctx, decided)
        results = await self._run_tools(calls, ctx, observer, decided)
        ctx.turn.tool_calls += len(results)
        await self.store.append(thread_id, [_tool_results_message(thread_id, results)])
        await self.store.save_state(thread_id, ctx.turn.thread)

    async def _ask_gate(
        self, calls: list[ToolUseBlock], ctx: RunContext, decided: dict[str, ApprovalVerdict]
    ) -> None:
        if self.gate is None:
            return
        for call in calls:
            if call.id in decided or (request := await self.gate.check(call, ctx)) is None:
                continue
            if ctx.turn.billed_to is not None:  # a sub-agent's turn has no thread to ask in
                note = "This query needs an approval in the thread; run it from the main conversation."
                decided[call.id] = ApprovalVerdict(
                    tool_use_id=call.id, approval_id="", approved=False, message=note
                )
                continue
            raise AwaitingApproval(request)

    async def _failed(self, exc: ModelUnavailable, ctx: RunContext) -> None:
        for hook in self.hooks:
            await hook.after_model_error(exc, ctx)

    @staticmethod
    def _down(exc: ModelUnavailable, language: Language) -> ModelDown:
        if exc.kind.misconfigured:
            setting = "ANTHROPIC_API_KEY" if exc.kind is ModelErrorKind.AUTHENTICATION else "BA_MODEL"
            log.error("model call rejected (ref %s): %s; check %s", exc.ref_id, exc, setting)
        else:
            log.error("model unavailable (ref %s): %s", exc.ref_id, exc)
        return ModelDown(exc, language)

    async def _shrink(self, history: list[StandardMessage], ctx: RunContext, exc: ContextOverflow) -> bool:
        shrunk = False
        for hook in self.hooks:
            shrunk |= await hook.on_context_overflow(history, ctx, exc.prompt_tokens, exc.limit)
        return shrunk

    async def _run_tools(
        self,
        calls: list[ToolUseBlock],
        ctx: RunContext,
        observer: TurnObserver,
        decided: dict[str, ApprovalVerdict],
    ) -> list[ToolResult]:
        """Run the calls of one model turn; results come back in the order of the calls.

        A call with an approval decision runs with its grant (``ctx.approval_id``) or, refused,
        gets the decision as its error result."""
        results: dict[str, ToolResult] = {}
        to_run: list[ToolUseBlock] = []
        for call in calls:
            await observer.on_tool_start(call)
            verdict = decided.get(call.id)
            if verdict is not None and not verdict.approved:
                results[call.id] = _not_approved(call, verdict)
                continue
            for hook in self.hooks:
                refused = await hook.before_tool(call, ctx)
                if refused is not None:
                    results[call.id] = refused
                    break
            else:
                to_run.append(call)
        granted = [call for call in to_run if call.id in decided]
        plain = [call for call in to_run if call.id not in decided]
        for call, result in zip(plain, await self.tools.execute_many(plain, ctx), strict=True):
            results[call.id] = result
        for call in granted:
            results[call.id] = await self.tools.execute(call, replace(ctx, approval_id=decided[call.id].approval_id))
        ordered = []
        for call in calls:
            result = results[call.id]
            for hook in self.hooks:
                result = await hook.after_tool(call, result, ctx)
            await observer.on_tool_end(call, result)
            ordered.append(result)
        return ordered

    async def _say(self, thread_id: str, text: str) -> None:
        await self.store.append(
            thread_id,
            [StandardMessage(thread_id=thread_id, role=Role.ASSISTANT, content=[TextBlock(text=text)])],
        )


def _not_approved(call: ToolUseBlock, verdict: ApprovalVerdict) -> ToolResult:
    observation = error_observation(call, ErrorType.PERMISSION_DENIED, verdict.message, code="NOT_APPROVED")
    return ToolResult(
        tool_use_id=call.id,
        tool_name=call.name,
        observation=observation,
        is_error=True,
        error_type=ErrorType.PERMISSION_DENIED,
        error_code="NOT_APPROVED",
    )


def _assistant_message(thread_id: str, response: ModelResponse) -> StandardMessage:
    content = response.content or [TextBlock(text="(no answer)")]
    return StandardMessage(thread_id=thread_id, role=Role.ASSISTANT, content=content)


def _tool_results_message(thread_id: str, results: list[ToolResult]) -> StandardMessage:
    blocks = [
        ToolResultBlock(tool_use_id=r.tool_use_id, content=r.observation, is_error=r.is_error)
        for r in results
    ]
    return StandardMessage(thread_id=thread_id, role=Role.USER, content=blocks)
