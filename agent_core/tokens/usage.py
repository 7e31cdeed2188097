"""A thread's usage: each request's reported tokens added to its totals, and shown as text."""

from __future__ import annotations

from agent_core.state import ThreadUsage
from agent_core.tokens.prices import FALLBACK_MODEL, ModelInfo, budget_tokens, cost_usd


def record_usage(
    usage: ThreadUsage,
    info: ModelInfo,
    *,
    input_tokens: int,
    output_tokens: int,
    cache_read_tokens: int,
    cache_write_tokens: int,
) -> None:
    """Add one request's reported usage to the thread's totals and estimated cost."""
    usage.requests += 1
    usage.input_tokens += input_tokens
    usage.output_tokens += output_tokens
    usage.cache_read_tokens += cache_read_tokens
    usage.cache_write_tokens += cache_write_tokens
    usage.cost_usd += cost_usd(
        info,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cache_read_tokens=cache_read_tokens,
        cache_write_tokens=cache_write_tokens,
    )


def usage_lines(usage: ThreadUsage) -> list[str]:
    """Human-readable per-thread usage, for ``ba-agent stats --thread``."""
    window = usage.context_window or FALLBACK_MODEL.context_window
    current = usage.last_context_tokens or 0
    read_share = usage.cache_read_tokens / max(
        1, usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
    )
    spent = budget_tokens(
        usage.input_tokens, usage.output_tokens, usage.cache_write_tokens, usage.cache_read_tokens
    )
    return [
        f"model            {usage.model or '-'} (context window {window:,})",
        f"context          {current:,} tokens at the last request ({current / window:.0%} full)",
        f"requests         {usage.requests:,} (compressions: {usage.compression_events})",
        f"input tokens     {usage.input_tokens:,} uncached, {usage.cache_write_tokens:,} cache write, "
        f"{usage.cache_read_tokens:,} cache read ({read_share:.0%} read from cache)",
        f"output tokens    {usage.output_tokens:,}",
        f"billed tokens    {spent:,} (input equivalents + output)",
        f"estimated cost   ${usage.cost_usd:,.4f}",
    ]
