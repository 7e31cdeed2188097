"""How soon a Slack user sees the bot react, and sees the answer start.

The real `ba-agent serve` (HTTP events, its worker processes, SQLite) answers signed Slack
events; Slack and the model are the local fakes. The fake model streams like a live one: the
first token after FIRST_TOKEN_S, then TOKENS_PER_S. Each event goes to its own channel, a few
per second, and per event we time from just before its POST:

- first sign: the first call that shows the user something in the chat (the progress
  reaction, an assistant status, the stream's start, a posted reply);
- first text: the first call carrying answer text (the stream's first markdown).

Prints p50 and p99 of each. Target: first sign under 300 ms.

    .venv/bin/python bench/feedback.py [--events 50] [--rate 2]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.anthropic_api import FakeAnthropic, Reply, text  # noqa: E402
from tests.fakes.slack_api import FakeSlack, SlackCall  # noqa: E402
from tests.fakes.slack_events import app_mention  # noqa: E402
from tests.harness import SIGNING_SECRET  # noqa: E402
from tests.serve_process import (  # noqa: E402
    clean_env,
    free_port,
    post_event,
    start,
    stop,
    wait_healthy,
    wait_workers_ready,
)

FIRST_TOKEN_S = 0.5
TOKENS_PER_S = 50
CHARS_PER_TOKEN = 4
CHUNK_CHARS = 24  # the fake model's text delta size
TARGET_FIRST_SIGN_MS = 300
ANSWER = (
    "GMV in **East China** fell 38% on Oct 20 against the four weeks before. Most of the drop "
    "came from new customers on mobile, where checkout errors tripled after the 19:00 release; "
    "returning customers and desktop were flat. Rolling the release back should recover about "
    "30 points of the 38."
)
SIGN_METHODS = frozenset(
    {"reactions.add", "assistant.threads.setStatus", "chat.startStream", "chat.postMessage"}
)


def streaming_model(anthropic: FakeAnthropic) -> None:
    """Every request: the first token after FIRST_TOKEN_S, then TOKENS_PER_S."""
    delay = CHUNK_CHARS / CHARS_PER_TOKEN / TOKENS_PER_S  # between stream events

    async def answer(body: dict[str, Any]) -> Reply:
        # Two events (message_start, content_block_start) come before the first text.
        await asyncio.sleep(max(FIRST_TOKEN_S - 2 * delay, 0))
        return Reply([text(ANSWER)], event_delay=delay)

    anthropic.respond_with(answer)


def carries_text(call: SlackCall) -> bool:
    if call.params.get("markdown_text"):
        return True
    return any(isinstance(c, dict) and c.get("type") == "markdown_text" for c in call.params.get("chunks") or [])


def first_at(calls: list[SlackCall], channel: str, wanted: Any) -> float | None:
    return next((c.at for c in calls if c.params.get("channel", c.params.get("channel_id")) == channel and wanted(c)), None)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def run(events: int, rate: float) -> None:
    with tempfile.TemporaryDirectory() as tmp, FakeAnthropic.in_thread() as anthropic, FakeSlack.in_thread(
        bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1"
    ) as slack:
        streaming_model(anthropic)
        tmp_path = Path(tmp)
        env = clean_env(
            tmp_path,
            ANTHROPIC_API_KEY="bench-key",
            ANTHROPIC_BASE_URL=anthropic.base_url,
            SLACK_BOT_TOKEN="xoxb-test",
            SLACK_SIGNING_SECRET=SIGNING_SECRET,
            SLACK_API_URL=slack.base_url,
            BA_LOG_LEVEL="WARNING",
        )
        port = free_port()
        proc = start(env, port, tmp_path)
        # The serve process's output is read as it comes, so its pipe never fills up.
        output: list[str] = []
        threading.Thread(target=lambda: output.extend(proc.stdout or []), daemon=True).start()
        try:
            wait_healthy(port, timeout=60)
            wait_workers_ready(port)
            sent: dict[str, float] = {}
            for i in range(events):
                channel = f"C{i:03d}"
                ts = f"1699999999.{i + 1:06d}"
                sent[channel] = time.monotonic()
                assert post_event(port, app_mention("<@UBOT> why did GMV drop?", "U1", channel, ts=ts)) == 200
                time.sleep(1 / rate)
            slack.wait_for_sync("chat.stopStream", count=events, timeout=60 + events * 5)
        finally:
            stop(proc)
        calls = list(slack.calls)

    signs, texts = [], []
    for channel, at in sent.items():
        sign = first_at(calls, channel, lambda c: c.method in SIGN_METHODS)
        first_text = first_at(calls, channel, lambda c: c.method.endswith("Stream") and carries_text(c))
        assert sign is not None and first_text is not None, f"{channel} was not answered"
        signs.append((sign - at) * 1000)
        texts.append((first_text - at) * 1000)

    print(f"{events} events at {rate:g}/s; model: first token {FIRST_TOKEN_S * 1000:.0f} ms, {TOKENS_PER_S} tokens/s")
    for label, values in (("first sign (reaction/status/stream)", signs), ("first streamed answer text", texts)):
        print(f"  {label:<38} p50 {percentile(values, 0.5):7.0f} ms   p99 {percentile(values, 0.99):7.0f} ms")
    p99 = percentile(signs, 0.99)
    verdict = "within" if p99 < TARGET_FIRST_SIGN_MS else "OVER"
    print(f"  first sign p99 {p99:.0f} ms: {verdict} the {TARGET_FIRST_SIGN_MS} ms target (mean {statistics.mean(signs):.0f} ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=50)
    parser.add_argument("--rate", type=float, default=2.0, help="events per second")
    args = parser.parse_args()
    run(args.events, args.rate)


if __name__ == "__main__":
    main()
