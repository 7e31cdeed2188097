# Over 600 lines: one fake Web API, Events API and Socket Mode server, kept whole so the wire
# protocol it speaks reads in one place.
"""A fake Slack Web API for driving the real ``slack_sdk`` / ``slack_bolt`` in tests.

::

    async with FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT") as fake:
        client = AsyncWebClient(base_url=fake.base_url, token="xoxb-test")
        await client.chat_postMessage(channel="C1", text="hi")
        assert fake.posted(channel="C1")[0]["text"] == "hi"

It behaves like Slack where tests can tell the difference: parameters arrive as query
strings, form, multipart or JSON bodies; API errors are HTTP 200 with ``ok: false``;
rate limits are HTTP 429 with ``Retry-After``; private file URLs answer an HTML login
page unless the bot token is sent. It is lenient where Slack's answer would depend on
state a test did not set up: any channel id exists, and messages the fake never saw
(e.g. the user message an event was built from) can still be reacted to or linked.

Socket Mode: ``apps.connections.open`` (app-level ``xapp-`` token) hands out a one-use
``ws://`` URL to this fake; the websocket sends ``hello`` and then whatever a test pushes::

    envelope_id = await fake.socket_send_event(app_mention(...))
    await fake.wait_for_ack(envelope_id)
    await fake.socket_send_interaction(block_actions(...))   # a button click
    await fake.socket_drop()        # or fake.socket_go_silent()

Streamed replies (``chat.startStream`` / ``appendStream`` / ``stopStream``) are kept by
``fake.streams`` (``tests.fakes.slack_streams``), which can also refuse them.

Several workspaces (OAuth installs): ``GET /oauth/v2/authorize?client_id=…&state=…&team=T2``
installs the app into workspace ``T2`` and redirects to the app's redirect URL
(``fake.redirect_urls``) with a one-use ``code``; ``oauth.v2.access`` exchanges it (client id
and secret as HTTP Basic auth or parameters) for that workspace's own bot token. Each token is
its workspace's identity: ``auth.test`` answers its team and bot, posts carry its bot, and
every :class:`SlackCall` records the token it came with. ``fake.uninstall("T2")`` revokes the
workspace's tokens (``token_revoked`` afterwards).
"""

from __future__ import annotations

import asyncio
import base64
import json
import mimetypes
import secrets
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from aiohttp import WSMsgType, web

from . import FakeServer
from .slack_blocks import InvalidBlocks, check_blocks
from .slack_streams import FakeStreams, StreamError

__all__ = ["FakeSlack", "SlackCall", "SlackTeam", "SlackUpload", "SocketAck"]

# Slack timestamps are unix seconds with microseconds; posts start here and step by 100us.
_FIRST_TS_MICROS = 1_700_000_000_000_100
_TS_STEP_MICROS = 100
_MAX_REPLIES_PAGE = 1000
# Message fields chat.postMessage / chat.update store as given.
_MESSAGE_FIELDS = (
    "text",
    "blocks",
    "attachments",
    "metadata",
    "markdown_text",
    "mrkdwn",
    "reply_broadcast",
)
# Fields Slack takes as JSON strings when they arrive form- or query-encoded.
_JSON_FIELDS = ("blocks", "attachments", "metadata", "files", "chunks")
# Methods that take the app-level token (xapp-) rather than the bot token.
_APP_TOKEN_METHODS = frozenset({"apps.connections.open"})

_LOGIN_PAGE = (
    '<!DOCTYPE html><html lang="en-US"><head><meta charset="utf-8"><title>Slack</title></head>'
    '<body><h1>Sign in to your workspace</h1><form action="/signin" method="post"></form>'
    "</body></html>"
)


class _SlackError(Exception):
    """Raised by method handlers; becomes ``{"ok": false, "error": ...}``."""

    def __init__(self, error: str, detail: str | None = None) -> None:
        super().__init__(error)
        self.error = error
        self.detail = detail


@dataclass(frozen=True)
class SlackCall:
    """One Web API call: method name, merged parameters (query + body), lower-cased headers,
    and when it arrived (``time.monotonic()``)."""

    method: str
    params: dict[str, Any]
    headers: dict[str, str]
    at: float = field(default_factory=time.monotonic)
    token: str | None = None  # the token it was made with (header or parameter)


@dataclass(frozen=True)
class SlackTeam:
    """A workspace (or, org-wide, an Enterprise Grid org) the app is installed in, as one bot
    token's identity."""

    team_id: str | None
    team_name: str
    bot_token: str
    bot_user_id: str
    bot_id: str
    enterprise_id: str | None = None
    enterprise_name: str | None = None
    is_enterprise_install: bool = False


@dataclass(frozen=True)
class SlackUpload:
    """A file shared through the v2 upload flow (get URL, POST bytes, completeUploadExternal)."""

    file_id: str
    filename: str
    title: str
    content: bytes
    channel_id: str | None
    thread_ts: str | None
    initial_comment: str | None


@dataclass(frozen=True)
class SocketAck:
    """An acknowledgement the app sent over Socket Mode; ``at`` is ``time.monotonic()``."""

    envelope_id: str
    payload: dict[str, Any] | None
    at: float


@dataclass
class _Socket:
    """One open Socket Mode websocket."""

    ws: web.WebSocketResponse
    request: web.Request
    silent: bool = False


@dataclass
class _Failure:
    error: str
    status: int
    retry_after: int | None
    remaining: int


def _check_blocks(blocks: Any) -> None:
    try:
        check_blocks(blocks)
    except InvalidBlocks as exc:
        raise _SlackError("invalid_blocks", str(exc)) from None


def _as_bool(value: Any) -> bool:
    return value is True or str(value).lower() in ("1", "true")


def _micros(ts: str) -> int:
    seconds, _, fraction = ts.partition(".")
    return int(seconds) * 1_000_000 + int(fraction.ljust(6, "0")[:6])


