"""The aiohttp application: platform endpoints, health and readiness."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from sqlalchemy import text

from adapters.base import Handler
from agent_core.model_check import ModelCheck
from gateway.config import Settings
from gateway.migrate import upgrade
from gateway.service.feedback import FeedbackStore
from gateway.service.metrics import EVENT_ROUTES, HttpMetrics, label_request, render_metrics
from gateway.service.platforms import Platforms, build_platforms, configured
from gateway.service.runtime import Answering, Runtime, open_stores
from gateway.service.worker_pool import WorkerPool

log = logging.getLogger(__name__)

RUNTIME = web.AppKey("runtime", Runtime)
# Platform connections: name → status(), None where the platform's mode has no long-lived one.
CONNECTIONS = web.AppKey("connections", dict)
# Platform credential checks at start-up: name → credentials(), None where there is none.
CREDENTIALS = web.AppKey("credentials", dict)
WORKERS = web.AppKey[WorkerPool | None]("workers")


@dataclass
class ModelCheckResult:
    """The start-up check of the model key and name (`agent_core.model_check`) when this
    process answers itself; with workers, the first worker reports it (`WorkerPool.model_check`)."""

    check: ModelCheck


MODEL_CHECK = web.AppKey("model_check", ModelCheckResult)


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
    if sources := runtime.settings.datasources:
        # Reported, not required: a source down is unavailable alone, the bot still answers.
        from agent_core.governance.availability import SOURCE_CHECKS

        SOURCE_CHECKS.recheck_due(sources.values(), runtime.settings.access_policy)
        body["sources"] = SOURCE_CHECKS.status(sources.values())
    # Reported, not required: a refused token is fixed in configuration, not by routing
    # traffic to another replica with the same one.
    checks = {name: check() for name, check in request.app[CREDENTIALS].items()}
    body["credentials"] = {name: c.model_dump(mode="json") for name, c in checks.items() if c is not None}
    # Reported, not required: a rejected key or model is for an operator to fix, and the
    # platforms must keep getting acknowledgements meanwhile (users are told what is wrong).
    workers = request.app[WORKERS]
    check = request.app[MODEL_CHECK].check if workers is None else workers.model_check
    body["model"] = check.model_dump()
    # Reported, not required: accepted events wait durably while a worker restarts.
    if workers is not None:
        body["workers"] = {"ready": workers.ready, "configured": workers.count}
    return web.json_response(body, status=200 if ok else 503)


async def metrics(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    workers = request.app[WORKERS]
    body = render_metrics(
        await runtime.inbox.open_events(),
        (workers.ready, workers.count) if workers is not None else (0, 0),
        await FeedbackStore(runtime.engine).totals(),
    )
    return web.Response(body=body, content_type="text/plain", charset="utf-8")


# How the app is run (`serve`; tests through aiohttp's TestServer): aiohttp's access-log hook
# counts every request in /metrics once its response has gone out.
RUNNER_OPTIONS: dict[str, Any] = {"access_log_class": HttpMetrics, "access_log": log}


def create_app(settings: Settings) -> web.Application:
    """The service; migrations run and answering starts when the app starts.

    With `BA_WORKER_PROCESSES` > 0 (the default) this process only accepts events and worker
    processes answer them; with 0 it answers them itself.
    """
    stores = open_stores(settings)
    platforms = build_platforms(stores, configured(settings))
    runtime = Runtime.build(stores, platforms.responders)
    workers = WorkerPool(settings.worker_processes) if settings.worker_processes else None
    event_routes = {route.path: p.name for p in settings.platforms for route in p.routes if route.method == "POST"}
    app = web.Application(client_max_size=1024**2)
    app[EVENT_ROUTES] = event_routes
    app.on_response_prepare.append(label_request)  # the labels HttpMetrics counts it under
    app[RUNTIME] = runtime
    app[WORKERS] = workers
    app[MODEL_CHECK] = ModelCheckResult(ModelCheck(state="pending"))
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)

    app[CONNECTIONS] = platforms.connections
    app[CREDENTIALS] = platforms.credentials
    mount_routes(app, settings, platforms)

    answering: Answering | None = None  # None: the workers answer
    wake_forwarder: asyncio.Task[None] | None = None
    model_check: asyncio.Task[None] | None = None

    async def check_model_settings() -> None:
        from agent_core.model_check import check_model

        app[MODEL_CHECK].check = await check_model(settings)

    async def on_startup(_app: web.Application) -> None:
        nonlocal answering, wake_forwarder, model_check
        revision = await asyncio.to_thread(upgrade, settings.effective_database_url)
        log.info("database at revision %s", revision)
        await runtime.inbox.open()
        log.info(describe_configuration(settings))
        if workers is None:
            answering = runtime.start_answering()
        else:
            await workers.start()
            wake_forwarder = asyncio.create_task(forward_wakeups(runtime.inbox.wakeup, workers))
        await platforms.start_connections()
        if workers is None:  # else the first worker checks (it loads the SDK anyway)
            model_check = asyncio.create_task(check_model_settings())  # readiness does not wait for it

    async def on_cleanup(_app: web.Application) -> None:
        await platforms.close()  # first: in-flight envelopes commit and are acked
        if model_check is not None:
            model_check.cancel()
        if wake_forwarder is not None:
            wake_forwarder.cancel()
        if workers is not None:
            await workers.stop()
        if answering is not None:
            await answering.close()
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
