"""What the thread-as-context step costs a turn, without the network: converting a Slack thread
(`conversations.replies` pages as Slack returns them) to earlier messages and rendering them
within the token bound, for threads of 30, 300 and 3,000 messages of realistic mixed content
(people's messages, another app's alerts with legacy attachments, pasted tables).

Per size it prints the thread's raw estimated tokens, the rendered block's tokens (bounded by
`agent_core.thread_context.CONTEXT_TOKENS`), how many messages were left out, and the time to
convert and render (p50 / max of the repetitions; the token estimate's BPE table is loaded
before timing, as a worker has it loaded after its first turn). The fetch itself is one
`conversations.replies` call per 200 messages.

    .venv/bin/python bench/thread_context.py [--repeat 20]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from adapters.slack.thread_context import _convert  # noqa: E402
from agent_core.thread_context import ThreadContext, render  # noqa: E402
from agent_core.tokens.estimate import TokenCounter  # noqa: E402

ALERT = {
    "fallback": "[Triggered] GMV anomaly: East China / app",
    "title": "[Triggered] GMV anomaly: East China / app",
    "text": "gmv fell 41% below its forecast (expected 1.02M, observed 0.60M)",
    "fields": [{"title": "Region", "value": "East China", "short": True}, {"title": "Channel", "value": "app"}],
    "footer": "Alerting",
}


def thread(size: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for n in range(size):
        ts = f"{1_700_000_000 + n}.000100"
        if n % 10 == 5:
            messages.append({"type": "message", "subtype": "bot_message", "bot_id": "B0A", "username": "Alerting",
                             "text": "", "attachments": [ALERT], "ts": ts})  # fmt: skip
        elif n % 10 == 7:
            table = "\n".join(f"region {r} | {1000 + 37 * r}" for r in range(12))
            messages.append({"type": "message", "user": "U2", "text": table, "ts": ts})
        else:
            text = f"message {n}: I looked at the dashboard again and the drop seems to start at 02:00, " * 3
            messages.append({"type": "message", "user": f"U{n % 5}", "text": text, "ts": ts})
    return messages


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    counter = TokenCounter()
    counter.text("warm up")  # loads the BPE table
    print(f"{'messages':>8} {'raw tokens':>11} {'rendered':>9} {'left out':>9} {'p50 ms':>8} {'max ms':>8}")
    for size in (30, 300, 3000):
        raw = thread(size)
        times: list[float] = []
        block = ""
        left_out = 0
        for _ in range(args.repeat):
            started = time.perf_counter()
            context = ThreadContext(messages=[_convert(m, "UBOT", "B0BOT") for m in raw])
            block = render(context, counter.text) or ""
            times.append((time.perf_counter() - started) * 1000)
            note = re.search(r"\[… (\d+) earlier messages", block)
            left_out = int(note.group(1)) if note else 0
        raw_tokens = sum(counter.text(m.text) for m in context.messages)
        print(f"{size:>8} {raw_tokens:>11} {counter.text(block):>9} {left_out:>9} "
              f"{statistics.median(times):>8.1f} {max(times):>8.1f}")  # fmt: skip


if __name__ == "__main__":
    main()
