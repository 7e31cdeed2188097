"""Agent-core overhead per turn, excluding the model: does a turn cost more as history grows?

The real agent (build_agent: tools, skills, every hook, SQLite thread store) runs turns
against a zero-latency in-process model that answers at once, in threads that already hold
10, 100 and 1,000 messages. The figure is the median wall time of a turn (user message stored →
request built and passed through the hooks → answer stored), measured after the thread's first
turn, as in a live conversation. Target: under 10 ms at 1,000 messages, growing with the new
content, not with the history.

    .venv/bin/python bench/turn.py [--turns 30]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent_core.agent import build_agent  # noqa: E402
from agent_core.config import AgentConfig  # noqa: E402
from agent_core.messages import (  # noqa: E402
    Role,
    StandardMessage,
    TextBlock,
    ThreadKey,
    ToolResultBlock,
    ToolUseBlock,
)
from agent_core.model import ModelResponse, Usage  # noqa: E402
from agent_core.store.db import create_engine, session_factory  # noqa: E402
from agent_core.store.threads import ThreadStore  # noqa: E402
from agent_core.tools.base import ToolContext  # noqa: E402
from gateway.migrate import upgrade  # noqa: E402

ANSWER = "GMV in East China fell 38% on Oct 20, driven by the app channel. " * 4


class ZeroLatencyModel:
    """Answers every request at once; reports usage as the API would (the context size)."""

    model = "claude-sonnet-5-5"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request, on_text=None, on_restart=None, model=None) -> ModelResponse:  # noqa: ANN001
        self.calls += 1
        return ModelResponse(
            content=[TextBlock(text=ANSWER)],
            stop_reason="end_turn",
            model=self.model,
            usage=Usage(input_tokens=50, output_tokens=60, cache_read_tokens=1000 + 150 * len(request["messages"])),
        )


def seed_history(thread_id: str, n: int) -> list[StandardMessage]:
    """A realistic mix: questions, tool calls with tabular results, answers."""
    messages: list[StandardMessage] = []
    i = 0
    while len(messages) < n:
        question = TextBlock(text=f"Question {i}: how did orders move by region last week?")
        messages.append(StandardMessage(thread_id=thread_id, role=Role.USER, content=[question]))
        if len(messages) + 3 <= n:
            call = ToolUseBlock(
                id=f"toolu_{i}", name="sql_query", input={"sql": "SELECT region, SUM(orders) FROM demo.sales GROUP BY 1"}
            )
            messages.append(StandardMessage(thread_id=thread_id, role=Role.ASSISTANT, content=[call]))
            table = "| region | orders |\n|---|---|\n" + "\n".join(f"| R{r} | {1000 + r} |" for r in range(20))
            result = ToolResultBlock(tool_use_id=call.id, content=table)
            messages.append(StandardMessage(thread_id=thread_id, role=Role.USER, content=[result]))
        messages.append(StandardMessage(thread_id=thread_id, role=Role.ASSISTANT, content=[TextBlock(text=ANSWER)]))
        i += 1
    return messages[:n] if messages[n - 1].role is Role.ASSISTANT else messages[: n - 1]


async def measure(size: int, turns: int, data_dir: Path) -> float:
    url = f"sqlite:///{data_dir / f'turn-{size}.db'}"
    upgrade(url)
    engine = create_engine(url)
    sessions = session_factory(engine)
    store = ThreadStore(sessions)
    agent = build_agent(AgentConfig(model="claude-sonnet-5-5", data_dir=data_dir, api_key="x"), store, sessions)
    agent.model = ZeroLatencyModel()  # the benchmark's subject is everything but the model
    thread_id = await store.open(ThreadKey(platform="bench", workspace="W", channel="C", root=str(size)))
    await store.append(thread_id, seed_history(thread_id, size))
    timings = []
    for turn in range(turns + 1):
        ctx = ToolContext(thread_id=thread_id, data_dir=data_dir, channel="C", user="U1")
        question = StandardMessage(
            thread_id=thread_id, role=Role.USER, content=[TextBlock(text=f"Follow-up {turn}: and by channel?")]
        )
        started = time.perf_counter()
        await agent.run_turn(thread_id, question, event_key=f"e{turn}", ctx=ctx)
        if turn:  # the first turn reads the whole thread from the database once
            timings.append((time.perf_counter() - started) * 1000)
    await engine.dispose()
    return statistics.median(timings)


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        results = {size: await measure(size, args.turns, Path(tmp)) for size in (10, 100, 1000)}
    for size, ms in results.items():
        print(f"{size:5d} messages: {ms:6.2f} ms per turn (median of {args.turns})")
    print(f"{results[1000]:.2f} ms per turn at 1000 messages")


if __name__ == "__main__":
    asyncio.run(main())
