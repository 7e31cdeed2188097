"""Context windows and list prices per model, and what one request's usage costs.

Budgets count tokens the way they are billed (:func:`budget_tokens`): cache reads at a tenth,
cache writes at 1.25 times the input price.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ModelInfo(BaseModel):
    """Context window and list prices (USD per million tokens) of one model family."""

    model_config = ConfigDict(frozen=True)

    context_window: int = Field(200_000, gt=0)
    input_usd_per_mtok: float = Field(3.0, ge=0)
    output_usd_per_mtok: float = Field(15.0, ge=0)
    cache_write_multiplier: float = 1.25  # 5-minute cache writes, of the input price
    cache_read_multiplier: float = 0.1  # of the input price
    # Prompt-length pricing: a request whose prompt (input + cache read + cache write) is
    # longer than this pays every rate times the multiplier.
    long_prompt_tokens: int | None = None
    long_prompt_multiplier: float = 1.0


def _model(window: int, input_usd: float, output_usd: float, read: float = 0.1, **extra: Any) -> ModelInfo:
    return ModelInfo(
        context_window=window,
        input_usd_per_mtok=input_usd,
        output_usd_per_mtok=output_usd,
        cache_read_multiplier=read,
        **extra,
    )


# List prices from Anthropic's pricing page (checked against it for the 5.x families, late
# 2026). Keys are model-name prefixes; the longest matching prefix wins, so dated snapshots
# ("claude-opus-4-1-20250805") resolve to their family. Operators override or extend the table
# through configuration when prices change.
DEFAULT_MODELS: Mapping[str, ModelInfo] = {
    "claude-fable-5-1": _model(1_000_000, 10.0, 50.0, read=0.025),
    "claude-mythos-5-1": _model(1_000_000, 10.0, 50.0, read=0.025),
    "claude-fable-5": _model(1_000_000, 10.0, 50.0),
    "claude-mythos-5": _model(1_000_000, 10.0, 50.0),
    "claude-opus-5-5": _model(1_000_000, 4.0, 20.0, read=0.05),
    "claude-opus-5": _model(1_000_000, 5.0, 25.0),
    "claude-opus-4-8": _model(1_000_000, 5.0, 25.0),
    "claude-opus-4-7": _model(1_000_000, 5.0, 25.0),
    "claude-opus-4-6": _model(1_000_000, 5.0, 25.0),
    "claude-opus-4-5": _model(200_000, 5.0, 25.0),
    "claude-opus-4-1": _model(200_000, 15.0, 75.0),
    "claude-opus-4": _model(200_000, 15.0, 75.0),
    "claude-sonnet-5-5": _model(1_000_000, 2.0, 10.0, read=0.05),
    "claude-sonnet-5": _model(1_000_000, 2.0, 10.0),
    "claude-sonnet-4-6": _model(1_000_000, 3.0, 15.0),
    "claude-sonnet-4": _model(200_000, 3.0, 15.0),
    "claude-haiku-5-5": _model(1_000_000, 0.10, 0.50, long_prompt_tokens=100_000, long_prompt_multiplier=5.0),
    "claude-haiku-4-5": _model(200_000, 1.0, 5.0),
    "claude-3-7-sonnet": _model(200_000, 3.0, 15.0),
    "claude-3-5-haiku": _model(200_000, 0.8, 4.0),
    "claude-3-haiku": _model(200_000, 0.25, 1.25),
}
# Unknown models: a 200k window (the smallest current one: compress early rather than
# overflow) and mid-range prices, so cost is neither hidden nor inflated.
FALLBACK_MODEL = ModelInfo()


class ModelTable:
    """Context windows and prices per model: the defaults, overridden by configuration."""

    def __init__(self, overrides: Mapping[str, ModelInfo] | None = None) -> None:
        self._models = {**DEFAULT_MODELS, **(overrides or {})}
        self._by_length = sorted(self._models, key=len, reverse=True)

    def get(self, model: str | None) -> ModelInfo:
        """The entry whose key is the longest prefix of `model`, else the fallback."""
        for prefix in self._by_length:
            if model and model.startswith(prefix):
                return self._models[prefix]
        return FALLBACK_MODEL


def cost_usd(
    info: ModelInfo, *, input_tokens: int, output_tokens: int, cache_read_tokens: int, cache_write_tokens: int
) -> float:
    """List-price cost of one request's usage."""
    prompt = input_tokens + cache_read_tokens + cache_write_tokens
    long_prompt = info.long_prompt_tokens is not None and prompt > info.long_prompt_tokens
    scale = info.long_prompt_multiplier if long_prompt else 1.0
    weighted_input = (
        input_tokens
        + cache_write_tokens * info.cache_write_multiplier
        + cache_read_tokens * info.cache_read_multiplier
    )
    return scale * (weighted_input * info.input_usd_per_mtok + output_tokens * info.output_usd_per_mtok) / 1e6


def billed_input_tokens(input_tokens: int, cache_write_tokens: int, cache_read_tokens: int) -> float:
    """Input tokens as billed, in plain-input equivalents: input + 1.25 x write + 0.1 x read."""
    return input_tokens + 1.25 * cache_write_tokens + 0.1 * cache_read_tokens


def budget_tokens(
    input_tokens: int, output_tokens: int, cache_write_tokens: int, cache_read_tokens: int
) -> int:
    """Tokens as budgets count them: billed input equivalents plus output tokens.

    Cache reads count at a tenth, as they are billed: a long cached conversation should not
    exhaust a budget ten times faster than its cost warrants.
    """
    return int(billed_input_tokens(input_tokens, cache_write_tokens, cache_read_tokens) + output_tokens)
