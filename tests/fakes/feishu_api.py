# Over 600 lines: one fake Open Platform server (HTTP API, events and the long-connection
# protocol), kept whole so the wire protocol it speaks reads in one place.
"""FakeFeishu: a fake Feishu Open API (and long-connection server) on 127.0.0.1.

It runs in its own thread with its own event loop: lark-oapi's calls block, so a fake served from
the test's loop would never get to answer.

Covers: tenant_access_token/internal, bot/v3/info, im/v1 messages (create, reply — deduplicated
by uuid like Feishu — and card updates), reactions, images, files, message resources, CardKit
cards (create, update, settings, element content with strictly increasing sequences), the ws
endpoint and a websocket
speaking Feishu's protobuf frames (ping/pong, events and card callbacks — split over frames if
asked — and acks, with a callback's response).
Records everything; `fail()` injects error codes.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from aiohttp import WSMsgType, web
from lark_oapi.ws.pb.pbbp2_pb2 import Frame

from tests.waiting import scaled

from .feishu_cards import CODE_CARD_INVALID, card_problem

CONTROL, DATA = 0, 1
SERVICE_ID = 7
MAX_CONTENT_BYTES = 30 * 1024
CODE_TOKEN_INVALID = 99991663
CODE_SEQUENCE = 300317
CODE_NOT_STREAMING = 300309
CODE_TOO_LONG = 230025


@dataclass
class Call:
    route: str
    method: str
    path: str
    query: dict[str, str]
    body: Any


@dataclass
class SentMessage:
    message_id: str
    chat_id: str
    msg_type: str
    content: dict[str, Any]
    uuid: str | None
    reply_to: str | None = None
    reply_in_thread: bool = False
    updates: list[dict[str, Any]] = field(default_factory=list)  # card replacements (PATCH)

    @property
    def shown(self) -> dict[str, Any]:
        """The content as it shows now (the last card update, else as posted)."""
        return self.updates[-1] if self.updates else self.content


@dataclass
class FakeCard:
    card_id: str
    card: dict[str, Any]
    streaming: bool
    sequences: list[int] = field(default_factory=list)
    element_updates: list[tuple[str, str, int]] = field(
        default_factory=list
    )  # (element, text, seq)
    settings: list[dict[str, Any]] = field(default_factory=list)
    updates: list[dict[str, Any]] = field(default_factory=list)  # full card replacements


@dataclass
class _Failure:
    code: int
    msg: str
    status: int
    headers: dict[str, str]
    times: int


class FakeFeishu:
    """A fake Feishu Open API; use as a context manager or start()/stop()."""

    def __init__(
        self,
        *,
        app_secret: str = "fake-secret",
        bot_open_id: str = "ou_bot",
        ping_interval_s: int = 1,
    ) -> None:
        # A unique app id per fake, so that nothing keyed by app id carries over between tests.
        self.app_id = f"cli_{uuid.uuid4().hex[:12]}"
        self.app_secret = app_secret
        self.bot_open_id = bot_open_id
        self.ping_interval_s = ping_interval_s
        self.port = 0
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._tokens: set[str] = set()
        self._failures: dict[str, list[_Failure]] = {}
        self._by_uuid: dict[str, SentMessage] = {}
        self.calls: list[Call] = []
        self.messages: list[SentMessage] = []
        self.reactions: dict[str, tuple[str, str]] = {}  # reaction_id → (message_id, emoji)
        self.removed_reactions: list[str] = []
        self.cards: dict[str, FakeCard] = {}
        self.uploads: dict[str, bytes] = {}  # image_key / file_key → bytes
        self.resources: dict[tuple[str, str], tuple[str, bytes, str, str]] = {}
        self.stored_messages: dict[str, tuple[str, dict[str, Any]]] = {}  # id → (msg_type, content)
        self.stored_items: dict[str, dict[str, Any]] = {}  # id → the message as message.get returns it
        # long connection
        self.ws_connections = 0
        self.ws_acks: list[dict[str, Any]] = []
        self._ws: web.WebSocketResponse | None = None
        self._ws_silent = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    # --- lifecycle ---------------------------------------------------------------------------

    @property
    def domain(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> FakeFeishu:
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, args=(ready,), name="fake-feishu", daemon=True
        )
        self._thread.start()
        if not ready.wait(scaled(10)):
            raise RuntimeError("FakeFeishu did not start")
        return self

    def stop(self) -> None:
        if self._loop is None:
            return
        asyncio.run_coroutine_threadsafe(self._shutdown(), self._loop).result(scaled(10))
        self._loop.call_soon_threadsafe(self._loop.stop)
        assert self._thread is not None
        self._thread.join(scaled(10))
        self._loop = None

    def __enter__(self) -> FakeFeishu:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve(self, ready: threading.Event) -> None:
        self._loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self._loop)
        self._runner = web.AppRunner(self._app(), handle_signals=False)
        self._loop.run_until_complete(self._runner.setup())
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        self._loop.run_until_complete(site.start())
        self.port = self._runner.addresses[0][1]
        ready.set()
        self._loop.run_forever()
        self._loop.close()

    async def _shutdown(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        assert self._runner is not None
        await self._runner.cleanup()

    # --- test controls -----------------------------------------------------------------------

    def fail(
        self,
        route: str,
        *,
        code: int,
        msg: str = "injected failure",
        status: int = 200,
        headers: dict[str, str] | None = None,
        times: int = 1,
    ) -> None:
        """Make the next `times` calls of `route` (e.g. "card.create") answer with `code`."""
        with self._lock:
            self._failures.setdefault(route, []).append(
                _Failure(code, msg, status, headers or {}, times)
            )

    def revoke_tokens(self) -> None:
        """Invalidate every issued tenant token (as if it expired early)."""
        with self._lock:
            self._tokens.clear()

    def add_resource(
        self,
        message_id: str,
        file_key: str,
        data: bytes,
        *,
        kind: str = "file",
        content_type: str = "application/octet-stream",
        filename: str = "file.bin",
    ) -> None:
        """Serve `data` at im/v1/messages/{message_id}/resources/{file_key}?type={kind}."""
        self.resources[(message_id, file_key)] = (kind, data, content_type, filename)

    def add_message(
        self,
        message_id: str,
        msg_type: str,
        content: dict[str, Any],
        *,
        chat_id: str = "oc_group",
        sender: str = "ou_colleague",
        sender_type: str = "user",
        thread_id: str | None = None,
        root_id: str | None = None,
        mentions: list[dict[str, Any]] | None = None,
    ) -> None:
        """A message posted earlier, readable at GET im/v1/messages/{message_id} and, in a
        topic (``thread_id``), listed by GET im/v1/messages?container_id_type=thread. A
        ``sender_type`` "app" message's ``sender`` is the app's id (cli_…)."""
        self.stored_messages[message_id] = (msg_type, content)
        with self._lock:
            created = max([int(m["create_time"]) for m in self.stored_items.values()] + [1_700_000_000_000]) + 1000
        self.stored_items[message_id] = {
            "message_id": message_id,
            "root_id": root_id or "",
            "parent_id": root_id or "",
            "thread_id": thread_id or "",
            "msg_type": msg_type,
            "create_time": str(created),
            "update_time": str(created),
            "deleted": False,
            "updated": False,
            "chat_id": chat_id,
            "sender": {
                "id": sender,
                "id_type": "app_id" if sender_type == "app" else "open_id",
                "sender_type": sender_type,
                "tenant_key": "tenant_fake",
            },
            "body": {"content": json.dumps(content, ensure_ascii=False)},
            "mentions": mentions or [],
            "upper_message_id": "",
        }

    def calls_to(self, route: str) -> list[Call]:
        with self._lock:
            return [c for c in self.calls if c.route == route]

    def ws_push_event(self, payload: dict[str, Any], *, parts: int = 1) -> str:
        """Deliver an event over the current websocket, its payload split over `parts` frames
        (sum/seq headers, as Feishu splits large payloads); returns the frame's message_id."""
        frame_id = uuid.uuid4().hex
        data = json.dumps(payload).encode()
        size = -(-len(data) // parts)
        for seq in range(parts):
            frame = _frame(
                DATA,
                {"type": "event", "message_id": frame_id, "trace_id": frame_id, "sum": str(parts), "seq": str(seq)},
                data[seq * size : (seq + 1) * size],
            )
            self._run(self._ws_send(frame.SerializeToString()))
        return frame_id

    def ws_callback_answer(self, frame_id: str) -> dict[str, Any]:
        """The callback response the app sent back in its ack of `frame_id` (a card action's
        toast), decoded from the ack's base64 `data`; {} if it sent none."""
        with self._lock:
            [ack] = [a for a in self.ws_acks if a["message_id"] == frame_id]
        data = ack["response"].get("data")
        return json.loads(base64.b64decode(data)) if data else {}

    def ws_drop(self) -> None:
        """Close the current websocket from the server side."""
        self._run(self._ws_close())

    def ws_silence(self, silent: bool) -> None:
        """Stop (or resume) answering pings, keeping the socket open: a silent connection."""
        self._ws_silent = silent

    @property
    def ws_open(self) -> bool:
        return self._ws is not None and not self._ws.closed

    def _run(self, coro: Any) -> Any:
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(scaled(10))

    async def _ws_send(self, data: bytes) -> None:
        if self._ws is None or self._ws.closed:
            raise RuntimeError("no websocket connected")
        await self._ws.send_bytes(data)

    async def _ws_close(self) -> None:
        if self._ws is not None:
            await self._ws.close()

    # --- server ------------------------------------------------------------------------------

    def _app(self) -> web.Application:
        app = web.Application()
        r = app.router
        r.add_post("/open-apis/auth/v3/tenant_access_token/internal", self._token)
        r.add_get("/open-apis/bot/v3/info", self._bot_info)
        r.add_post("/open-apis/im/v1/messages", self._create_message)
        r.add_post("/open-apis/im/v1/messages/{message_id}/reply", self._reply_message)
        r.add_post("/open-apis/im/v1/messages/{message_id}/reactions", self._add_reaction)
        r.add_delete(
            "/open-apis/im/v1/messages/{message_id}/reactions/{reaction_id}", self._delete_reaction
        )
        r.add_get("/open-apis/im/v1/messages/{message_id}/resources/{file_key}", self._resource)
        r.add_get("/open-apis/im/v1/messages", self._list_messages)
        r.add_get("/open-apis/im/v1/messages/{message_id}", self._get_message)
        r.add_patch("/open-apis/im/v1/messages/{message_id}", self._patch_message)
        r.add_post("/open-apis/im/v1/images", self._upload_image)
        r.add_post("/open-apis/im/v1/files", self._upload_file)
        r.add_post("/open-apis/cardkit/v1/cards", self._create_card)
        r.add_put("/open-apis/cardkit/v1/cards/{card_id}", self._update_card)
        r.add_patch("/open-apis/cardkit/v1/cards/{card_id}/settings", self._card_settings)
        r.add_put(
            "/open-apis/cardkit/v1/cards/{card_id}/elements/{element_id}/content",
            self._card_content,
        )
        r.add_post("/callback/ws/endpoint", self._ws_endpoint)
        r.add_get("/ws", self._ws_handler)
        return app

    def _next_id(self, prefix: str) -> str:
        return f"{prefix}_fake_{next(self._ids)}"

    async def _begin(
        self, request: web.Request, route: str, *, auth: bool = True
    ) -> tuple[Any, web.Response | None]:
        """Record the call; an injected failure or a bad token short-circuits it."""
        body: Any = None
        # Like Feishu, read JSON whatever the Content-Type (the SDK's token request sends none).
        if not request.content_type.startswith("multipart/") and request.can_read_body:
            body = json.loads(await request.read())
        with self._lock:
            self.calls.append(Call(route, request.method, request.path, dict(request.query), body))
            queue = self._failures.get(route, [])
            failure = queue[0] if queue else None
            if failure is not None:
                failure.times -= 1
                if failure.times <= 0:
                    queue.pop(0)
        if failure is not None:
            return body, web.json_response(
                {"code": failure.code, "msg": failure.msg},
                status=failure.status,
                headers=failure.headers,
            )
        if auth:
            token = request.headers.get("Authorization", "").removeprefix("Bearer ")
            if token not in self._tokens:
                return body, web.json_response(
                    {"code": CODE_TOKEN_INVALID, "msg": "Invalid access token for authorization."},
                    status=400,
                )
        return body, None

    async def _token(self, request: web.Request) -> web.Response:
        body, error = await self._begin(request, "token", auth=False)
        if error:
            return error
        if body.get("app_id") != self.app_id or body.get("app_secret") != self.app_secret:
            return web.json_response({"code": 10014, "msg": "app secret invalid"})
        token = f"t-{uuid.uuid4().hex}"
        with self._lock:
            self._tokens.add(token)
        return web.json_response(
            {"code": 0, "msg": "ok", "tenant_access_token": token, "expire": 7200}
        )

    async def _bot_info(self, request: web.Request) -> web.Response:
        _, error = await self._begin(request, "bot.info")
        if error:
            return error
        return web.json_response(
            {
                "code": 0,
                "msg": "ok",
                "bot": {"open_id": self.bot_open_id, "app_name": "BA Agent", "activate_status": 2},
            }
        )

    async def _create_message(self, request: web.Request) -> web.Response:
        body, error = await self._begin(request, "message.create")
        if error:
            return error
        if request.query.get("receive_id_type") not in ("chat_id", "open_id"):
            return web.json_response({"code": 230001, "msg": "unexpected receive_id_type"})
        return self._store_message(body, chat_id=body["receive_id"])

    async def _reply_message(self, request: web.Request) -> web.Response:
        body, error = await self._begin(request, "message.reply")
        if error:
            return error
        return self._store_message(
            body,
            chat_id="oc_of_" + request.match_info["message_id"],
            reply_to=request.match_info["message_id"],
            reply_in_thread=bool(body.get("reply_in_thread")),
        )

    def _store_message(
        self,
        body: dict[str, Any],
        *,
        chat_id: str,
        reply_to: str | None = None,
        reply_in_thread: bool = False,
    ) -> web.Response:
        content = body["content"]
        if len(content.encode()) > MAX_CONTENT_BYTES:
            return web.json_response({"code": CODE_TOO_LONG, "msg": "message content too long"})
        parsed = json.loads(content)
        is_card_ref = body["msg_type"] == "interactive" and parsed.get("type") == "card"
        if is_card_ref and parsed["data"]["card_id"] not in self.cards:
            return web.json_response({"code": 230099, "msg": "card not found"})
        if body["msg_type"] == "interactive" and not is_card_ref:
            if problem := card_problem(parsed):
                return _card_invalid(problem)
        uuid_ = body.get("uuid")
        with self._lock:
            if uuid_ and uuid_ in self._by_uuid:
                sent = self._by_uuid[uuid_]  # Feishu answers a repeated uuid with the first message
            else:
                sent = SentMessage(
                    self._next_id("om"),
                    chat_id,
                    body["msg_type"],
                    parsed,
                    uuid_,
                    reply_to,
                    reply_in_thread,
                )
                self.messages.append(sent)
                if uuid_:
                    self._by_uuid[uuid_] = sent
        return web.json_response(
            {
                "code": 0,
                "msg": "success",
                "data": {
                    "message_id": sent.message_id,
                    "chat_id": sent.chat_id,
                    "msg_type": sent.msg_type,
                    "create_time": str(int(time.time() * 1000)),
                    "body": {"content": content},
                },
            }
        )

    async def _patch_message(self, request: web.Request) -> web.Response:
        """Update a card message the bot sent: shared cards only (JSON 2.0 cards always are)."""
        body, error = await self._begin(request, "message.patch")
        if error:
            return error
        message_id = request.match_info["message_id"]
        with self._lock:
            sent = next((m for m in self.messages if m.message_id == message_id), None)
        if sent is None or sent.msg_type != "interactive":
            return web.json_response({"code": 230001, "msg": "message not found or not a card"}, status=400)
        card = json.loads(body["content"])
        if problem := card_problem(card):
            return _card_invalid(problem)
        if not card.get("config", {}).get("update_multi"):
            return _card_invalid("a JSON 2.0 card must be shared (config.update_multi)")
        with self._lock:
            sent.updates.append(card)
        return web.json_response({"code": 0, "msg": "success", "data": {}})

    async def _add_reaction(self, request: web.Request) -> web.Response:
        body, error = await self._begin(request, "reaction.create")
        if error:
            return error
        reaction_id = self._next_id("reaction")
        emoji = body["reaction_type"]["emoji_type"]
        with self._lock:
            self.reactions[reaction_id] = (request.match_info["message_id"], emoji)
        return web.json_response(
            {
                "code": 0,
                "msg": "success",
                "data": {
                    "reaction_id": reaction_id,
                    "reaction_type": {"emoji_type": emoji},
                    "operator": {"operator_id": self.app_id, "operator_type": "app"},
                },
            }
        )

    async def _delete_reaction(self, request: web.Request) -> web.Response:
        _, error = await self._begin(request, "reaction.delete")
        if error:
            return error
        reaction_id = request.match_info["reaction_id"]
        with self._lock:
            if reaction_id not in self.reactions:
                return web.json_response({"code": 231003, "msg": "reaction not found"})
            del self.reactions[reaction_id]
            self.removed_reactions.append(reaction_id)
        return web.json_response(
            {"code": 0, "msg": "success", "data": {"reaction_id": reaction_id}}
        )

    async def _get_message(self, request: web.Request) -> web.Response:
        _, error = await self._begin(request, "message.get")
        if error:
            return error
        message_id = request.match_info["message_id"]
        if message_id not in self.stored_messages:
            return web.json_response({"code": 230001, "msg": "message not found"}, status=400)
        msg_type, content = self.stored_messages[message_id]
        item = self.stored_items.get(message_id) or {
            "message_id": message_id, "msg_type": msg_type, "body": {"content": json.dumps(content)},
        }  # fmt: skip
        return web.json_response({"code": 0, "msg": "success", "data": {"items": [item]}})

    async def _list_messages(self, request: web.Request) -> web.Response:
        """im.v1.message.list: a chat's or a topic's messages by create time, paged."""
        _, error = await self._begin(request, "message.list")
        if error:
            return error
        kind, container = request.query.get("container_id_type"), request.query.get("container_id")
        field = {"chat": "chat_id", "thread": "thread_id"}.get(kind or "")
        if field is None or not container:
            return web.json_response({"code": 230001, "msg": "invalid container_id_type"}, status=400)
        items = sorted((i for i in self.stored_items.values() if i[field] == container), key=lambda i: int(i["create_time"]))
        if request.query.get("sort_type") == "ByCreateTimeDesc":
            items.reverse()
        size = min(int(request.query.get("page_size", "20")), 50)
        start = int(request.query.get("page_token") or 0)
        page, more = items[start : start + size], start + size < len(items)
        data = {"has_more": more, "page_token": str(start + size) if more else "", "items": page}
        return web.json_response({"code": 0, "msg": "success", "data": data})

    async def _resource(self, request: web.Request) -> web.StreamResponse:
        _, error = await self._begin(request, "resource.get")
        if error:
            return error
        key = (request.match_info["message_id"], request.match_info["file_key"])
        if key not in self.resources or self.resources[key][0] != request.query.get("type"):
            return web.json_response({"code": 234003, "msg": "resource not found"}, status=400)
        _, data, content_type, filename = self.resources[key]
        return web.Response(
            body=data,
            content_type=content_type,
            headers={"Content-Disposition": f'attachment; filename="{filename}"'},
        )

    async def _upload_image(self, request: web.Request) -> web.Response:
        _, error = await self._begin(request, "image.create")
        if error:
            return error
        form = await _form(request)
        if form.get("image_type") != b"message":
            return web.json_response({"code": 234001, "msg": "bad image_type"})
        image_key = self._next_id("img")
        self.uploads[image_key] = form["image"]
        return web.json_response({"code": 0, "msg": "success", "data": {"image_key": image_key}})

    async def _upload_file(self, request: web.Request) -> web.Response:
        _, error = await self._begin(request, "file.create")
        if error:
            return error
        form = await _form(request)
        if not form.get("file_type") or not form.get("file_name"):
            return web.json_response(
                {"code": 234001, "msg": "file_type and file_name are required"}
            )
        file_key = self._next_id("file")
        self.uploads[file_key] = form["file"]
        return web.json_response({"code": 0, "msg": "success", "data": {"file_key": file_key}})

    async def _create_card(self, request: web.Request) -> web.Response:
        body, error = await self._begin(request, "card.create")
        if error:
            return error
        card = json.loads(body["data"])
        if problem := card_problem(card):
            return _card_invalid(problem)
        card_id = str(7_000_000_000 + next(self._ids))
        with self._lock:
            self.cards[card_id] = FakeCard(
                card_id, card, bool(card.get("config", {}).get("streaming_mode"))
            )
        return web.json_response({"code": 0, "msg": "success", "data": {"card_id": card_id}})

    def _sequenced(
        self, card_id: str, sequence: int
    ) -> tuple[FakeCard | None, web.Response | None]:
        card = self.cards.get(card_id)
        if card is None:
            return None, web.json_response({"code": 300301, "msg": "card not found"})
        if card.sequences and sequence <= card.sequences[-1]:
            return None, web.json_response(
                {"code": CODE_SEQUENCE, "msg": "sequence number compare failed"}
            )
        card.sequences.append(sequence)
        return card, None

    async def _update_card(self, request: web.Request) -> web.Response:
        body, error = await self._begin(request, "card.update")
        if error:
            return error
        if problem := card_problem(json.loads(body["card"]["data"])):
            return _card_invalid(problem)
        with self._lock:
            card, error = self._sequenced(request.match_info["card_id"], body["sequence"])
            if error:
                return error
            assert card is not None
            card.card = json.loads(body["card"]["data"])
            card.streaming = bool(card.card.get("config", {}).get("streaming_mode"))
            card.updates.append(card.card)
        return web.json_response({"code": 0, "msg": "success", "data": {}})

    async def _card_settings(self, request: web.Request) -> web.Response:
        body, error = await self._begin(request, "card.settings")
        if error:
            return error
        with self._lock:
            card, error = self._sequenced(request.match_info["card_id"], body["sequence"])
            if error:
                return error
            assert card is not None
            settings = json.loads(body["settings"])
            card.settings.append(settings)
            card.streaming = bool(settings.get("config", {}).get("streaming_mode", card.streaming))
        return web.json_response({"code": 0, "msg": "success", "data": {}})

    async def _card_content(self, request: web.Request) -> web.Response:
        body, error = await self._begin(request, "card.element.content")
        if error:
            return error
        with self._lock:
            card = self.cards.get(request.match_info["card_id"])
            if card is not None and not card.streaming:
                return web.json_response(
                    {"code": CODE_NOT_STREAMING, "msg": "card is not in streaming mode"}
                )
            card, error = self._sequenced(request.match_info["card_id"], body["sequence"])
            if error:
                return error
            assert card is not None
            card.element_updates.append(
                (request.match_info["element_id"], body["content"], body["sequence"])
            )
        return web.json_response({"code": 0, "msg": "success", "data": {}})

    # --- long connection ---------------------------------------------------------------------

    def _client_config(self) -> dict[str, int]:
        return {
            "ReconnectCount": -1,
            "ReconnectInterval": 1,
            "ReconnectNonce": 0,
            "PingInterval": self.ping_interval_s,
        }

    async def _ws_endpoint(self, request: web.Request) -> web.Response:
        body, error = await self._begin(request, "ws.endpoint", auth=False)
        if error:
            return error
        if body.get("AppID") != self.app_id or body.get("AppSecret") != self.app_secret:
            return web.json_response({"code": 1000040343, "msg": "invalid app"})
        url = (
            f"ws://127.0.0.1:{self.port}/ws?device_id=dev-{next(self._ids)}&service_id={SERVICE_ID}"
        )
        return web.json_response(
            {"code": 0, "msg": "ok", "data": {"URL": url, "ClientConfig": self._client_config()}}
        )

    async def _ws_handler(self, request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        with self._lock:
            self._ws = ws
            self.ws_connections += 1
        async for message in ws:
            if message.type != WSMsgType.BINARY:
                continue
            frame = Frame()
            frame.ParseFromString(message.data)
            headers = {h.key: h.value for h in frame.headers}
            if frame.method == CONTROL and headers.get("type") == "ping" and not self._ws_silent:
                pong = _frame(CONTROL, {"type": "pong"}, json.dumps(self._client_config()).encode())
                await ws.send_bytes(pong.SerializeToString())
            elif frame.method == DATA:
                with self._lock:
                    self.ws_acks.append(
                        {
                            "message_id": headers.get("message_id"),
                            "response": json.loads(frame.payload or b"{}"),
                        }
                    )
        return ws


def _card_invalid(problem: str) -> web.Response:
    return web.json_response(
        {"code": CODE_CARD_INVALID, "msg": f"Failed to create card content, ErrMsg: {problem}"}
    )


async def _form(request: web.Request) -> dict[str, bytes]:
    """Multipart fields as raw bytes (the SDK sends files without a filename, which aiohttp's
    request.post() would decode as text)."""
    fields: dict[str, bytes] = {}
    reader = await request.multipart()
    async for part in reader:
        fields[part.name] = await part.read()  # type: ignore[index, union-attr]
    return fields


def _frame(method: int, headers: dict[str, str], payload: bytes) -> Frame:
    frame = Frame()
    frame.SeqID = 0
    frame.LogID = 0
    frame.service = SERVICE_ID
    frame.method = method
    for key, value in headers.items():
        header = frame.headers.add()
        header.key, header.value = key, value
    frame.payload = payload
    return frame
