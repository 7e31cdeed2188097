"""The agent loop: call the model, run the tools it asks for, repeat until it answers.

Every message is stored as soon as it exists, so a turn interrupted by a crash resumes from
the database: a user message is never stored twice and a finished answer is not asked for
again. Everything else that varies (skills, caching, the dangling-call patch, telemetry…) is a
hook; see `agent_core.hooks` for the order.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from agent_core.hooks import Hook, TurnObserver
from agent_core.messages import Role, StandardMessage, TextBlock, ToolResultBlock, ToolUseBlock
from agent_core.model import ContextOverflow, ModelClient, ModelResponse, ModelUnavailable
from agent_core.request import build_request
from agent_core.state import ThreadState
from agent_core.tools.base import ToolContext, ToolRegistry, ToolResult

log = logging.getLogger(__name__)

# Returns a user-facing message when a token budget is used up, else None.
BudgetCheck = Callable[[ToolContext], Awaitable[str | None]]


class ConversationStore(Protocol):
    """What the loop needs of a conversation store: `ThreadStore` (the database) or
    `MemoryThreadStore` (sub-agents)."""

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


@dataclass
class TurnResult:
    text: str
    end: TurnEnd
    model_calls: int = 0
    tool_calls: int = 0


class AgentLoop:
    """Runs turns of one agent (system prompt, tools, model) over stored conversations."""

    def __init__(
        self,
        model: ModelClient,
        tools: ToolRegistry,
        store: ConversationStore,
        system_prompt: str,
        max_iterations: int = 20,
        hooks: list[Hook] | None = None,
        budget: BudgetCheck | None = None,
    ) -> None:
        self.model = model
        self.tools = tools
        self.store = store
        self.system_prompt = system_prompt
        self.max_iterations = max_iterations
        self.hooks = hooks or []
        self.budget = budget

    async def run_turn(
        self,
        thread_id: str,
        user_message: StandardMessage,
        event_key: str,
        ctx: ToolContext,
        observer: TurnObserver | None = None,
    ) -> TurnResult:
        """Answer `user_message` in its thread; safe to call again for the same `event_key`."""
        observer = observer or TurnObserver()
        self.store.revalidate(thread_id)
        ctx.state = await self.store.load_state(thread_id)
        is_new = not await self.store.has_event(thread_id, event_key)
        for hook in self.hooks:  # before the new message: a crash may have left calls open
            await hook.before_run(await self.store.history(thread_id), ctx)
        if is_new:
            await self.store.append(thread_id, [user_message], event_key=event_key)

        model_calls = tool_calls = 0
        overflow_retried = False
        try:
            for _ in range(self.max_iterations):
                history = await self.store.history(thread_id)
                last = history[-1]
                if last.role is Role.ASSISTANT:  # answered before a crash; nothing left to ask
                    return TurnResult(last.text, TurnEnd.ANSWERED, model_calls, tool_calls)

                if self.budget is not None and (exhausted := await self.budget(ctx)) is not None:
                    await self._say(thread_id, exhausted)
                    return TurnResult(exhausted, TurnEnd.BUDGET_EXHAUSTED, model_calls, tool_calls)
                request = build_request(
                    self.system_prompt, self.tools.specs(), await self.store.api_history(thread_id)
                )
                for hook in self.hooks:
                    request = await hook.before_model(request, history, ctx)
                try:
                    response = await self.model.complete(
                        request, on_text=observer.on_text, on_restart=observer.on_text_reset
                    )
                except ContextOverflow as exc:
                    if not overflow_retried and await self._shrink(history, ctx, exc):
                        overflow_retried = True
                        await observer.on_text_reset()
                        continue
                    return await self._unavailable(thread_id, exc, model_calls, tool_calls)
                except ModelUnavailable as exc:
                    return await self._unavailable(thread_id, exc, model_calls, tool_calls)
                model_calls += 1
                ctx.state.model_calls += 1
                for hook in self.hooks:
                    await hook.after_model(response, ctx)

                answer = _assistant_message(thread_id, response)
                await self.store.append(thread_id, [answer])
                calls = answer.tool_uses()
                if response.stop_reason == "tool_use" and calls:
                    results = await self._run_tools(calls, ctx, observer)
                    tool_calls += len(results)
                    await self.store.append(thread_id, [_tool_results_message(thread_id, results)])
                    await self.store.save_state(thread_id, ctx.state)
                    continue
                return _finish(answer.text, response.stop_reason, model_calls, tool_calls)

            note = (
                f"I stopped after {self.max_iterations} steps without reaching an answer. "
                "Try narrowing the question, or ask me to continue."
            )
            await self._say(thread_id, note)
            return TurnResult(note, TurnEnd.MAX_ITERATIONS, model_calls, tool_calls)
        finally:
            await self.store.save_state(thread_id, ctx.state)

    async def _shrink(self, history: list[StandardMessage], ctx: ToolContext, exc: ContextOverflow) -> bool:
        shrunk = False
        for hook in self.hooks:
            shrunk |= await hook.on_context_overflow(history, ctx, exc.prompt_tokens, exc.limit)
        return shrunk

    async def _unavailable(
        self, thread_id: str, exc: ModelUnavailable, model_calls: int, tool_calls: int
    ) -> TurnResult:
        log.error("model unavailable (ref %s): %s", exc.ref_id, exc)
        apology = (
            "Sorry, I can't reach the analysis model right now. Please try again in "
            f"a few minutes. (reference {exc.ref_id})"
        )
        await self._say(thread_id, apology)
        return TurnResult(apology, TurnEnd.MODEL_UNAVAILABLE, model_calls, tool_calls)

    async def _run_tools(
        self, calls: list[ToolUseBlock], ctx: ToolContext, observer: TurnObserver
    ) -> list[ToolResult]:
        """Run the calls of one model turn; results come back in the order of the calls."""
        results: dict[str, ToolResult] = {}
        to_run: list[ToolUseBlock] = []
        for call in calls:
            await observer.on_tool_start(call)
            for hook in self.hooks:
                refused = await hook.before_tool(call, ctx)
                if refused is not None:
                    results[call.id] = refused
                    break
            else:
                to_run.append(call)
        for call, result in zip(to_run, await self.tools.execute_many(to_run, ctx), strict=True):
            results[call.id] = result
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


def _assistant_message(thread_id: str, response: ModelResponse) -> StandardMessage:
    content = response.content or [TextBlock(text="(no answer)")]
    return StandardMessage(thread_id=thread_id, role=Role.ASSISTANT, content=content)


def _tool_results_message(thread_id: str, results: list[ToolResult]) -> StandardMessage:
    blocks = [
        ToolResultBlock(tool_use_id=r.tool_use_id, content=r.observation, is_error=r.is_error)
        for r in results
    ]
    return StandardMessage(thread_id=thread_id, role=Role.USER, content=blocks)


def _finish(text: str, stop_reason: str | None, model_calls: int, tool_calls: int) -> TurnResult:
    if stop_reason == "max_tokens":
        note = "\n\n_(This answer hit the length limit and was cut off. Ask me to continue.)_"
        return TurnResult(text + note, TurnEnd.MAX_TOKENS, model_calls, tool_calls)
    if stop_reason == "refusal":
        return TurnResult(
            text or "I can't help with that request.", TurnEnd.REFUSED, model_calls, tool_calls
        )
    return TurnResult(text, TurnEnd.ANSWERED, model_calls, tool_calls)
