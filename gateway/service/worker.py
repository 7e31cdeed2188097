"""`ba-agent worker`: a process that answers the inbox (dispatcher and scheduled jobs), no HTTP.

`ba-agent serve` starts its workers with `--supervised`: stdin is then the pipe from serve, a
byte on it means new work, and its end means serve is gone, so the worker stops too; stdout
goes back to serve, which learns from it when the worker is ready, and when it is answering
as many turns as it may (it is then not woken for new work) and has room again. Started on
its own (another host or container, same database), a worker finds work by polling every
`BA_POLL_INTERVAL` seconds and stops on SIGTERM or SIGINT.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import sys

from gateway.config import Settings
from gateway.service.platforms import build_platforms, configured
from gateway.service.runtime import Runtime, open_stores
from gateway.service.worker_pool import FULL_LINE, MODEL_CHECK_LINE, READY_LINE, ROOM_LINE

log = logging.getLogger(__name__)


async def run_worker(settings: Settings, supervised: bool, check_model: bool = False) -> None:
    """Answer accepted events until told to stop; with `check_model`, check the model settings
    once answering (`agent_core.model_check`) and report the result to serve."""
    if not supervised:  # serve migrates the database before it starts its own workers
        from gateway.migrate import upgrade  # Alembic: a third of a second to import

        revision = await asyncio.to_thread(upgrade, settings.effective_database_url)
        log.info("database at revision %s", revision)
    stores = open_stores(settings)
    platforms = build_platforms(stores, configured(settings))
    runtime = Runtime.build(stores, platforms.responders)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    if supervised:
        # Ctrl-C in a terminal reaches the whole process group: serve decides when we stop.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        watcher = asyncio.create_task(watch_supervisor(runtime.inbox.wakeup, stop))
    else:
        loop.add_signal_handler(signal.SIGINT, stop.set)
    answering = runtime.start_answering(on_capacity=tell_serve_capacity if supervised else None)
    gc.freeze()  # as in serve: start-up objects live as long as the process
    log.info("worker answering (%s)", ", ".join(runtime.responders) or "no platform configured")
    if supervised:
        sys.stdout.buffer.write(READY_LINE)
        sys.stdout.flush()
    if check_model:
        checked = asyncio.create_task(report_model_check(settings, supervised))
    try:
        await stop.wait()
    finally:
        if supervised:
            watcher.cancel()
        if check_model:
            checked.cancel()
        await platforms.close()
        await answering.close()
        await runtime.close()
        gc.unfreeze()  # let extension modules see their objects released at exit


def tell_serve_capacity(has_room: bool) -> None:
    """Say on stdout whether this worker can take more turns: while it cannot, serve does not
    wake it for every event it accepts (a woken worker takes a CPU the next acknowledgement may
    need); events accepted meanwhile are claimed when a turn ends and frees a slot."""
    # Serve gone (SIGKILLed): this worker is stopping anyway (its stdin has ended).
    with contextlib.suppress(OSError):
        sys.stdout.buffer.write(ROOM_LINE if has_room else FULL_LINE)
        sys.stdout.flush()


async def report_model_check(settings: Settings, supervised: bool) -> None:
    """Check the key and the model (logged either way); tell serve, which shows it in /readyz."""
    from agent_core.model_check import check_model

    result = await check_model(settings)
    if supervised:
        sys.stdout.buffer.write(MODEL_CHECK_LINE + result.model_dump_json().encode() + b"\n")
        sys.stdout.flush()


async def watch_supervisor(wakeup: asyncio.Event, stop: asyncio.Event) -> None:
    """Turn bytes on stdin into inbox wakeups; stop when the pipe ends (serve is gone)."""
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while await reader.read(4096):
        wakeup.set()
    stop.set()
