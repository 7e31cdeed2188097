"""`ba-agent stats`: call counts, durations, success rates and tokens, from the database."""

from __future__ import annotations

from agent_core.store.db import create_engine, session_factory
from agent_core.store.threads import ThreadStore
from agent_core.telemetry import call_stats
from agent_core.tokens import usage_lines
from gateway.config import Settings


async def print_stats(settings: Settings, thread_id: str | None) -> None:
    engine = create_engine(settings.effective_database_url)
    sessions = session_factory(engine)
    try:
        stats = await call_stats(sessions, thread_id)
        usage = (await ThreadStore(sessions).load_state(thread_id)).usage if thread_id else None
    finally:
        await engine.dispose()
    scope = f"thread {thread_id}" if thread_id else "all conversations"
    print(f"Calls ({scope})")
    print(f"{'kind':6} {'name':24} {'calls':>7} {'avg ms':>9} {'success':>8} {'in tok':>9} {'out tok':>9} {'cache rd':>9} {'cache wr':>9}")
    for s in stats:
        print(
            f"{s.kind:6} {s.name[:24]:24} {s.calls:7d} {s.avg_duration_ms:9.1f} {s.success_rate:8.0%} "
            f"{s.input_tokens:9d} {s.output_tokens:9d} {s.cache_read_tokens:9d} {s.cache_write_tokens:9d}"
        )
    if not stats:
        print("(no calls recorded yet)")
    if usage is not None:
        print()
        print("\n".join(usage_lines(usage)))
