"""The aiohttp application: platform endpoints, health and readiness."""

from __future__ import annotations

import asyncio
import logging

from aiohttp import web
from sqlalchemy import text

from adapters.slack.app import SlackAdapter
from adapters.slack.socket_mode import SlackSocketMode
from agent_core.telemetry import call_stats
from gateway.config import Settings
from gateway.metrics import render_metrics
from gateway.migrate import upgrade
from gateway.runtime import Runtime

log = logging.getLogger(__name__)

RUNTIME = web.AppKey("runtime", Runtime)
# Long-lived platform connections (Feishu long connection, Slack Socket Mode): name → status().
CONNECTIONS = web.AppKey("connections", dict)


def describe_configuration(settings: Settings) -> str:
    """One line for the start-up log: what is configured and what is missing (no secrets)."""
    platforms = [
        f"slack ({settings.slack_mode})" if settings.slack_configured else "slack (off)",
        f"feishu ({settings.feishu_mode})" if settings.feishu_configured else "feishu (off)",
    ]
    model = f"{settings.model} via {settings.anthropic_base_url or 'api.anthropic.com'}"
    if not settings.model_configured:
        model += " (off)"
    missing = settings.missing()
    return (
        f"platforms: {', '.join(platforms)}; model: {model}; "
        f"missing: {', '.join(missing) if missing else 'nothing'}"
    )


def not_configured(platform: str, variables: str) -> web.Handler:
    async def handler(_request: web.Request) -> web.Response:
        return web.json_response(
            {"ok": False, "error": f"{platform} is not configured: set {variables}"}, status=503
        )

    return handler


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
    states = {name: s.model_dump(mode="json") if s is not None else None for name, s in connections.items()}
    ok = all(s is None or s.state == "connected" for s in connections.values())
    return web.json_response({"ok": ok, "database": "ok", "connections": states}, status=200 if ok else 503)


async def metrics(request: web.Request) -> web.Response:
    runtime = request.app[RUNTIME]
    stats = await call_stats(runtime.sessions)
    body = render_metrics(stats, await runtime.inbox.open_events())
    return web.Response(body=body, content_type="text/plain", charset="utf-8")


def create_app(settings: Settings) -> web.Application:
    """The service; migrations run and the dispatcher starts when the app starts."""
    runtime = Runtime.build(settings)
    app = web.Application(client_max_size=1024**2)
    app[RUNTIME] = runtime
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)

    app[CONNECTIONS] = {}
    slack_config = settings.slack()
    slack_socket: SlackSocketMode | None = None
    if slack_config is not None:
        slack = SlackAdapter(slack_config, accept=runtime.inbox.accept, known_thread=runtime.store.is_live)
        runtime.responders[slack.platform] = slack.responder
        app.router.add_post("/slack/events", slack.handle)  # answers 404 in socket mode
        if slack_config.mode == "socket" and slack_config.app_token is not None:
            slack_socket = SlackSocketMode(slack, slack_config.app_token, slack_config.api_url)
            app[CONNECTIONS]["slack"] = slack_socket.status
    else:
        app.router.add_post(
            "/slack/events",
            not_configured(
                "Slack", "SLACK_BOT_TOKEN and SLACK_SIGNING_SECRET (or SLACK_MODE=socket and SLACK_APP_TOKEN)"
            ),
        )

    feishu_config = settings.feishu()
    feishu = None
    if feishu_config is not None:
        # lark-oapi takes seconds to import: a deployment without Feishu does not pay for it.
        from adapters.feishu.app import FeishuAdapter

        feishu = FeishuAdapter(feishu_config, accept=runtime.inbox.accept)
    if feishu is not None:
        runtime.responders[feishu.platform] = feishu.responder
        app.router.add_post("/feishu/events", feishu.handle)
        if feishu_config.mode == "websocket":
            app[CONNECTIONS]["feishu"] = feishu.status
    else:
        app.router.add_post("/feishu/events", not_configured("Feishu", "FEISHU_APP_ID and FEISHU_APP_SECRET"))

    async def on_startup(_app: web.Application) -> None:
        revision = await asyncio.to_thread(upgrade, settings.effective_database_url)
        log.info("database at revision %s", revision)
        log.info(describe_configuration(settings))
        runtime.start_dispatcher()
        runtime.scheduler.start()
        if slack_socket is not None:
            await slack_socket.start()
        if feishu is not None:
            await feishu.start()

    async def on_cleanup(_app: web.Application) -> None:
        if slack_socket is not None:
            await slack_socket.stop()  # first: in-flight envelopes commit and are acked
        if feishu is not None:
            await feishu.close()
        await runtime.close()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
    return app
