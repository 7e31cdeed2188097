"""Worker processes that `ba-agent serve` starts and supervises to answer what it accepts.

Answering (model streams, tools, DuckDB, charts) runs in other processes than the one that
acknowledges platform events, so an acknowledgement never waits behind a turn for the event
loop or the GIL. Each worker's stdin is a pipe from this process: a byte on it means "new
work in the inbox" (no polling delay), and its end — this process exiting, even by SIGKILL —
tells the worker to stop. A worker that dies is restarted.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sys
from collections.abc import Sequence

from agent_core.model_check import ModelCheck
from agent_core.retry import backoff_delay_s
from gateway.service.metrics import WORKER_RESTARTS
from gateway.service.metrics_dir import forget_process

log = logging.getLogger(__name__)

RESTART_FIRST_DELAY_S = 0.5
RESTART_MAX_DELAY_S = 10.0
STOP_TIMEOUT_S = 15.0
# A wakeup is one byte; a worker that has this many unread has plenty to do already.
MAX_UNREAD_WAKEUPS = 64
READY_LINE = b"ba-agent worker ready\n"
# The first worker checks the model settings (it loads the SDK anyway) and reports on this line.
MODEL_CHECK_LINE = b"ba-agent model check "
# A worker's concurrency is taken (FULL) / a turn ended and freed a slot (ROOM).
FULL_LINE = b"ba-agent worker full\n"
ROOM_LINE = b"ba-agent worker has room\n"
CHECK_MODEL_FLAG = "--check-model"


def worker_command() -> list[str]:
    """How to start a supervised worker: this interpreter, the `ba-agent` CLI module."""
    return [sys.executable, "-m", "gateway.cli", "worker", "--supervised"]


class WorkerPool:
    """Starts `count` worker processes, restarts any that dies, and wakes them on new work."""

    def __init__(self, count: int, command: Sequence[str] | None = None) -> None:
        self.count = count
        self._command = list(command or worker_command())
        self._processes: list[asyncio.subprocess.Process | None] = [None] * count
        self._ready: set[int] = set()  # pids that reported ready
        self._full: set[int] = set()  # pids that reported all their turns taken
        self._supervisors: list[asyncio.Task[None]] = []
        self._stopping = False
        self.model_check = ModelCheck(state="pending")

    @property
    def ready(self) -> int:
        """How many workers are alive and answering right now."""
        return sum(1 for p in self._processes if p is not None and p.returncode is None and p.pid in self._ready)

    async def start(self) -> None:
        for slot in range(self.count):
            self._processes[slot] = await self._spawn(slot)
            self._supervisors.append(asyncio.create_task(self._supervise(slot), name=f"worker-{slot}"))

    def wake(self) -> None:
        """Tell every worker with room for a turn that there is new work (never blocks)."""
        for proc in self._processes:
            if proc is not None and proc.pid not in self._full:
                self._wake(proc)

    @staticmethod
    def _wake(proc: asyncio.subprocess.Process) -> None:
        if proc.returncode is not None or proc.stdin is None:
            return
        transport = proc.stdin.transport
        if transport.is_closing() or transport.get_write_buffer_size() >= MAX_UNREAD_WAKEUPS:
            return
        proc.stdin.write(b"\n")

    async def stop(self) -> None:
        """Close the workers' pipes (they finish up and exit); kill any that takes too long."""
        self._stopping = True
        for task in self._supervisors:
            task.cancel()
        await asyncio.gather(*self._supervisors, return_exceptions=True)
        alive = [p for p in self._processes if p is not None and p.returncode is None]
        for proc in alive:
            if proc.stdin is not None:
                proc.stdin.close()
        for proc in alive:
            try:
                async with asyncio.timeout(STOP_TIMEOUT_S):
                    await proc.wait()
            except TimeoutError:
                log.error("worker %d did not stop within %.0f s; killing it", proc.pid, STOP_TIMEOUT_S)
                proc.kill()
                await proc.wait()

    async def _spawn(self, slot: int) -> asyncio.subprocess.Process:
        command = [*self._command, CHECK_MODEL_FLAG] if slot == 0 else self._command
        proc = await asyncio.create_subprocess_exec(*command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE)
        log.info("worker %d started (pid %d)", slot, proc.pid)
        return proc

    async def _read_output(self, proc: asyncio.subprocess.Process) -> None:
        """Note the worker's ready line; pass anything else it prints on to our stdout."""
        assert proc.stdout is not None
        while line := await proc.stdout.readline():
            if line == READY_LINE:
                self._ready.add(proc.pid)
                log.info("worker pid %d is answering", proc.pid)
            elif line == FULL_LINE:
                self._full.add(proc.pid)
            elif line == ROOM_LINE:
                self._full.discard(proc.pid)
                # Events accepted while it was full were not announced to it: its claim on
                # freeing the slot may have looked before they were committed.
                self._wake(proc)
            elif line.startswith(MODEL_CHECK_LINE):
                self.model_check = ModelCheck.model_validate_json(line.removeprefix(MODEL_CHECK_LINE))
            else:
                sys.stdout.buffer.write(line)
                sys.stdout.flush()

    async def _supervise(self, slot: int) -> None:
        failures = 0
        while True:
            proc = self._processes[slot]
            assert proc is not None
            started = asyncio.get_running_loop().time()
            await self._read_output(proc)  # until the worker closes its stdout: it is exiting
            code = await proc.wait()
            self._ready.discard(proc.pid)
            self._full.discard(proc.pid)
            if self._stopping:
                return
            # A worker that ran for a while before dying starts the back-off over.
            failures = 0 if asyncio.get_running_loop().time() - started > 60 else failures + 1
            delay = backoff_delay_s(failures, first_s=RESTART_FIRST_DELAY_S, max_s=RESTART_MAX_DELAY_S)
            log.error("worker %d (pid %d) exited with code %s; restarting in %.1f s", slot, proc.pid, code, delay)
            WORKER_RESTARTS.inc()
            forget_process(proc.pid)
            await asyncio.sleep(delay)
            with contextlib.suppress(OSError):
                self._processes[slot] = await self._spawn(slot)
