"""Local fake servers that speak the real Anthropic and Slack wire protocols.

Point the real SDKs at them:

* ``tests.fakes.anthropic_api.FakeAnthropic`` -- ``AsyncAnthropic(base_url=fake.base_url)``
* ``tests.fakes.slack_api.FakeSlack`` -- ``AsyncWebClient(base_url=fake.base_url)``
* ``tests.fakes.slack_events`` -- build and sign Events API deliveries.

This module holds only the lifecycle shared by both servers; import the fakes from
their own modules (re-exporting them here would make the package import cycle).
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Self

from aiohttp import web

from tests.waiting import eventually, eventually_sync, scaled

_POLL_INTERVAL = 0.005


class FakeServer:
    """An aiohttp server on 127.0.0.1 with a random free port.

    Run it on the current event loop with ``async with Fake() as fake:``, or on a
    private loop in a background thread with ``with Fake.in_thread() as fake:``
    (for code under test that blocks the loop or runs in a subprocess).
    Subclasses implement :meth:`_routes`.
    """

    def __init__(self) -> None:
        self._runner: web.AppRunner | None = None
        self.port: int = 0

    @property
    def root_url(self) -> str:
        """``http://127.0.0.1:PORT`` of the running server."""
        if not self.port:
            raise RuntimeError(f"{type(self).__name__} is not running")
        return f"http://127.0.0.1:{self.port}"

    def _routes(self) -> list[web.RouteDef]:
        raise NotImplementedError

    async def start(self) -> Self:
        """Bind a free port and start serving on the running event loop."""
        app = web.Application(client_max_size=64 * 1024**2)
        app.add_routes(self._routes())
        # handler_cancellation: a client that drops a stream mid-way must not leave the
        # handler writing into a dead socket until it finishes its script.
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]
        return self

    async def close(self) -> None:
        """Stop serving and release the port."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> Self:
        return await self.start()

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    @classmethod
    @contextmanager
    def in_thread(cls, *args: Any, **kwargs: Any) -> Iterator[Self]:
        """Run a new fake (built from ``args``/``kwargs``) on its own loop in a daemon thread."""
        fake = cls(*args, **kwargs)
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=loop.run_forever, name=f"{cls.__name__}-loop", daemon=True)
        thread.start()
        try:
            asyncio.run_coroutine_threadsafe(fake.start(), loop).result(timeout=scaled(10))
            yield fake
        finally:
            asyncio.run_coroutine_threadsafe(fake.close(), loop).result(timeout=scaled(10))
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=scaled(10))
            loop.close()

    # Waiting polls instead of using asyncio events so it works from any thread and loop:
    # the server may run in another thread than the test that waits on it.
    @staticmethod
    async def _wait_until(predicate: Callable[[], bool], timeout: float, what: str) -> None:
        await eventually(predicate, timeout, what, poll=_POLL_INTERVAL)

    @staticmethod
    def _wait_until_sync(predicate: Callable[[], bool], timeout: float, what: str) -> None:
        eventually_sync(predicate, timeout, what, poll=_POLL_INTERVAL)
