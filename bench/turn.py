"""Agent-core overhead per turn, excluding the model: does a turn cost more as history grows?

The real agent (build_agent: tools, skills, every hook, SQLite thread store) runs turns
against a zero-latency in-process model that answers at once, in threads that already hold
10, 100 and 1,000 messages. A turn is its wall time: user message stored → request built and
passed through the hooks → answer stored. Per size it prints:

- warm turns, p50 and p99, as in a live conversation (the thread already loaded);
- the first turn of a thread in a fresh process (a new interpreter, the history read from the
  database), which every restart pays;
- the first turn of another thread in that now warm process, which every lease move pays.

Target: warm turns under 10 ms at 1,000 messages, growing with the new content, not with the
history.

    .venv/bin/python bench/turn.py [--turns 100]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pydantic import BaseModel  # noqa: E402

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
from agent_core.request import ModelRequest  # noqa: E402
from agent_core.run_context import RunDeps  # noqa: E402
from agent_core.store.db import create_engine, session_factory  # noqa: E402
from agent_core.store.threads import ThreadStore  # noqa: E402
from gateway.migrate import upgrade  # noqa: E402

ANSWER = "GMV in East China fell 38% on Oct 20, driven by the app channel. " * 4


class ZeroLatencyModel:
    """Answers every request at once; reports usage as the API would (the context size)."""

    model = "claude-sonnet-5-5"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: ModelRequest, on_text=None, on_restart=None) -> ModelResponse:
        self.calls += 1
        return ModelResponse(
            content=[TextBlock(text=ANSWER)],
            stop_reason="end_turn",
            model=self.model,
            usage=Usage(input_tokens=50, output_tokens=60, cache_read_tokens=1000 + 150 * len(request.messages)),
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


class TurnTimes(BaseModel):
    """What the child process measured, in milliseconds."""

    cold_process: float
    cold_thread: float
    warm: list[float]


def percentile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[round(q * 100) - 1] if len(values) > 1 else values[0]


async def seed(url: str, size: int, data_dir: Path) -> list[str]:
    """Two threads of `size` messages each: one for a fresh process, one for a warm one."""
    upgrade(url)
    engine = create_engine(url)
    store = ThreadStore(session_factory(engine))
    threads = []
    for copy in ("fresh", "warm"):
        thread_id = await store.open(ThreadKey(platform="bench", workspace="W", channel="C", root=f"{size}-{copy}"))
        await store.append(thread_id, seed_history(thread_id, size))
        threads.append(thread_id)
    await engine.dispose()
    return threads


async def run_turns(url: str, data_dir: Path, fresh_thread: str, warm_thread: str, turns: int) -> TurnTimes:
    """In this (fresh) process: the first turn of a thread, the first turn of another thread,
    then `turns` more turns of that one. Milliseconds."""
    engine = create_engine(url)
    sessions = session_factory(engine)
    store = ThreadStore(sessions)
    agent = build_agent(AgentConfig(model="claude-sonnet-5-5", data_dir=data_dir, api_key="x"), store, sessions)
    agent.model = ZeroLatencyModel()  # the benchmark's subject is everything but the model

    async def turn(thread_id: str, n: int) -> float:
        deps = RunDeps(thread_id=thread_id, data_dir=data_dir, channel="C", user="U1")
        question = StandardMessage(
            thread_id=thread_id, role=Role.USER, content=[TextBlock(text=f"Follow-up {n}: and by channel?")]
        )
        started = time.perf_counter()
        await agent.run_turn(thread_id, question, event_key=f"{thread_id}-{n}", deps=deps)
        return (time.perf_counter() - started) * 1000

    cold_process = await turn(fresh_thread, 0)
    cold_thread = await turn(warm_thread, 0)
    warm = [await turn(warm_thread, n) for n in range(1, turns + 1)]
    await engine.dispose()
    return TurnTimes(cold_process=cold_process, cold_thread=cold_thread, warm=warm)


def measure(size: int, turns: int, data_dir: Path) -> TurnTimes:
    """Seed the database here, then run the turns in a new interpreter, as after a restart."""
    url = f"sqlite:///{data_dir / f'turn-{size}.db'}"
    fresh, warm = asyncio.run(seed(url, size, data_dir))
    child = subprocess.run(
        [sys.executable, __file__, "--child", url, str(data_dir), fresh, warm, "--turns", str(turns)],
        check=True, capture_output=True, text=True,
    )
    return TurnTimes.model_validate_json(child.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=100)
    parser.add_argument("--child", nargs=4, metavar=("URL", "DATA_DIR", "FRESH_THREAD", "WARM_THREAD"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        url, data_dir, fresh, warm = args.child
        print(asyncio.run(run_turns(url, Path(data_dir), fresh, warm, args.turns)).model_dump_json())
        return
    with tempfile.TemporaryDirectory() as tmp:
        results = {size: measure(size, args.turns, Path(tmp)) for size in (10, 100, 1000)}
    print(f"load {os.getloadavg()[0]:.2f}; zero-latency model; warm figures over {args.turns} turns")
    for size, r in results.items():
        print(f"{size:5d} messages: warm turn p50 {percentile(r.warm, 0.5):6.2f} ms  p99 {percentile(r.warm, 0.99):6.2f} ms"
              f"  | first turn of a thread: fresh process {r.cold_process:7.2f} ms, warm process {r.cold_thread:6.2f} ms")
    big = results[1000]
    print(f"at 1000 messages: warm p50 {percentile(big.warm, 0.5):.2f} ms, p99 {percentile(big.warm, 0.99):.2f} ms; "
          f"first turn after a restart {big.cold_process:.2f} ms")


if __name__ == "__main__":
    main()
