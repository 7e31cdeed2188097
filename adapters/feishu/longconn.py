"""Long-connection mode: receive Feishu events over a websocket the app opens, instead of a webhook.

Feishu's long-connection protocol, spoken here on the service loop with aiohttp:
1. POST `{domain}/callback/ws/endpoint` with the AppID and AppSecret returns the wss URL (its
   query names the `device_id` and `service_id`) and a ClientConfig: ping interval, and how to
   reconnect (count, interval, a random first delay up to the nonce).
2. On the websocket every frame is a binary protobuf `pbbp2.Frame` (lark-oapi ships the class;
   its module is imported off the loop on first use, as lark-oapi takes seconds to import).
   Control frames carry header type=ping/pong: the client pings every ping interval, and a pong's
   payload may carry a new ClientConfig. Data frames carry type=event, a message_id, and sum/seq
   for a payload split over several frames.
3. An event is acknowledged by sending its frame back with header `biz_rt` (milliseconds taken)
   and the JSON payload `{"code": 200}`; `{"code": 500}` (or no answer) makes Feishu redeliver.
   A card action callback arrives as an event too; its response (a toast for the clicker) goes
   back in the ack as `data`, base64 of its JSON (as lark-oapi's client sends it).

An event goes through the `FeishuEventPipeline` the webhook uses, and is acknowledged only after
its message is committed. A dropped socket is reopened as the ClientConfig says; the
`ConnectionSupervisor` replaces the whole client when it fails, gives up, or goes silent.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import random
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import aiohttp
from aiohttp import ClientWebSocketResponse, WSMsgType
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from adapters.base import AcceptMessage
from adapters.feishu.card_actions import CardActions
from adapters.feishu.config import FeishuConfig
from adapters.feishu.events import KnownThread, MalformedEvent
from adapters.feishu.pipeline import BotIdentityUnavailable, BotOpenIdProvider, FeishuEventPipeline
from adapters.supervisor import CLOSE_TIMEOUT_S, DRAIN_TIMEOUT_S, ConnectionMonitor, SupervisedConnection

if TYPE_CHECKING:
    from lark_oapi.ws.pb.pbbp2_pb2 import Frame

log = logging.getLogger(__name__)

ENDPOINT_PATH = "/callback/ws/endpoint"
CONTROL, DATA = 0, 1  # Frame.method
_HTTP_TIMEOUT_S = 30.0
# Parts of a split payload wait this long for the rest (as lark-oapi's client).
_PARTS_TTL_S = 5.0
# Endpoint codes that mean "try again later"; any other refusal is the app's (credentials, limits).
_SERVER_BUSY_CODES = frozenset({1, 1000040343})
# A refused handshake names its reason in these headers.
_HANDSHAKE_STATUS, _HANDSHAKE_AUTH_CODE = "handshake-status", "handshake-autherrcode"
_AUTH_FAILED, _FORBIDDEN, _TOO_MANY_CONNECTIONS = 514, 403, 1000040350


class LongConnectionRefused(Exception):
    """Feishu refused this app a long connection (credentials, connection limit): reconnecting
    at once would not help, so the supervisor backs off."""


class LongConnectionUnavailable(Exception):
    """Feishu could not open a long connection now (busy, unreachable)."""


class ClientConfig(BaseModel):
    """How Feishu wants the client to behave (defaults: lark-oapi's, used until it says)."""

    model_config = ConfigDict(populate_by_name=True)

    reconnect_count: int = Field(-1, alias="ReconnectCount")  # -1: forever
    reconnect_interval_s: float = Field(120, alias="ReconnectInterval", ge=0)
    reconnect_nonce_s: float = Field(30, alias="ReconnectNonce", ge=0)
    ping_interval_s: float = Field(120, alias="PingInterval", gt=0)


class _Endpoint(BaseModel):
    url: str = Field(alias="URL")
    client_config: ClientConfig | None = Field(None, alias="ClientConfig")


class _EndpointReply(BaseModel):
    code: int
    msg: str = ""
    data: _Endpoint | None = None


class FeishuLongConnection(SupervisedConnection):
    """Receives Feishu events over a long connection and hands messages to `accept`."""

    def __init__(
        self,
        config: FeishuConfig,
        accept: AcceptMessage,
        bot_open_id_provider: BotOpenIdProvider,
        known_thread: KnownThread,
        *,
        card_actions: CardActions | None = None,
        max_restart_backoff_s: float = 60.0,
    ) -> None:
        self._config = config
        self._pipeline = FeishuEventPipeline(config, accept, bot_open_id_provider, known_thread, card_actions)
        super().__init__(
            "feishu long connection",
            silence_timeout_s=config.ws_silence_timeout_s,
            max_restart_backoff_s=max_restart_backoff_s,
        )

    async def _connect(self, monitor: ConnectionMonitor) -> None:
        """Run one client until cancelled (the supervisor's connection coroutine)."""
        frame_type = await asyncio.to_thread(_frame_type)
        timeout = aiohttp.ClientTimeout(total=_HTTP_TIMEOUT_S)
        async with aiohttp.ClientSession(timeout=timeout) as http:
            await _Client(self._config, self._pipeline, monitor, http, frame_type).run()


def _frame_type() -> type[Frame]:
    from lark_oapi.ws.pb.pbbp2_pb2 import Frame

    return Frame


class _Client:
    """One long-connection client: the endpoint, the socket, pings, frames, reconnects."""

    def __init__(
        self,
        config: FeishuConfig,
        pipeline: FeishuEventPipeline,
        monitor: ConnectionMonitor,
        http: aiohttp.ClientSession,
        frame_type: Callable[[], Frame],
    ) -> None:
        self._config = config
        self._pipeline = pipeline
        self._monitor = monitor
        self._http = http
        self._new_frame = frame_type
        self._settings = ClientConfig()
        self._service_id = 0
        self._parts: dict[str, tuple[float, list[bytes | None]]] = {}  # message_id → (first seen, parts)

    async def run(self) -> None:
        """Hold the connection, reopening it after drops; raises when it cannot."""
        await self._hold(await self._open())  # a first failure is the supervisor's to retry
        while True:
            self._monitor.connection_lost()
            await asyncio.sleep(random.random() * self._settings.reconnect_nonce_s)
            await self._hold(await self._reopen())

    async def _reopen(self) -> ClientWebSocketResponse:
        tries = 0
        while True:
            try:
                return await self._open()
            except (LongConnectionUnavailable, aiohttp.ClientError, TimeoutError) as exc:
                tries += 1
                if 0 <= self._settings.reconnect_count <= tries:
                    raise
                log.warning(
                    "feishu long connection: reconnect failed (%s); next try in %.0fs",
                    type(exc).__name__,
                    self._settings.reconnect_interval_s,
                )
                await asyncio.sleep(self._settings.reconnect_interval_s)

    async def _open(self) -> ClientWebSocketResponse:
        url = await self._endpoint()
        try:
            self._service_id = int(parse_qs(urlsplit(url).query)["service_id"][0])
        except (KeyError, ValueError):
            raise LongConnectionUnavailable("the endpoint URL names no service_id") from None
        try:
            return await self._http.ws_connect(url, timeout=aiohttp.ClientWSTimeout(ws_close=CLOSE_TIMEOUT_S))
        except aiohttp.WSServerHandshakeError as exc:
            raise _handshake_refusal(exc) from None
        except aiohttp.ClientError as exc:  # its text may quote the URL, whose query has a ticket
            raise LongConnectionUnavailable(f"websocket connect failed ({type(exc).__name__})") from None

    async def _endpoint(self) -> str:
        """The websocket URL to dial (and the ClientConfig to follow)."""
        body = {"AppID": self._config.app_id, "AppSecret": self._config.app_secret.get_secret_value()}
        async with self._http.post(
            f"{self._config.domain}{ENDPOINT_PATH}", json=body, headers={"locale": "zh"}
        ) as response:
            status, raw = response.status, await response.read()
        try:
            reply = _EndpointReply.model_validate_json(raw)
        except ValidationError:
            raise LongConnectionUnavailable(f"endpoint answered HTTP {status} without a reply") from None
        if reply.code in _SERVER_BUSY_CODES or status >= 500:
            raise LongConnectionUnavailable(f"endpoint: code {reply.code} {reply.msg}")
        if reply.code != 0 or reply.data is None:
            raise LongConnectionRefused(f"endpoint: code {reply.code} {reply.msg}")
        if reply.data.client_config is not None:
            self._settings = reply.data.client_config
        return reply.data.url

    async def _hold(self, ws: ClientWebSocketResponse) -> None:
        """Receive until the socket closes; then let running handlers finish, and close it."""
        pinger = asyncio.create_task(self._ping(ws), name="feishu-long-connection-ping")
        handlers: set[asyncio.Task[None]] = set()
        try:
            async for message in ws:
                if message.type == WSMsgType.ERROR:
                    break
                if message.type != WSMsgType.BINARY:
                    continue
                frame = self._new_frame()
                try:
                    frame.ParseFromString(message.data)
                except Exception:  # protobuf's DecodeError, whose module is lark-oapi's vendored copy
                    log.warning("feishu long connection: a frame that is not a pbbp2.Frame; ignored")
                    continue
                self._monitor.frame_received()
                if frame.method == CONTROL:
                    self._control(frame)
                elif frame.method == DATA:
                    handler = asyncio.create_task(self._data(ws, frame))
                    handlers.add(handler)
                    handler.add_done_callback(handlers.discard)
        finally:
            pinger.cancel()
            if handlers:
                _, late = await asyncio.wait(set(handlers), timeout=DRAIN_TIMEOUT_S)
                for task in late:
                    task.cancel()
            await ws.close()

    async def _ping(self, ws: ClientWebSocketResponse) -> None:
        while not ws.closed:
            ping = self._frame(CONTROL, {"type": "ping"})
            try:
                await ws.send_bytes(ping.SerializeToString())
            except (ConnectionError, RuntimeError) as exc:  # the socket is closing: `_hold` ends
                log.debug("feishu long connection: ping not sent: %s", exc)
                return
            await asyncio.sleep(self._settings.ping_interval_s)

    def _control(self, frame: Frame) -> None:
        headers = {h.key: h.value for h in frame.headers}
        if headers.get("type") == "pong" and frame.payload:
            try:
                self._settings = ClientConfig.model_validate_json(frame.payload)
            except ValidationError:
                log.debug("feishu long connection: a pong without a usable ClientConfig")

    async def _data(self, ws: ClientWebSocketResponse, frame: Frame) -> None:
        headers = {h.key: h.value for h in frame.headers}
        payload = self._whole_payload(headers, frame.payload)
        if payload is None or headers.get("type") != "event":
            return  # awaiting more parts; legacy "card" frames are not handled (nor acknowledged)
        self._monitor.event_received()
        started = time.monotonic()
        code, answer = await self._process(payload)
        ack = frame.headers.add()
        ack.key, ack.value = "biz_rt", str(int((time.monotonic() - started) * 1000))
        response: dict[str, Any] = {"code": code}
        if answer:
            response["data"] = base64.b64encode(json.dumps(answer, ensure_ascii=False).encode()).decode()
        frame.payload = json.dumps(response).encode()
        try:
            await ws.send_bytes(frame.SerializeToString())
        except (ConnectionError, RuntimeError) as exc:
            log.info("feishu long connection: ack lost with the socket (%s); Feishu redelivers", exc)

    async def _process(self, payload: bytes) -> tuple[int, dict[str, Any]]:
        """The HTTP-style status to acknowledge the event with (500: redeliver it), and the
        callback response to send with it (empty for events)."""
        try:
            event = json.loads(payload)
        except (ValueError, RecursionError):
            log.warning("feishu long connection: event frame is not JSON; dropped")
            return 200, {}
        if not isinstance(event, dict):
            log.warning("feishu long connection: event frame is not a JSON object; dropped")
            return 200, {}
        try:
            answer = await self._pipeline.process(event, transport="long connection")
        except MalformedEvent as exc:
            log.warning("feishu long connection: malformed event dropped: %s", exc)
            return 200, {}  # redelivery would not fix it
        except BotIdentityUnavailable:
            return 500, {}
        except Exception:
            log.exception("feishu long connection: the event could not be stored; Feishu redelivers it")
            return 500, {}
        return 200, answer

    def _whole_payload(self, headers: dict[str, str], part: bytes) -> bytes | None:
        """The payload, once every part of it arrived (None before)."""
        try:
            total, seq = int(headers.get("sum", "1")), int(headers.get("seq", "0"))
        except ValueError:
            return None
        if total <= 1:
            return part
        if not 0 <= seq < total:
            return None
        now = time.monotonic()
        self._parts = {k: v for k, v in self._parts.items() if now - v[0] < _PARTS_TTL_S}
        message_id = headers.get("message_id", "")
        _, parts = self._parts.setdefault(message_id, (now, [None] * total))
        if len(parts) != total:
            return None
        parts[seq] = part
        if any(p is None for p in parts):
            return None
        del self._parts[message_id]
        return b"".join(p for p in parts if p is not None)

    def _frame(self, method: int, headers: dict[str, Any]) -> Frame:
        frame = self._new_frame()
        frame.SeqID = frame.LogID = 0
        frame.service = self._service_id
        frame.method = method
        for key, value in headers.items():
            header = frame.headers.add()
            header.key, header.value = key, value
        return frame


def _handshake_refusal(exc: aiohttp.WSServerHandshakeError) -> Exception:
    """The typed error a refused websocket handshake stands for."""
    headers: Mapping[str, str] = exc.headers or {}
    try:
        status = int(headers.get(_HANDSHAKE_STATUS, ""))
    except ValueError:
        return LongConnectionUnavailable(f"websocket handshake failed: HTTP {exc.status}")
    if status == _FORBIDDEN or (
        status == _AUTH_FAILED and headers.get(_HANDSHAKE_AUTH_CODE) == str(_TOO_MANY_CONNECTIONS)
    ):
        return LongConnectionRefused(f"websocket handshake refused ({status})")
    return LongConnectionUnavailable(f"websocket handshake failed ({status})")
