"""How soon a Stop ends an answer: from the Stop click's POST to the stopped answer in the chat.

The real `ba-agent serve` (HTTP events, one worker process, SQLite) answers signed Slack
events; Slack and the model are the local fakes. Each round asks a question in its own thread,
waits until the streamed answer shows, clicks Stop (`agent_session_stopped`) and times until
the answer reads "Stopped by …" (the stream finished with the partial text). The model is slow
(one 24-character delta every 50 ms) and never finishes within a round.

Prints p50 and max of the Stop latency; the floor is the worker's Stop poll (0.5 s).

    .venv/bin/python bench/stop.py [--rounds 10]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.anthropic_api import FakeAnthropic, Reply, text  # noqa: E402
from tests.fakes.slack_api import FakeSlack  # noqa: E402
from tests.fakes.slack_events import agent_session_stopped, app_mention  # noqa: E402
from tests.harness import SIGNING_SECRET  # noqa: E402
from tests.serve_process import clean_env, free_port, post_event, start, stop, wait_healthy, wait_workers_ready  # noqa: E402

LONG = "GMV fell in East China. " + "More detail follows here. " * 400


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    latencies: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, FakeAnthropic.in_thread() as anthropic, FakeSlack.in_thread() as slack:
        anthropic.respond_with(lambda _body: Reply([text(LONG)], event_delay=0.05))
        env = clean_env(
            Path(tmp),
            ANTHROPIC_API_KEY="bench",
            ANTHROPIC_BASE_URL=anthropic.base_url,
            SLACK_BOT_TOKEN=slack.bot_token,
            SLACK_SIGNING_SECRET=SIGNING_SECRET,
            SLACK_API_URL=slack.base_url,
        )
        port = free_port()
        serve = start(env, port, Path(tmp))
        try:
            wait_healthy(port)
            wait_workers_ready(port)
            for round_ in range(args.rounds):
                channel, thread = f"C{round_}", f"1700000000.{round_:06d}"
                post_event(port, app_mention("<@UBOT> GMV?", "U1", channel, ts=thread))
                slack.wait_for_sync("chat.appendStream", count=2 * (round_ + 1), timeout=60)
                started = time.perf_counter()
                stopped = slack.click_stop(channel, thread)
                post_event(port, agent_session_stopped(channel, thread, "U1", streaming_message_ts=stopped))
                deadline = time.monotonic() + 60
                while not any("Stopped by" in slack.markdown_of(m) for m in slack.posted(channel=channel)):
                    if time.monotonic() > deadline:
                        raise SystemExit(f"round {round_}: the answer was not stopped")
                    time.sleep(0.005)
                latencies.append((time.perf_counter() - started) * 1000)
        finally:
            stop(serve)
    print(f"stop → stopped answer shown, {len(latencies)} rounds: p50 {statistics.median(latencies):.0f} ms, "
          f"max {max(latencies):.0f} ms")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
