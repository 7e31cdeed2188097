"""The aiohttp application: platform endpoints, health and readiness."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from sqlalchemy import text

from adapters.base import Handler
from agent_core.store.call_stats import call_stats
from gateway.config import Settings
from gateway.feedback import FeedbackStore
from gateway.metrics import render_metrics
from gateway.migrate import upgrade
from gateway.platforms import Platforms, build_platforms
from gateway.runtime import Runtime
from gateway.worker_pool import WorkerPool

log = logging.getLogger(__name__)

RUNTIME = web.AppKey("runtime", Runtime)
# Platform connections: name → status(), None where the platform's mode has no long-lived one.
CONNECTIONS = web.AppKey("connections", dict)
WORKERS = web.AppKey[WorkerPool | None]("workers")


def describe_configuration(settings: Settings) -> str:
    """One line for the start-up log: what is configured and what is missing (no secrets)."""
    platforms = [f"{platform.name} ({platform.settings.describe()})" for platform in settings.platforms]
    model = f"{settings.model} via {settings.base_url or 'api.anthropic.com'}"
    if not settings.model_configured:
        model += " (off)"
    missing = settings.missing()
    return (
        f"platforms: {', '.join(platforms)}; model: {model}; "
        f"missing: {', '.join(missing) if missing else 'nothing'}"
    )


def not_configured(platform: str, variables: str) -> Handler:
    async def handler(_request: web.Request) -> web.Response:
        return web.json_response(
            {"ok": False, "error": f"{platform} is not configured: set {variables}"}, status=503
        )

    return handler


def mount_routes(app: web.Application, settings: Settings, platforms: Platforms) -> None:
    """Every platform's routes: its handlers when configured, else a 503 saying what to set."""
    for platform in settings.platforms:
        adapter = platforms.adapters.get(platform.name)
        for route in platform.routes:
            handler = (
                adapter.handler(route) if adapter is not None else not_configured(platform.title, platform.setup_hint)
            )
            app.router.add_route(route.method, route.path, handler)


async def healthz(_request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def readyz(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    try:
        async with asyncio.timeout(2):
            async with runtime.engine.connect() as conn:
                await conn.execute(text("SELECT 1"))
    except Exception as exc:
        return web.json_response({"ok": False, "database": f"unreachable: {type(exc).__name__}"}, status=503)
    connections = {name: status() for name, status in request.app[CONNECTIONS].items()}
    states = {name: s.model_dump(mode="json") for name, s in connections.items() if s is not None}
    ok = all(s is None or s.state == "connected" for s in connections.values())
    body = {"ok": ok, "database": "ok", "connections": states}
    # Reported, not required: accepted events wait durably while a worker restarts.
    if (workers := request.app[WORKERS]) is not None:
        body["workers"] = {"ready": workers.ready, "configured": workers.count}
    return web.json_response(body, status=200 if ok else 503)


async def metrics(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    stats = await call_stats(runtime.sessions)
    feedback = await FeedbackStore(runtime.engine).totals()
    body = render_metrics(stats, await runtime.inbox.open_events(), feedback)
    return web.Response(body=body, content_type="text/plain", charset="utf-8")


def create_app(settings: Settings) -> web.Application:
    """The service; migrations run and answering starts when the app starts.

    With `BA_WORKER_PROCESSES` > 0 (the default) this process only accepts events and worker
    processes answer them; with 0 it answers them itself.
    """
    runtime = Runtime.build(settings)
    platforms = build_platforms(settings, runtime)
    workers = WorkerPool(settings.worker_processes) if settings.worker_processes else None
    app = web.Application(client_max_size=1024**2)
    app[RUNTIME] = runtime
    app[WORKERS] = workers
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)

    app[CONNECTIONS] = platforms.connections
    mount_routes(app, settings, platforms)

    wake_forwarder: asyncio.Task[None] | None = None

    async def on_startup(_app: web.Application) -> None:
        nonlocal wake_forwarder
        revision = await asyncio.to_thread(upgrade, settings.effective_database_url)
        log.info("database at revision %s", revision)
        await runtime.inbox.open()
        log.info(describe_configuration(settings))
        if workers is None:
            runtime.start_answering()
        else:
            await workers.start()
            wake_forwarder = asyncio.create_task(forward_wakeups(runtime.inbox.wakeup, workers))
        await platforms.start_connections()

    async def on_cleanup(_app: web.Application) -> None:
        await platforms.close()  # first: in-flight envelopes commit and are acked
        if wake_forwarder is not None:
            wake_forwarder.cancel()
        if workers is not None:
            await workers.stop()
        await runtime.close()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app


# An idle worker hears of new work within this; a busy one is not woken for every event.
WAKE_COALESCE_S = 0.025


async def forward_wakeups(wakeup: asyncio.Event, workers: WorkerPool) -> None:
    """Pass "the inbox has new work" on to the worker processes, at most once per
    `WAKE_COALESCE_S`: the first event of a burst at once, the rest in one wakeup after it."""
    while True:
        await wakeup.wait()
        wakeup.clear()
        workers.wake()
        await asyncio.sleep(WAKE_COALESCE_S)