class FakeSlack(FakeServer):
    """Fake Slack Web API plus file upload/download endpoints.

    State is public for assertions: :attr:`calls`, :attr:`messages` (everything in the
    workspace the fake knows of, in post order), :attr:`files`, :attr:`uploads`,
    :attr:`downloads`, :attr:`assistant_status`, :attr:`socket_acks`,
    :attr:`socket_connections`. Seed it with :meth:`add_user`, :meth:`add_channel`,
    :meth:`add_message` and :meth:`add_file`.
    """

    def __init__(
        self,
        bot_token: str = "xoxb-test",
        bot_user_id: str = "UBOT",
        team_id: str = "T1",
        *,
        bot_id: str = "B1",
        app_id: str = "A1",
        team_domain: str = "test-workspace",
        app_token: str = "xapp-test",
    ) -> None:
        super().__init__()
        self.bot_token = bot_token
        self.app_token = app_token
        self.bot_user_id = bot_user_id
        self.team_id = team_id
        self.bot_id = bot_id
        self.app_id = app_id
        self.team_domain = team_domain
        self.calls: list[SlackCall] = []
        # OAuth: the app's credentials, its redirect URLs, the installs made, tokens by identity.
        self.client_id = "1111111111.2222222222"
        self.client_secret = "fake-client-secret"
        self.redirect_urls: list[str] = []
        self.installs: list[dict[str, Any]] = []  # oauth.v2.access answers, oldest first
        self._teams: dict[str, SlackTeam] = {
            bot_token: SlackTeam(team_id, "Test Workspace", bot_token, bot_user_id, bot_id)
        }
        self._revoked: set[str] = set()
        self._codes: dict[str, tuple[SlackTeam, str | None]] = {}  # code → (team, redirect_uri)
        self._caller = self._teams[bot_token]  # whose token the method being handled came with
        self.messages: list[dict[str, Any]] = []
        self.ephemerals: list[dict[str, Any]] = []  # chat.postEphemeral: seen by one user only
        self.users: dict[str, dict[str, Any]] = {}
        self.channels: dict[str, dict[str, Any]] = {}
        self.files: dict[str, dict[str, Any]] = {}
        self.file_contents: dict[str, bytes] = {}
        self.uploads: list[SlackUpload] = []
        self.downloads: list[str] = []
        self.assistant_status: dict[tuple[str, str], str] = {}
        self.assistant_titles: dict[tuple[str, str], str] = {}
        self.suggested_prompts: dict[tuple[str, str], list[dict[str, str]]] = {}
        # (channel, thread_ts) -> {"status": …, "title": …}: agents.sessions.* (agent sessions)
        self.agent_sessions: dict[tuple[str, str], dict[str, Any]] = {}
        self.views: list[dict[str, Any]] = []  # views.open: modals opened, newest last
        self.socket_acks: list[SocketAck] = []
        self.socket_connections = 0  # websockets ever opened
        self._sockets: list[_Socket] = []  # open ones, oldest first
        self._socket_tickets: set[str] = set()
        self._stall_handshakes = False
        # (channel, ts) -> reaction name -> user ids; kept apart from messages so messages
        # the fake never stored (user posts from events) can be reacted to.
        self.reactions: dict[tuple[str, str], dict[str, list[str]]] = defaultdict(dict)
        self._next_ts = _FIRST_TS_MICROS
        self._failures: dict[str, deque[_Failure]] = defaultdict(deque)
        self._upload_urls: dict[str, tuple[str, str]] = {}  # upload id -> (file id, filename)
        self._uploaded: dict[str, str] = {}  # file id -> filename, awaiting completeUploadExternal
        self._redirected_files: set[str] = set()
        # chat.startStream / appendStream / stopStream (`fake.streams.refuse()` turns them off)
        self.streams = FakeStreams(self._bot_message, self._find_message, bot_id)
        self._methods: dict[str, Callable[[dict[str, Any]], dict[str, Any]]] = {
            "auth.test": self._auth_test,
            "chat.postMessage": self._chat_post_message,
            "chat.update": self._chat_update,
            "chat.postEphemeral": self._chat_post_ephemeral,
            "chat.delete": self._chat_delete,
            "chat.getPermalink": self._chat_get_permalink,
            "chat.startStream": self._streaming(self.streams.start),
            "chat.appendStream": self._streaming(self.streams.append),
            "chat.stopStream": self._streaming(self.streams.stop),
            "reactions.add": self._reactions_add,
            "reactions.remove": self._reactions_remove,
            "assistant.threads.setStatus": self._assistant_set_status,
            "assistant.threads.setTitle": self._assistant_set_title,
            "assistant.threads.setSuggestedPrompts": self._assistant_set_prompts,
            "agents.sessions.setStatus": self._agent_session_set_status,
            "agents.sessions.rename": self._agent_session_rename,
            "views.open": self._views_open,
            "conversations.replies": self._conversations_replies,
            "conversations.history": self._conversations_history,
            "conversations.info": self._conversations_info,
            "users.info": self._users_info,
            "files.getUploadURLExternal": self._files_get_upload_url,
            "files.completeUploadExternal": self._files_complete_upload,
            "files.info": self._files_info,
            "apps.connections.open": self._apps_connections_open,
            "oauth.v2.access": self._oauth_v2_access,
        }
        self.add_user(bot_user_id, "BA Agent", name="ba-agent", is_bot=True)

    @property
    def base_url(self) -> str:
        """Pass as ``AsyncWebClient(base_url=...)``; ends with ``/api/`` like ``https://slack.com/api/``."""
        return f"{self.root_url}/api/"

    # ----------------------------------------------------------------- seeding

    def add_user(
        self, user_id: str, real_name: str, *, name: str | None = None, **fields: Any
    ) -> dict[str, Any]:
        """Register a user for ``users.info``; ``fields`` override the defaults (e.g. ``tz``,
        ``locale``: "zh-CN")."""
        name = name or real_name.lower().replace(" ", ".")
        user = {
            "id": user_id,
            "team_id": self.team_id,
            "name": name,
            "real_name": real_name,
            "deleted": False,
            "is_bot": False,
            "tz": "UTC",
            "tz_offset": 0,
            "locale": "en-US",
            "profile": {"real_name": real_name, "display_name": name, "team": self.team_id},
            **fields,
        }
        self.users[user_id] = user
        return user

    def add_channel(
        self, channel_id: str, name: str | None = None, **fields: Any
    ) -> dict[str, Any]:
        """Register a channel for ``conversations.info`` (unknown ids get prefix-based defaults)."""
        channel = {
            **self._default_channel(channel_id),
            **({"name": name} if name else {}),
            **fields,
        }
        self.channels[channel_id] = channel
        return channel

    def add_message(
        self,
        channel: str,
        text: str,
        user: str,
        *,
        ts: str | None = None,
        thread_ts: str | None = None,
        **fields: Any,
    ) -> dict[str, Any]:
        """Put a (typically human) message into the workspace, e.g. a thread's earlier turns."""
        message = {
            "type": "message",
            "user": user,
            "text": text,
            "ts": ts or self._new_ts(),
            "team": self.team_id,
            "channel": channel,
            **({"thread_ts": thread_ts} if thread_ts else {}),
            **fields,
        }
        self.messages.append(message)
        return message

    def add_app_message(
        self,
        channel: str,
        app_name: str,
        *,
        text: str = "",
        attachments: list[dict[str, Any]] | None = None,
        blocks: list[dict[str, Any]] | None = None,
        thread_ts: str | None = None,
        bot_id: str = "B0OTHERAPP",
    ) -> dict[str, Any]:
        """A message another app posted (an alerting integration): ``subtype: bot_message``
        with its ``bot_id``, ``username`` and ``bot_profile``, legacy ``attachments`` and/or
        ``blocks``, as ``conversations.replies`` returns it."""
        message: dict[str, Any] = {
            "type": "message",
            "subtype": "bot_message",
            "text": text,
            "ts": self._new_ts(),
            "bot_id": bot_id,
            "username": app_name,
            "bot_profile": {"id": bot_id, "name": app_name, "app_id": f"A{bot_id[1:]}", "deleted": False,
                            "team_id": self.team_id},
            "team": self.team_id,
            "channel": channel,
            **({"thread_ts": thread_ts} if thread_ts else {}),
            **({"attachments": attachments} if attachments else {}),
            **({"blocks": blocks} if blocks else {}),
        }  # fmt: skip
        self.messages.append(message)
        return message

    def add_file(
        self,
        name: str,
        content: bytes,
        mimetype: str,
        *,
        user: str = "U_USER",
        redirect: bool = False,
    ) -> dict[str, Any]:
        """Register a user-uploaded file; return its Slack file object (call while running:
        the URLs embed the fake's port).

        Its ``url_private`` / ``url_private_download`` serve ``content`` to requests with
        the bot token, and an HTML login page otherwise. ``redirect=True`` makes them
        answer 302 to another URL on this fake first (that one also checks the token).
        """
        file = self._file_object(
            f"F{secrets.token_hex(5).upper()}", name, name, mimetype, len(content), user
        )
        self.files[file["id"]] = file
        self.file_contents[file["id"]] = content
        if redirect:
            self._redirected_files.add(file["id"])
        return file

    # ----------------------------------------------------------------- workspaces (OAuth)

    def team(self, team_id: str, *, enterprise_id: str | None = None, org_wide: bool = False) -> SlackTeam:
        """The workspace ``team_id`` as the next install into it makes it (a new bot token;
        ``org_wide``: the whole org ``enterprise_id``, no team)."""
        suffix = enterprise_id if org_wide else team_id
        assert suffix is not None
        return SlackTeam(
            team_id=None if org_wide else team_id,
            team_name=f"Workspace {team_id}",
            bot_token=f"xoxb-{suffix}-{secrets.token_hex(8)}",
            bot_user_id=f"UBOT{suffix}",
            bot_id=f"B{suffix}",
            enterprise_id=enterprise_id,
            enterprise_name=f"Org {enterprise_id}" if enterprise_id else None,
            is_enterprise_install=org_wide,
        )

    def token_of(self, team_id: str) -> str:
        """The newest live bot token of workspace (or org) ``team_id``."""
        return [
            token
            for token, team in self._teams.items()
            if token not in self._revoked and team_id in (team.team_id, team.enterprise_id)
        ][-1]

    def uninstall(self, team_id: str) -> None:
        """Revoke the tokens of workspace (or org) ``team_id``, as uninstalling the app does."""
        self._revoked.update(
            token for token, team in self._teams.items() if team_id in (team.team_id, team.enterprise_id)
        )

    def calls_with(self, token: str, method: str | None = None) -> list[SlackCall]:
        """Calls made with ``token`` (to ``method``), oldest first."""
        return [c for c in self.calls if c.token == token and (method is None or c.method == method)]

    async def _authorize(self, request: web.Request) -> web.Response:
        """Slack's install page, approved at once: redirect back with a code for the workspace
        the ``team`` parameter names (default: this fake's own)."""
        query = request.query
        if query.get("client_id") != self.client_id:
            return web.Response(status=400, text="invalid client_id")
        redirect_uri = query.get("redirect_uri")
        if redirect_uri is not None and redirect_uri not in self.redirect_urls:
            return web.Response(status=400, text="redirect_uri did not match any configured URIs")
        if not (redirect_uri or self.redirect_urls):
            return web.Response(status=400, text="no redirect URL configured")
        team_id = query.get("team") or self.team_id
        org = query.get("enterprise")
        team = self.team(team_id, enterprise_id=org, org_wide=org is not None and "org_wide" in query)
        code = secrets.token_hex(12)
        self._codes[code] = (team, redirect_uri)
        target = redirect_uri or self.redirect_urls[0]
        location = f"{target}?{urlencode({'code': code, 'state': query.get('state', '')})}"
        raise web.HTTPFound(location)

    def _oauth_v2_access(self, params: dict[str, Any]) -> dict[str, Any]:
        if params.get("client_id") != self.client_id:
            raise _SlackError("invalid_client_id")
        if params.get("client_secret") != self.client_secret:
            raise _SlackError("bad_client_secret")
        issued = self._codes.pop(str(params.get("code")), None)
        if issued is None:
            raise _SlackError("invalid_code")
        team, redirect_uri = issued
        if redirect_uri is not None and params.get("redirect_uri") != redirect_uri:
            raise _SlackError("bad_redirect_uri")
        self._teams[team.bot_token] = team
        self.add_user(team.bot_user_id, "BA Agent", name="ba-agent", is_bot=True)
        answer = {
            "app_id": self.app_id,
            "authed_user": {"id": "U_INSTALLER"},
            "scope": str(params.get("scope") or "chat:write"),
            "token_type": "bot",
            "access_token": team.bot_token,
            "bot_user_id": team.bot_user_id,
            "team": None if team.team_id is None else {"id": team.team_id, "name": team.team_name},
            "enterprise": (
                None if team.enterprise_id is None else {"id": team.enterprise_id, "name": team.enterprise_name}
            ),
            "is_enterprise_install": team.is_enterprise_install,
        }
        self.installs.append(answer)
        return answer

    # ----------------------------------------------------------------- failure injection

    def fail_next(
        self,
        method: str,
        error: str = "ratelimited",
        status: int = 429,
        retry_after: int | None = 1,
        times: int = 1,
    ) -> None:
        """Fail the next ``times`` calls to ``method``.

        ``status=429`` answers like Slack's rate limiter (with ``Retry-After`` unless
        ``retry_after`` is None); ``status=200`` answers ``{"ok": false, "error": error}``.
        """
        self._failures[method].append(_Failure(error, status, retry_after, times))

    # ----------------------------------------------------------------- socket mode

    @property
    def socket_open(self) -> int:
        """Socket Mode websockets open now (silent ones included)."""
        return len(self._sockets)

    async def socket_send_event(
        self,
        payload: dict[str, Any],
        retry_attempt: int = 0,
        retry_reason: str | None = None,
        *,
        envelope_id: str | None = None,
        timeout: float = 5,
    ) -> str:
        """Deliver an ``events_api`` envelope (``payload``: an event_callback, e.g. from
        ``slack_events.app_mention``) on the newest live websocket; return its envelope id.

        Like Slack, it waits (up to ``timeout``) for a live connection rather than losing the
        event; silent connections are skipped. A redelivery passes ``retry_attempt >= 1``
        (``retry_reason`` then defaults to ``"timeout"``) and may reuse ``envelope_id``.
        """
        return await self._socket_send(
            {
                "envelope_id": envelope_id or str(uuid.uuid4()),
                "payload": payload,
                "type": "events_api",
                "accepts_response_payload": False,
                "retry_attempt": retry_attempt,
                "retry_reason": retry_reason or ("timeout" if retry_attempt else ""),
            },
            timeout,
        )

    async def socket_send_interaction(self, payload: dict[str, Any], *, timeout: float = 5) -> str:
        """Deliver an ``interactive`` envelope (``payload``: e.g. ``slack_events.block_actions``,
        a button click) on the newest live websocket, as Slack does in Socket Mode; return its
        envelope id."""
        return await self._socket_send(
            {
                "envelope_id": str(uuid.uuid4()),
                "payload": payload,
                "type": "interactive",
                "accepts_response_payload": True,
            },
            timeout,
        )

    async def _socket_send(self, envelope: dict[str, Any], timeout: float) -> str:
        await self._wait_until(
            lambda: self._live_socket() is not None, timeout, "a live socket mode connection"
        )
        socket = self._live_socket()
        assert socket is not None
        await socket.ws.send_json(envelope)
        return str(envelope["envelope_id"])

    async def socket_drop(self, *, abort: bool = False) -> None:
        """End every open websocket: with a close frame, or (``abort=True``) by cutting the TCP
        connection without one, as a network failure would."""
        for socket in list(self._sockets):
            if abort:
                socket.request.transport.abort()  # type: ignore[union-attr]
            else:
                await socket.ws.close()

    async def socket_send_disconnect(self, reason: str = "refresh_requested") -> None:
        """Ask the app to move to a new connection, as Slack does every few hours; the app is
        expected to open one and close this one."""
        socket = self._live_socket()
        if socket is None:
            raise RuntimeError("no live socket mode connection")
        await socket.ws.send_json(
            {"type": "disconnect", "reason": reason, "debug_info": {"host": "applink-fake"}}
        )

    def socket_go_silent(self) -> None:
        """Make the open websockets silent: no pongs, no events, acks ignored, TCP kept open.

        Connections opened afterwards behave normally.
        """
        for socket in self._sockets:
            socket.silent = True

    def socket_stall_handshakes(self, stall: bool = True) -> None:
        """Hold websocket handshakes unanswered (TCP accepted, no upgrade) until called with
        ``False``; handshakes already waiting then complete."""
        self._stall_handshakes = stall

    def acks_of(self, envelope_id: str) -> list[SocketAck]:
        """The app's acknowledgements of ``envelope_id`` (more than one if it was redelivered)."""
        return [ack for ack in self.socket_acks if ack.envelope_id == envelope_id]

    async def wait_for_ack(self, envelope_id: str, count: int = 1, timeout: float = 5) -> SocketAck:
        """Wait until the app acknowledged ``envelope_id`` ``count`` times; return the last ack."""
        await self._wait_until(
            lambda: len(self.acks_of(envelope_id)) >= count, timeout, f"ack of {envelope_id}"
        )
        return self.acks_of(envelope_id)[-1]

    async def wait_for_socket_connections(self, count: int, timeout: float = 5) -> None:
        """Wait until ``count`` websockets were opened in all and one of them is live."""
        await self._wait_until(
            lambda: self.socket_connections >= count and self._live_socket() is not None,
            timeout,
            f"socket mode connection #{count}",
        )

    def _live_socket(self) -> _Socket | None:
        live = [s for s in self._sockets if not s.silent and not s.ws.closed]
        return live[-1] if live else None

    async def close(self) -> None:
        # Open websockets would hold up the server's shutdown.
        for socket in list(self._sockets):
            socket.request.transport.abort()  # type: ignore[union-attr]
        await super().close()

    # ----------------------------------------------------------------- inspection

    def calls_to(self, method: str) -> list[SlackCall]:
        """Calls made to ``method``, oldest first."""
        return [call for call in self.calls if call.method == method]

    def posted(
        self, channel: str | None = None, thread_ts: str | None = None
    ) -> list[dict[str, Any]]:
        """Current state of the bot's own (non-deleted) messages, optionally filtered."""
        return [
            m
            for m in self.messages
            if m.get("bot_id") in self._bot_ids
            and (channel is None or m["channel"] == channel)
            and (thread_ts is None or m.get("thread_ts") == thread_ts)
        ]

    @property
    def _bot_ids(self) -> set[str]:
        return {team.bot_id for team in self._teams.values()}

    @staticmethod
    def markdown_of(message: dict[str, Any]) -> str:
        """The Markdown a message shows: its ``markdown_text``, or its markdown blocks' text (a
        message with other blocks too, such as feedback buttons, carries it that way)."""
        if "markdown_text" in message:
            return str(message["markdown_text"])
        return "\n\n".join(str(b.get("text")) for b in message.get("blocks") or [] if b.get("type") == "markdown")

    def reactions_on(self, channel: str, ts: str) -> list[str]:
        """Names of the reactions currently on a message."""
        return [name for name, users in self.reactions.get((channel, ts), {}).items() if users]

    async def wait_for(self, method: str, count: int = 1, timeout: float = 5) -> list[SlackCall]:
        """Wait until ``method`` was called at least ``count`` times; return those calls."""
        await self._wait_until(
            lambda: len(self.calls_to(method)) >= count, timeout, f"{count} x {method}"
        )
        return self.calls_to(method)

    def wait_for_sync(self, method: str, count: int = 1, timeout: float = 5) -> list[SlackCall]:
        """Blocking :meth:`wait_for`, for sync tests using :meth:`in_thread`."""
        self._wait_until_sync(
            lambda: len(self.calls_to(method)) >= count, timeout, f"{count} x {method}"
        )
        return self.calls_to(method)

    # ----------------------------------------------------------------- HTTP plumbing

    def _routes(self) -> list[web.RouteDef]:
        return [
            web.route("*", "/api/{method}", self._api),
            web.post("/upload/v1/{upload_id}", self._upload),
            web.get("/files-pri/{team_file}/{name}", self._download),
            web.get("/files-pri/{team_file}/download/{name}", self._download),
            web.get("/files-redirected/{file_id}/{name}", self._download_redirected),
            web.get("/socket", self._socket),
            web.get("/oauth/v2/authorize", self._authorize),
        ]

    async def _api(self, request: web.Request) -> web.Response:
        method = request.match_info["method"]
        params = await self._params(request)
        headers = {k.lower(): v for k, v in request.headers.items()}
        authorization = headers.get("authorization", "")
        token = authorization.removeprefix("Bearer ").strip() if authorization.startswith("Bearer ") else None
        token = token or params.get("token")
        self.calls.append(SlackCall(method, params, headers, token=token))

        if failure := self._take_failure(method):
            failure_headers = {}
            if failure.status == 429 and failure.retry_after is not None:
                failure_headers["Retry-After"] = str(failure.retry_after)
            return self._json(
                {"ok": False, "error": failure.error},
                status=failure.status,
                headers=failure_headers,
            )

        if method == "oauth.v2.access":  # the app's client credentials, no token
            if authorization.startswith("Basic "):
                client_id, _, secret = base64.b64decode(authorization[6:]).decode().partition(":")
                params = {**params, "client_id": client_id, "client_secret": secret}
            return self._answer(method, params)
        if not token:
            return self._json({"ok": False, "error": "not_authed"})
        if token in self._revoked:
            return self._json({"ok": False, "error": "token_revoked"})
        if method in _APP_TOKEN_METHODS:
            if token != self.app_token:
                error = "not_allowed_token_type" if token in self._teams else "invalid_auth"
                return self._json({"ok": False, "error": error})
        elif token not in self._teams:
            error = "not_allowed_token_type" if token == self.app_token else "invalid_auth"
            return self._json({"ok": False, "error": error})
        else:
            self._caller = self._teams[token]
        return self._answer(method, params)

    def _answer(self, method: str, params: dict[str, Any]) -> web.Response:
        handler = self._methods.get(method)
        if handler is None:
            return self._json({"ok": False, "error": "unknown_method", "req_method": method})
        try:
            return self._json({"ok": True, **handler(params)})
        except _SlackError as exc:
            body: dict[str, Any] = {"ok": False, "error": exc.error}
            if exc.detail:
                body["response_metadata"] = {"messages": [f"[ERROR] {exc.detail}"]}
            return self._json(body)

    @staticmethod
    async def _params(request: web.Request) -> dict[str, Any]:
        """Merge query-string and body parameters the way Slack accepts them."""
        params: dict[str, Any] = dict(request.query)
        if request.content_type == "application/json":
            params.update(await request.json())
        elif request.can_read_body:
            for key, value in (await request.post()).items():
                params[key] = value.file.read() if isinstance(value, web.FileField) else value
        for key in _JSON_FIELDS:
            if isinstance(params.get(key), str) and params[key]:
                params[key] = json.loads(params[key])
        return params

    def _take_failure(self, method: str) -> _Failure | None:
        queue = self._failures.get(method)
        if not queue:
            return None
        failure = queue[0]
        failure.remaining -= 1
        if failure.remaining <= 0:
            queue.popleft()
        return failure

    @staticmethod
    def _json(
        body: dict[str, Any], status: int = 200, headers: Mapping[str, str] | None = None
    ) -> web.Response:
        all_headers = {"x-slack-req-id": secrets.token_hex(16), **(headers or {})}
        return web.json_response(body, status=status, headers=all_headers)

    def _new_ts(self) -> str:
        micros = self._next_ts
        self._next_ts += _TS_STEP_MICROS
        return f"{micros // 1_000_000}.{micros % 1_000_000:06d}"

    @staticmethod
    def _require(params: dict[str, Any], *names: str) -> None:
        for name in names:
            if params.get(name) in (None, ""):
                raise _SlackError("invalid_arguments", f"missing required field: {name}")

    def _find_message(self, channel: str, ts: str) -> dict[str, Any]:
        for message in self.messages:
            if message["channel"] == channel and message["ts"] == ts:
                return message
        raise _SlackError("message_not_found")

    def _public(self, message: dict[str, Any], *, with_metadata: bool = True) -> dict[str, Any]:
        """A stored message as the API returns it (no channel; reactions attached)."""
        hidden = {"channel"} if with_metadata else {"channel", "metadata"}
        public = {k: v for k, v in message.items() if k not in hidden}
        if reactions := self.reactions.get((message["channel"], message["ts"])):
            public["reactions"] = [
                {"name": name, "users": users, "count": len(users)}
                for name, users in reactions.items()
                if users
            ]
        return public

    def _bot_message(self, channel: str, **fields: Any) -> dict[str, Any]:
        message = {
            "type": "message",
            "user": self._caller.bot_user_id,
            "bot_id": self._caller.bot_id,
            "app_id": self.app_id,
            "ts": self._new_ts(),
            "team": self._caller.team_id or self.team_id,
            "channel": channel,
            **fields,
        }
        self.messages.append(message)
        return message

    # ----------------------------------------------------------------- methods

    @staticmethod
    def _ok(params: dict[str, Any]) -> dict[str, Any]:
        return {}

    @staticmethod
    def _streaming(
        method: Callable[[dict[str, Any]], dict[str, Any]],
    ) -> Callable[[dict[str, Any]], dict[str, Any]]:
        def handle(params: dict[str, Any]) -> dict[str, Any]:
            try:
                return method(params)
            except StreamError as exc:
                raise _SlackError(exc.error, exc.detail) from None

        return handle

    def _apps_connections_open(self, params: dict[str, Any]) -> dict[str, Any]:
        ticket = str(uuid.uuid4())
        self._socket_tickets.add(ticket)
        return {"url": f"ws://127.0.0.1:{self.port}/socket?ticket={ticket}&app_id={self.app_id}"}

    def _auth_test(self, params: dict[str, Any]) -> dict[str, Any]:
        caller = self._caller
        return {
            "url": f"https://{self.team_domain}.slack.com/",
            "team": caller.team_name,
            "user": self.users[caller.bot_user_id]["name"],
            "team_id": caller.team_id,
            "user_id": caller.bot_user_id,
            "bot_id": caller.bot_id,
            "is_enterprise_install": caller.is_enterprise_install,
            **({"enterprise_id": caller.enterprise_id} if caller.enterprise_id else {}),
        }

    def _chat_post_message(self, params: dict[str, Any]) -> dict[str, Any]:
        self._require(params, "channel")
        if not any(params.get(key) for key in ("text", "blocks", "attachments", "markdown_text")):
            raise _SlackError("no_text")
        _check_blocks(params.get("blocks"))
        fields = {key: params[key] for key in _MESSAGE_FIELDS if key in params}
        if "mrkdwn" in fields:
            fields["mrkdwn"] = _as_bool(fields["mrkdwn"])
        if "text" not in fields and "markdown_text" in fields:
            fields["text"] = fields[
                "markdown_text"
            ]  # Slack renders markdown_text into the message text
        if params.get("thread_ts"):
            fields["thread_ts"] = params["thread_ts"]
        message = self._bot_message(params["channel"], **fields)
        return {
            "channel": message["channel"],
            "ts": message["ts"],
            "message": self._public(message),
        }

    def _chat_post_ephemeral(self, params: dict[str, Any]) -> dict[str, Any]:
        self._require(params, "channel", "user")
        if not any(params.get(key) for key in ("text", "blocks", "attachments")):
            raise _SlackError("no_text")
        self.ephemerals.append({key: params[key] for key in ("channel", "user", "text", "thread_ts") if key in params})
        return {"message_ts": self._new_ts()}

    def _chat_update(self, params: dict[str, Any]) -> dict[str, Any]:
        self._require(params, "channel", "ts")
        message = self._find_message(params["channel"], params["ts"])
        if message.get("bot_id") != self._caller.bot_id:
            raise _SlackError("cant_update_message")
        _check_blocks(params.get("blocks"))
        # New content replaces the old: markdown_text is rendered into the message's blocks.
        if "markdown_text" in params:
            message.pop("blocks", None)
        elif "blocks" in params or "text" in params:
            message.pop("markdown_text", None)
        message.update({key: params[key] for key in _MESSAGE_FIELDS if key in params})
        if "text" not in params and "markdown_text" in params:
            message["text"] = params["markdown_text"]
        message["edited"] = {"user": self._caller.bot_user_id, "ts": self._new_ts()}
        return {
            "channel": message["channel"],
            "ts": message["ts"],
            "text": message.get("text", ""),
            "message": self._public(message),
        }

    def _chat_delete(self, params: dict[str, Any]) -> dict[str, Any]:
        self._require(params, "channel", "ts")
        message = self._find_message(params["channel"], params["ts"])
        if message.get("bot_id") != self._caller.bot_id:
            raise _SlackError("cant_delete_message")
        self.messages.remove(message)
        return {"channel": message["channel"], "ts": message["ts"]}

    def _chat_get_permalink(self, params: dict[str, Any]) -> dict[str, Any]:
        self._require(params, "channel", "message_ts")
        channel, ts = params["channel"], params["message_ts"]
        permalink = (
            f"https://{self.team_domain}.slack.com/archives/{channel}/p{ts.replace('.', '')}"
        )
        thread_ts = next(
            (
                m.get("thread_ts")
                for m in self.messages
                if m["channel"] == channel and m["ts"] == ts
            ),
            None,
        )
        if thread_ts and thread_ts != ts:
            permalink += f"?thread_ts={thread_ts}&cid={channel}"
        return {"channel": channel, "permalink": permalink}

    def _reactions_add(self, params: dict[str, Any]) -> dict[str, Any]:
        self._require(params, "channel", "timestamp", "name")
        users = self.reactions[(params["channel"], params["timestamp"])].setdefault(
            params["name"], []
        )
        if self.bot_user_id in users:
            raise _SlackError("already_reacted")
        users.append(self.bot_user_id)
        return {}

    def _reactions_remove(self, params: dict[str, Any]) -> dict[str, Any]:
        self._require(params, "channel", "timestamp", "name")
        users = self.reactions[(params["channel"], params["timestamp"])].get(params["name"], [])
        if self.bot_user_id not in users:
            raise _SlackError("no_reaction")
        users.remove(self.bot_user_id)
        return {}

    def _assistant_set_status(self, params: dict[str, Any]) -> dict[str, Any]:
        self._require(params, "channel_id", "thread_ts")
        self.assistant_status[(params["channel_id"], params["thread_ts"])] = params.get(
            "status", ""
        )
        return {}

    def _assistant_set_title(self, params: dict[str, Any]) -> dict[str, Any]:
        self._require(params, "channel_id", "thread_ts", "title")
        self.assistant_titles[(params["channel_id"], params["thread_ts"])] = params["title"]
        return {}

    def _assistant_set_prompts(self, params: dict[str, Any]) -> dict[str, Any]:
        self._require(params, "channel_id", "thread_ts", "prompts")
        prompts = params["prompts"]
        if not isinstance(prompts, list) or not 1 <= len(prompts) <= 4:
            raise _SlackError("invalid_arguments", "prompts: between 1 and 4 items")
        if any(not isinstance(p, dict) or not p.get("title") or not p.get("message") for p in prompts):
            raise _SlackError("invalid_arguments", "each prompt needs a title and a message")
        self.suggested_prompts[(params["channel_id"], params["thread_ts"])] = prompts
        return {}

    def _agent_session_set_status(self, params: dict[str, Any]) -> dict[str, Any]:
        """Creates the session of a thread (with its title, on creation only) or sets its status."""
        self._require(params, "status")
        if params["status"] not in ("active", "processing", "suspended", "closed"):
            raise _SlackError("invalid_arguments", "status")
        key = (params.get("channel_id", ""), params.get("thread_ts", ""))
        session = self.agent_sessions.setdefault(key, {"title": params.get("title"), "statuses": []})
        session["status"] = params["status"]
        session["statuses"].append(params["status"])
        return {"status": params["status"], "title": session["title"]}

    def _agent_session_rename(self, params: dict[str, Any]) -> dict[str, Any]:
        self._require(params, "title")
        key = (params.get("channel_id", ""), params.get("thread_ts", ""))
        if key not in self.agent_sessions:
            raise _SlackError("session_not_found")
        self.agent_sessions[key]["title"] = params["title"]
        return {}

    def _views_open(self, params: dict[str, Any]) -> dict[str, Any]:
        self._require(params, "trigger_id", "view")
        view = params["view"]
        if isinstance(view, str):
            view = json.loads(view)
        opened = {**view, "id": f"V{secrets.token_hex(5).upper()}", "team_id": self.team_id}
        self.views.append(opened)
        return {"view": opened}

    def click_stop(self, channel: str, thread_ts: str) -> list[str]:
        """A person clicks Stop on the thread's agent session: Slack stops the app's live
        streams there itself and returns their timestamps (the event's `streaming_message_ts`)."""
        stopped = []
        for stream in self.streams.streams:
            if stream.channel == channel and stream.thread_ts == thread_ts and not stream.stopped:
                stream.stopped = True
                stopped.append(stream.ts)
        return stopped

    def _conversations_history(self, params: dict[str, Any]) -> dict[str, Any]:
        """Top-level messages of a channel, newest first, after ``oldest`` when given."""
        self._require(params, "channel")
        oldest = _micros(params["oldest"]) if params.get("oldest") else -1
        top_level = [
            m
            for m in self.messages
            if m["channel"] == params["channel"]
            and m.get("thread_ts") in (None, m["ts"])
            and _micros(m["ts"]) > oldest
        ]
        top_level.sort(key=lambda m: _micros(m["ts"]), reverse=True)
        with_metadata = _as_bool(params.get("include_all_metadata", False))
        limit = int(params.get("limit", 100))
        return {
            "messages": [self._public(m, with_metadata=with_metadata) for m in top_level[:limit]],
            "has_more": False,
        }

    def _conversations_replies(self, params: dict[str, Any]) -> dict[str, Any]:
        self._require(params, "channel", "ts")
        channel, ts = params["channel"], params["ts"]
        thread = sorted(
            (
                m
                for m in self.messages
                if m["channel"] == channel and (m["ts"] == ts or m.get("thread_ts") == ts)
            ),
            key=lambda m: _micros(m["ts"]),
        )
        if not thread:
            raise _SlackError("thread_not_found")
        # As Slack: replies after ``oldest`` and before ``latest`` (either bound included only
        # with ``inclusive``); the parent message always comes first.
        inclusive = _as_bool(params.get("inclusive", False))
        latest = _micros(params["latest"]) if params.get("latest") else None
        oldest = _micros(params["oldest"]) if params.get("oldest") else None
        thread = [
            m
            for m in thread
            if m["ts"] == ts
            or (
                (latest is None or _micros(m["ts"]) < latest or (inclusive and _micros(m["ts"]) == latest))
                and (oldest is None or _micros(m["ts"]) > oldest or (inclusive and _micros(m["ts"]) == oldest))
            )
        ]
        with_metadata = _as_bool(params.get("include_all_metadata", False))
        public = [self._public(m, with_metadata=with_metadata) for m in thread]
        replies = [m for m in thread if m["ts"] != ts]
        if replies and public[0]["ts"] == ts:
            public[0].update(
                {
                    "thread_ts": ts,
                    "reply_count": len(replies),
                    "reply_users": sorted({m["user"] for m in replies if "user" in m}),
                    "latest_reply": replies[-1]["ts"],
                }
            )

        offset = self._decode_cursor(params["cursor"]) if params.get("cursor") else 0
        limit = min(int(params.get("limit") or _MAX_REPLIES_PAGE), _MAX_REPLIES_PAGE)
        page = public[offset : offset + limit]
        has_more = offset + limit < len(public)
        next_cursor = (
            base64.b64encode(f"offset:{offset + limit}".encode()).decode() if has_more else ""
        )
        return {
            "messages": page,
            "has_more": has_more,
            "response_metadata": {"next_cursor": next_cursor},
        }

    @staticmethod
    def _decode_cursor(cursor: str) -> int:
        try:
            return int(base64.b64decode(cursor).decode().removeprefix("offset:"))
        except ValueError as exc:  # binascii.Error and UnicodeDecodeError are ValueErrors
            raise _SlackError("invalid_cursor") from exc

    def _default_channel(self, channel_id: str) -> dict[str, Any]:
        is_im, is_private = channel_id.startswith("D"), channel_id.startswith("G")
        return {
            "id": channel_id,
            "name": channel_id.lower(),
            "created": 1_600_000_000,
            "is_channel": not (is_im or is_private),
            "is_group": is_private,
            "is_im": is_im,
            "is_mpim": False,
            "is_private": is_im or is_private,
            "is_archived": False,
            "is_member": True,
        }

    def _conversations_info(self, params: dict[str, Any]) -> dict[str, Any]:
        self._require(params, "channel")
        return {
            "channel": self.channels.get(params["channel"])
            or self._default_channel(params["channel"])
        }

    def _users_info(self, params: dict[str, Any]) -> dict[str, Any]:
        self._require(params, "user")
        if params["user"] not in self.users:
            raise _SlackError("user_not_found")
        user = dict(self.users[params["user"]])
        if str(params.get("include_locale", "")).lower() not in ("1", "true"):
            user.pop("locale", None)  # as Slack: the locale only when asked for
        return {"user": user}

    # ----------------------------------------------------------------- files

    def _file_object(
        self, file_id: str, name: str, title: str, mimetype: str, size: int, user: str
    ) -> dict[str, Any]:
        path = f"{self.root_url}/files-pri/{self.team_id}-{file_id}"
        quoted = quote(name)
        return {
            "id": file_id,
            "created": int(time.time()),
            "timestamp": int(time.time()),
            "name": name,
            "title": title,
            "mimetype": mimetype,
            "filetype": name.rpartition(".")[2].lower() if "." in name else "binary",
            "user": user,
            "user_team": self.team_id,
            "size": size,
            "mode": "hosted",
            "is_external": False,
            "is_public": False,
            "url_private": f"{path}/{quoted}",
            "url_private_download": f"{path}/download/{quoted}",
            "permalink": f"https://{self.team_domain}.slack.com/files/{user}/{file_id}/{quoted}",
        }

    def _files_get_upload_url(self, params: dict[str, Any]) -> dict[str, Any]:
        self._require(params, "filename", "length")
        file_id = f"F{secrets.token_hex(5).upper()}"
        upload_id = secrets.token_urlsafe(16)
        self._upload_urls[upload_id] = (file_id, params["filename"])
        return {"upload_url": f"{self.root_url}/upload/v1/{upload_id}", "file_id": file_id}

    async def _upload(self, request: web.Request) -> web.Response:
        pending = self._upload_urls.pop(request.match_info["upload_id"], None)
        if pending is None:
            return web.Response(status=404, text="upload url not found or already used")
        if request.content_type.startswith("multipart/"):
            form = await request.post()
            field = next((v for v in form.values() if isinstance(v, web.FileField)), None)
            content = field.file.read() if field else b""
        else:
            content = await request.read()
        file_id, filename = pending
        self.file_contents[file_id] = content
        self._uploaded[file_id] = filename
        return web.Response(text=f"OK - {len(content)}", content_type="text/plain")

    def _files_complete_upload(self, params: dict[str, Any]) -> dict[str, Any]:
        self._require(params, "files")
        channel_id = (
            params.get("channel_id") or (params.get("channels") or "").split(",")[0] or None
        )
        thread_ts = params.get("thread_ts") or None
        initial_comment = params.get("initial_comment") or None
        completed = []
        for entry in params["files"]:
            filename = self._uploaded.pop(entry["id"], None)
            if filename is None:
                raise _SlackError("file_not_found", f"file {entry['id']} was never uploaded")
            content = self.file_contents[entry["id"]]
            title = entry.get("title") or filename
            mimetype = mimetypes.guess_type(filename)[0] or "application/octet-stream"
            file = self._file_object(
                entry["id"], filename, title, mimetype, len(content), self.bot_user_id
            )
            self.files[file["id"]] = file
            self.uploads.append(
                SlackUpload(
                    file["id"], filename, title, content, channel_id, thread_ts, initial_comment
                )
            )
            completed.append(file)
        if channel_id:
            self._bot_message(
                channel_id,
                text=initial_comment or "",
                files=completed,
                upload=True,
                **({"thread_ts": thread_ts} if thread_ts else {}),
            )
        return {"files": completed}

    def _files_info(self, params: dict[str, Any]) -> dict[str, Any]:
        self._require(params, "file")
        if params["file"] not in self.files:
            raise _SlackError("file_not_found")
        return {"file": self.files[params["file"]]}

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization", "") == f"Bearer {self.bot_token}"

    def _serve_file(self, request: web.Request, file_id: str) -> web.Response:
        if file_id not in self.files:
            return web.Response(status=404, text="file not found")
        if not self._authorized(request):
            # Slack does not 401 a tokenless download: it serves its sign-in page.
            return web.Response(text=_LOGIN_PAGE, content_type="text/html")
        self.downloads.append(file_id)
        return web.Response(
            body=self.file_contents[file_id], content_type=self.files[file_id]["mimetype"]
        )

    async def _download(self, request: web.Request) -> web.Response:
        file_id = request.match_info["team_file"].removeprefix(f"{self.team_id}-")
        if file_id in self._redirected_files:
            raise web.HTTPFound(f"/files-redirected/{file_id}/{quote(request.match_info['name'])}")
        return self._serve_file(request, file_id)

    async def _download_redirected(self, request: web.Request) -> web.Response:
        return self._serve_file(request, request.match_info["file_id"])

    # ----------------------------------------------------------------- socket mode server

    async def _socket(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._socket_tickets:
            return web.Response(status=401, text="invalid or used ticket")
        self._socket_tickets.discard(ticket)  # Slack's URLs are good for one connection
        while self._stall_handshakes:
            await asyncio.sleep(0.01)
        # autoping off: answering pings is up to us, so that a silent socket can withhold them.
        ws = web.WebSocketResponse(autoping=False)
        await ws.prepare(request)
        socket = _Socket(ws, request)
        self._sockets.append(socket)
        self.socket_connections += 1
        try:
            await ws.send_json(
                {
                    "type": "hello",
                    "num_connections": len(self._sockets),
                    "debug_info": {
                        "host": "applink-fake",
                        "build_number": 1,
                        "approximate_connection_time": 18060,
                    },
                    "connection_info": {"app_id": self.app_id},
                }
            )
            async for frame in ws:
                if socket.silent:
                    continue
                if frame.type == WSMsgType.PING:
                    await ws.pong(frame.data)
                elif frame.type == WSMsgType.TEXT:
                    self._record_ack(frame.data)
        finally:
            self._sockets.remove(socket)
        return ws

    def _record_ack(self, data: str) -> None:
        message = json.loads(data)
        if isinstance(message, dict) and message.get("envelope_id"):
            self.socket_acks.append(
                SocketAck(message["envelope_id"], message.get("payload"), time.monotonic())
            )
