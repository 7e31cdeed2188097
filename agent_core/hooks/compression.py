"""Context compression around every model call.

Before a model call the hook estimates the request's size -- the last reported usage plus
offline estimates of the messages stored since (`agent_core.tokens`) -- and, cheapest first:

1. when the prompt cache has expired (nothing is lost by changing old bytes) and the context
   is at least `cold_prune_fill` full, or when it is over the threshold: prunes large tool
   results older than the keep window to placeholders naming their data files;
2. when still over the threshold: summarizes everything before the keep window with the
   model, appends those messages to the thread's history file and records the summary and
   its cutoff in the thread's state.

It then sends the summary and the rest of the history as `ContextState` says (the stored
messages never change). Pruning when over the threshold does not wait for the cache to
expire: the cache is about to be invalidated by a summary anyway, and pruning loses less.

After a model call it keeps the reported context size as the ground truth for the next
estimate (the usage hook, not this one, counts tokens and cost; the summarizer's calls are
passed to it and to telemetry through `summary_observers`). When the API still rejects a
request as too long, the loop calls `on_context_overflow`, which compresses harder, and
retries once.

Order: this hook replaces the request's message list, so hooks that decorate messages (the
refocus reminder) must run after it, and prompt caching after both; hooks that change the
system prompt (memory) or the model (skills) run before it, so its estimate sees them.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Protocol

from agent_core.config import CompressionConfig
from agent_core.context.cutoff import (
    carried_verbatim,
    choose_cutoff,
    round_starts,
    skills_to_forget,
    summary_text,
)
from agent_core.context.history_file import append_history
from agent_core.context.pruning import ContextRenderer, is_prunable, prune_mark
from agent_core.context.summarizer import Summarizer, SummaryFailed
from agent_core.hooks import Hook
from agent_core.messages import StandardMessage
from agent_core.model import ModelClient, ModelResponse, ModelUnavailable, api_prefix
from agent_core.request import ModelRequest
from agent_core.run_context import HistoryView, RunContext
from agent_core.state import ContextState, ThreadState
from agent_core.tokens.estimate import MESSAGE_OVERHEAD, TokenCounter
from agent_core.tokens.prices import ModelTable

log = logging.getLogger(__name__)


class StateSaver(Protocol):
    async def save_state(self, thread_id: str, state: ThreadState) -> None: ...


class CompressionHook(Hook):
    """Keeps each request under the context threshold."""

    def __init__(
        self,
        model: ModelClient,
        *,
        config: CompressionConfig | None = None,
        counter: TokenCounter | None = None,
        models: ModelTable | None = None,
        store: StateSaver | None = None,
        summary_observers: Sequence[Hook] = (),
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        """`store` saves the state right after a compression (a summary costs a model call and
        must survive a crash of the call that follows); `summary_observers` (usage,
        telemetry) see the summarizer's calls as they see the loop's own."""
        self.config = config or CompressionConfig()
        self.counter = counter or TokenCounter()
        self.models = models or ModelTable()
        self.renderer = ContextRenderer(self.config)
        self._model = model
        self._summarizer = Summarizer(model, self.counter, self.config)
        self._store = store
        self._summary_observers = summary_observers
        self._clock = clock
        self._warm = False
        self._learned_windows: dict[str, int] = {}  # limits the API reported below the table's

    # ----------------------------------------------------------------- hook interface

    async def before_run(self, history: list[StandardMessage], ctx: RunContext) -> None:
        if not self._warm:  # load the BPE (~0.3 s) off the event loop, once
            await asyncio.to_thread(getattr, self.counter, "encoding")
            self._warm = True
        ctx.turn.context_fill = ctx.turn.thread.usage.fill

    async def before_model(
        self, request: ModelRequest, history: list[StandardMessage], ctx: RunContext
    ) -> ModelRequest:
        state = ctx.turn.thread
        self._check_marks(history, state)
        window = self.window(request.model)
        config = self.config
        estimate = self.estimate(request, history, state)
        if estimate >= config.threshold * window or (
            self._cache_expired(state) and estimate >= config.cold_prune_fill * window
        ):
            keep_start = choose_cutoff(history, state, self.counter, config, window)
            if keep_start is not None and self._prune(history, state, keep_start):
                estimate = self.full_estimate(request, history, state.context)
        if estimate >= config.threshold * window and await self._summarize(history, ctx, window):
            estimate = self.full_estimate(request, history, state.context)
        ctx.turn.in_flight = HistoryView(len(history), state.context.version)
        ctx.turn.context_fill = estimate / window
        if state.context.summary is None and state.context.pruned_before == 0:
            return request
        return replace(request, messages=self.renderer.messages(history, state.context))

    async def after_model(self, response: ModelResponse, ctx: RunContext) -> None:
        usage = ctx.turn.thread.usage
        usage.model = response.model
        usage.context_window = self.window(response.model)
        in_flight, ctx.turn.in_flight = ctx.turn.in_flight, None
        if in_flight is not None:
            usage.last_request_messages, usage.last_view_version = in_flight.messages, in_flight.context_version
        usage.last_context_tokens = response.usage.context_tokens
        usage.last_request_at = self._clock()
        ctx.turn.context_fill = usage.fill

    async def on_context_overflow(
        self,
        history: Sequence[StandardMessage],
        ctx: RunContext,
        prompt_tokens: int | None = None,
        limit: int | None = None,
    ) -> bool:
        """The API rejected the request as too long: compress harder. True if what is sent
        changed, so one retry makes sense.

        `prompt_tokens` and `limit` are the sizes the error reported, if any. A limit below the
        model table's window (a misconfigured table) is remembered for the model, so later
        requests compress in time instead of overflowing again.
        """
        state = ctx.turn.thread
        before = state.context.version
        model = state.usage.model or self._model.model
        log.warning(
            "thread %s: context overflow (%s of %s tokens; %s at the last accepted request); compressing",
            ctx.thread_id,
            prompt_tokens,
            limit,
            state.usage.last_context_tokens,
        )
        if limit is not None and limit < self.window(model):
            self._learned_windows[model] = limit
        starts = round_starts(history)
        if starts:
            self._prune(history, state, starts[-1])  # everything but the newest round
        await self._summarize(history, ctx, self.window(model), force=True)
        changed = state.context.version != before
        if changed and self._store is not None:
            await self._store.save_state(ctx.thread_id, state)
        return changed

    # ----------------------------------------------------------------- estimates

    def window(self, model: str | None) -> int:
        """The context window of `model` (the agent's model when None)."""
        model = model or self._model.model
        return min(self.models.get(model).context_window, self._learned_windows.get(model, sys.maxsize))

    def estimate(self, request: ModelRequest, history: Sequence[StandardMessage], state: ThreadState) -> int:
        """Tokens of the next request: ground truth plus what was stored since, when the last
        request was rendered the same way; otherwise a full offline estimate."""
        usage = state.usage
        if usage.last_context_tokens is not None and usage.last_view_version == state.context.version:
            return usage.last_context_tokens + self.counter.messages(history[usage.last_request_messages :])
        return self.full_estimate(request, history, state.context)

    def full_estimate(
        self, request: ModelRequest, history: Sequence[StandardMessage], context: ContextState
    ) -> int:
        """Offline estimate of the request as it will be sent under `context`."""
        total = self.counter.prefix(api_prefix(request))
        if context.summary:
            total += MESSAGE_OVERHEAD + self.counter.text(context.summary)
        for index in range(context.summary_through, len(history)):
            message = history[index]
            if index < context.pruned_before and is_prunable(message, self.config):
                rendered = self.renderer.rendered(history, context, index)
                total += self.counter.message(message, "pruned", rendered)
            else:
                total += self.counter.message(message)
        return total

    # ----------------------------------------------------------------- steps

    def _cache_expired(self, state: ThreadState) -> bool:
        last = state.usage.last_request_at
        return last is None or (self._clock() - last).total_seconds() >= self.config.cache_ttl_s

    def _prune(self, history: Sequence[StandardMessage], state: ThreadState, upto: int) -> bool:
        mark = prune_mark(history, state.context, upto, self.config)
        if mark == state.context.pruned_before:
            return False
        state.context.pruned_before = mark
        state.context.version += 1
        return True

    async def _summarize(
        self, history: Sequence[StandardMessage], ctx: RunContext, window: int, *, force: bool = False
    ) -> bool:
        """Summarize up to the keep window; False if nothing could be (the request goes as is)."""
        state = ctx.turn.thread
        context = state.context
        cut = choose_cutoff(history, state, self.counter, self.config, window, force=force)
        if cut is None:
            log.warning("thread %s: over the context threshold, nothing left to summarize", ctx.thread_id)
            return False
        try:
            # The transcript first: the summary names it, and it must exist before it is named.
            path = await append_history(ctx.data_dir, ctx.thread_id, history, context.summary_through, cut)
            model_summary, responses = await self._summarizer.summarize(
                context.model_summary, history[context.summary_through : cut], context.summary_through + 1
            )
        except (ModelUnavailable, SummaryFailed, OSError) as exc:
            log.error("thread %s: compression failed, sending the context as is: %s", ctx.thread_id, exc)
            return False
        for response in responses:
            for observer in self._summary_observers:
                await observer.after_model(response, ctx)
        carried = carried_verbatim(history, cut, state, self.config)
        context.summary = summary_text(model_summary, carried, cut, path)
        context.model_summary = model_summary
        context.summary_through = cut
        context.summary_through_id = history[cut - 1].id
        context.pruned_before = max(context.pruned_before, cut)
        context.version += 1
        context.compressed_at = self._clock()
        state.usage.compression_events += 1
        state.skills.forget_injected(skills_to_forget(history, cut, state))
        log.info(
            "thread %s: summarized messages 1-%d (compression %d)",
            ctx.thread_id,
            cut,
            state.usage.compression_events,
        )
        if self._store is not None:
            await self._store.save_state(ctx.thread_id, state)
        return True

    @staticmethod
    def _check_marks(history: Sequence[StandardMessage], state: ThreadState) -> None:
        """Drop marks that do not match the stored history (e.g. a restored database)."""
        context = state.context
        through = context.summary_through
        if (
            through <= len(history)
            and context.pruned_before <= len(history)
            and (through == 0 or history[through - 1].id == context.summary_through_id)
        ):
            return
        log.error("context marks do not match the stored history; sending it uncompressed")
        state.context = ContextState(version=context.version + 1)
