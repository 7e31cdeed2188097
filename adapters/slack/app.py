"""Slack events in: slack-bolt verifies and parses, the inbox stores.

Events arrive either over HTTP (POST /slack/events, `SlackAdapter.handle`) or over Socket Mode
(`adapters.slack.socket_mode.SlackSocketMode`, which feeds the same bolt app; the adapter
starts and stops it). Bolt runs with
`process_before_response=True` so the listener — which commits the message to the inbox —
finishes before Slack gets its 200 or its envelope ack. The listener does nothing slow and
nothing on the way calls the Web API: bolt learns who the bot is from
`adapters.slack.bot_identity` (with a bot token, the start-up check's auth.test or the event's
own `authorizations`; with OAuth installs, the workspace's installation in the service
database). The sender's locale is looked up by the worker that answers
(`SlackResponder.user_locale`).

The bot token is SLACK_BOT_TOKEN's, or with SLACK_CLIENT_ID / SLACK_CLIENT_SECRET each
workspace's own from its OAuth install (`adapters.slack.installations`): bolt's install flow is
served on /slack/install and /slack/oauth_redirect, and the responder picks each message's
workspace token.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web
from slack_bolt.adapter.aiohttp import to_aiohttp_response
from slack_bolt.async_app import AsyncAck, AsyncApp
from slack_bolt.context.async_context import AsyncBoltContext
from slack_bolt.logger.messages import warning_token_skipped
from slack_bolt.oauth.async_oauth_settings import AsyncOAuthSettings
from slack_bolt.request.async_request import AsyncBoltRequest
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_async_handlers import AsyncRateLimitErrorRetryHandler
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from adapters.approval_clicks import accept_click
from adapters.base import AcceptOutcome, ConnectionStatus, CredentialStatus, FeedbackClick, GatewayServices, Handler, Route
from adapters.credentials import CredentialCheck, CredentialsRefused
from adapters.slack.alerts import ACTIONS, already_done
from adapters.slack.bot_identity import BotIdentity, InstalledBot, delivered_to_bot_user
from adapters.slack.config import INSTALL_PATH, REDIRECT_PATH, SlackConfig
from adapters.slack.events import Ignored, MalformedEvent, candidate_thread, check_envelope, parse_event, parse_stop
from adapters.slack.installations import BotTokens, Installations
from adapters.slack.render import (
    APPROVE_ACTION,
    EXAMPLE_APPROVE_ACTION,
    EXAMPLE_REJECT_ACTION,
    FEEDBACK_ACTION,
    FEEDBACK_COMMENT_VIEW,
    REJECT_ACTION,
)
from adapters.slack.responder import SlackResponder

if TYPE_CHECKING:
    from adapters.slack.socket_mode import SlackSocketMode

log = logging.getLogger(__name__)

TIMESTAMP_HEADER = "X-Slack-Request-Timestamp"
SIGNATURE_HEADER = "X-Slack-Signature"
# Slack's replay window (bolt and slack_sdk's SignatureVerifier use the same).
TIMESTAMP_WINDOW_S = 5 * 60
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
# A proposed example's row id, as its review buttons carry it (an INTEGER column).
_PROPOSAL_ID = re.compile(r"[1-9][0-9]{0,8}")

class _Rejected(Exception):
    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def _log_after_the_ack(message: str, *args: object) -> None:
    """Log an INFO line on the event loop's next turn, by when the handler has written its
    acknowledgement: making and queueing a record is a tenth of an accept's CPU on a busy
    machine (0.13 ms of 1.4), which Slack's wait for the 200 need not include."""
    asyncio.get_running_loop().call_soon(log.info, message, *args)


class SlackAdapter:
    """Slack (an `adapters.base.PlatformAdapter`): the bolt app with the event listeners, the
    `/slack/events` handler (HTTP mode) and the responder. In socket mode `SlackSocketMode`
    delivers events to `bolt` instead, between `start()` and `stop()`."""

    platform = "slack"

    def __init__(self, config: SlackConfig, services: GatewayServices) -> None:
        self.config = config
        self._accept = services.accept
        self._approvals = services.approvals
        self._monitor_actions = services.monitor_actions
        self._feedback = services.feedback
        self._suggest = services.suggested_prompts
        self._background: set[asyncio.Task[None]] = set()
        # Socket mode has no signing secret: "" (not None, which makes bolt read the
        # environment); `handle` refuses HTTP deliveries in that mode.
        signing_secret = config.signing_secret.get_secret_value() if config.signing_secret else ""
        # Bolt gives each of its loggers this one's level (and filters) when it builds them;
        # without it they take the root logger's level, undoing any quieting, and bolt logs
        # rejected requests at INFO with their whole body.
        # Listeners answer through the inbox and our responder, never through bolt's per-request
        # helpers (`say`, `respond`, `set_status`, a function's token): not building them saves
        # two middlewares on every acknowledgement.
        common: dict[str, Any] = {
            "signing_secret": signing_secret, "process_before_response": True, "logger": bolt_logger(),
            "attaching_conversation_kwargs_enabled": False, "attaching_function_token_enabled": False,
        }  # fmt: skip
        self.installations: Installations | None = None
        self.identity: BotIdentity | None = None
        tokens: BotTokens | None = None
        if config.oauth:
            if services.engine is None:
                raise RuntimeError("Slack OAuth installs need the service database")
            self.installations = tokens = Installations(config.client_id, services.engine)
            self.bolt = AsyncApp(
                client=AsyncWebClient(base_url=config.api_url),  # no token: each workspace's own
                oauth_settings=oauth_settings(config, self.installations),
                # Bolt's own calls auth.test on every event (the ignore: see `bot_identity`).
                authorize=InstalledBot(self.installations.store),  # type: ignore[arg-type]
                **common,
            )
            # app_uninstalled / tokens_revoked delete the workspace's installation: its events
            # are no longer authorized, and workers no longer find its token.
            self.bolt.enable_token_revocation_listeners()
        else:
            # The token goes to bolt itself, which builds the client with it: bolt reads
            # SLACK_BOT_TOKEN from the environment and warns that it is unused when handed a
            # client instead. Bolt's own authorization would call auth.test on an event's
            # acknowledgement path; `BotIdentity` never does.
            self.identity = BotIdentity(config.bot_token.get_secret_value())
            self.bolt = AsyncApp(token=self.identity.token, authorize=self.identity, **common)  # type: ignore[arg-type]
        self.client = self.bolt.client
        self.client.base_url = config.api_url
        self.client.retry_handlers.append(AsyncRateLimitErrorRetryHandler(max_retry_count=3))
        self.responder = SlackResponder(self.client, tokens)
        self._verifier = SignatureVerifier(signing_secret) if config.signing_secret else None
        # One listener for both kinds of message: bolt builds every argument a listener could
        # take each time it tries a listener's matcher, and a `message` event no longer waits
        # for the `app_mention` matcher to fail first.
        self.bolt.event(re.compile("^(app_mention|message)$"))(self._on_message)
        # Slack's native Stop on an agent session: the thread's turn ends (through the inbox).
        self.bolt.event("agent_session_stopped")(self._on_stop)
        # The app's messages tab / AI container opened: suggest what to ask.
        self.bolt.event("assistant_thread_started")(self._on_assistant_thread)
        # Approve / Reject on an approval request: `block_actions` on the same URL (or socket).
        self.bolt.action(re.compile(f"^({APPROVE_ACTION}|{REJECT_ACTION})$"))(self._on_approval_click)
        # Acknowledge / Mute on a monitor's alert: the same verified path.
        self.bolt.action(re.compile(f"^({'|'.join(ACTIONS)})$"))(self._on_alert_click)
        # 👍/👎 under answers, the "what was wrong?" modal, a data owner's decision on an example.
        self.bolt.action(FEEDBACK_ACTION)(self._on_feedback)
        self.bolt.view(FEEDBACK_COMMENT_VIEW)(self._on_feedback_comment)
        self.bolt.action(re.compile(f"^({EXAMPLE_APPROVE_ACTION}|{EXAMPLE_REJECT_ACTION})$"))(self._on_example_decision)
        # Bolt answers 404 to events without a listener, and Slack retries those: acknowledge
        # every other subscribed event explicitly.
        self.bolt.event(re.compile(".*"))(self._on_other_event)
        self._credentials = CredentialCheck("slack", self._check_credentials)
        self.socket_mode: SlackSocketMode | None = None
        if config.mode == "socket" and config.app_token is not None:
            # Imported here: the SDK's Socket Mode client loads only in socket mode.
            from adapters.slack.socket_mode import SlackSocketMode

            self.socket_mode = SlackSocketMode(self.bolt, config.app_token, config.api_url)

    def handler(self, route: Route) -> Handler:
        if route.path == INSTALL_PATH:
            return self.install
        if route.path == REDIRECT_PATH:
            return self.oauth_redirect
        return self.handle

    async def start(self) -> None:
        """Check the credentials (in the background), open the Socket Mode connection (socket
        mode); nothing more over HTTP."""
        self._credentials.start()
        if self.socket_mode is not None:
            await self.socket_mode.start()

    def status(self) -> ConnectionStatus | None:
        """The Socket Mode connection's state for /readyz (None over HTTP)."""
        return self.socket_mode.status() if self.socket_mode is not None else None

    def credentials(self) -> CredentialStatus | None:
        return self._credentials.status

    async def stop(self) -> None:
        """Stop receiving over Socket Mode; envelopes being committed are acknowledged first."""
        await self._credentials.stop()
        if self.socket_mode is not None:
            await self.socket_mode.stop()

    async def _check_credentials(self) -> str:
        """`auth.test` with the bot token: who the bot is, where. With OAuth installs there is
        no token of the app's own to test; the count of installed workspaces is reported."""
        if self.installations is not None:
            return f"OAuth installs, {await self.installations.count()} workspace(s) installed"
        try:
            identity = await self.client.auth_test()
        except SlackApiError as exc:
            if exc.response.status_code != 200:  # rate limited, an outage: ask again later
                raise
            error = exc.response.get("error")
            raise CredentialsRefused(f"auth.test answered {error}: check SLACK_BOT_TOKEN") from None
        if self.identity is not None:
            self.identity.learn(identity)
        return (
            f"bot @{identity.get('user')} ({identity.get('user_id')}) in workspace "
            f"{identity.get('team')} ({identity.get('team_id')})"
        )

    async def install(self, request: web.Request) -> web.StreamResponse:
        """GET /slack/install: the "Add to Slack" page, whose link carries a fresh OAuth state
        (also set as a cookie, checked on the way back)."""
        if self.bolt.oauth_flow is None or self.installations is None:
            return _oauth_off()
        await self.installations.forget_expired_states()
        bolt_request = AsyncBoltRequest(body="", query=request.query_string, headers=dict(request.headers.items()))
        return await to_aiohttp_response(await self.bolt.oauth_flow.handle_installation(bolt_request))

    async def oauth_redirect(self, request: web.Request) -> web.StreamResponse:
        """GET /slack/oauth_redirect: Slack sends the installer back with a code; the state is
        checked, the code exchanged (oauth.v2.access) and the installation stored."""
        if self.bolt.oauth_flow is None:
            return _oauth_off()
        bolt_request = AsyncBoltRequest(body="", query=request.query_string, headers=dict(request.headers.items()))
        response = await self.bolt.oauth_flow.handle_callback(bolt_request)
        log.info("slack oauth install: %s", "stored" if response.status == 200 else f"refused ({response.status})")
        return await to_aiohttp_response(response)

    async def handle(self, request: web.Request) -> web.StreamResponse:
        """aiohttp handler for POST /slack/events.

        The request is verified and its body checked here, before bolt sees it: a request that
        is not signed by Slack answers 401, and one whose body bolt or the listeners could not
        handle answers 400 — each with one WARNING line that never quotes the body — instead
        of a 500 with a traceback. Nothing is stored for either.
        """
        if self.config.mode != "http" or self._verifier is None:
            # Without a signing secret nothing posted here can be verified.
            return web.json_response({"ok": False, "error": "slack runs in socket mode"}, status=404)
        raw = await request.read()
        try:
            text = self._verified_body(request, raw)
            bolt_request = _bolt_request(request, text)
            check_envelope(bolt_request.body)
        except _Rejected as exc:
            return _reject(exc.status, exc.reason)
        except MalformedEvent as exc:
            return _reject(400, str(exc))
        except Exception as exc:  # a shape no check foresaw: still the sender's fault, not a 500
            return _reject(400, f"unreadable payload ({type(exc).__name__})")
        bolt_response = await self.bolt.async_dispatch(bolt_request)
        return await to_aiohttp_response(bolt_response)

    def _verified_body(self, request: web.Request, raw: bytes) -> str:
        """The body as text, if the request carries a valid, fresh Slack signature."""
        assert self._verifier is not None
        for header in (TIMESTAMP_HEADER, SIGNATURE_HEADER, "Content-Type"):
            if len(request.headers.getall(header, [])) > 1:
                raise _Rejected(400, f"duplicate {header} header")
        timestamp = request.headers.get(TIMESTAMP_HEADER)
        signature = request.headers.get(SIGNATURE_HEADER)
        if not timestamp or not signature:
            raise _Rejected(401, "signature headers are missing")
        if not _TIMESTAMP.fullmatch(timestamp):
            raise _Rejected(401, f"{TIMESTAMP_HEADER} is not a Unix time")
        if abs(time.time() - int(timestamp)) > TIMESTAMP_WINDOW_S:
            raise _Rejected(401, f"request timestamp is outside the {TIMESTAMP_WINDOW_S // 60}-minute window")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise _Rejected(400, "body is not UTF-8") from None
        if not self._verifier.is_valid(text, timestamp, signature):
            raise _Rejected(401, "signature does not match")
        return text

    async def _on_message(self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext) -> None:
        # The envelope's shape was checked before bolt saw it (`handle`, or Socket Mode's
        # `SlackSocketMode._on_request`): `parse_event` may index into it.
        team_id = body.get("team_id") or context.team_id or ""
        if self.installations is not None and context.is_enterprise_install and context.enterprise_id and team_id:
            # An org-wide install: workers find this workspace's token through its org.
            await self.installations.remember_enterprise(team_id, context.enterprise_id)
        # Until the start-up check has heard from Slack, the delivery says which bot it is for.
        bot_user_id = context.bot_user_id or delivered_to_bot_user(body) or ""
        # A reply in a thread without a mention is for the bot if the bot is part of that
        # thread: the inbox asks as it stores it (with mentions required, it is not for the bot).
        in_thread = not self.config.require_mention_in_threads and candidate_thread(
            team_id, event, bot_user_id
        ) is not None
        parsed = parse_event(
            event_id=body.get("event_id") or f"{event.get('channel')}:{event.get('ts')}",
            team_id=team_id,
            event=event,
            bot_user_id=bot_user_id,
            bot_id=context.bot_id,
            in_known_thread=in_thread,
            require_mention_in_threads=self.config.require_mention_in_threads,
        )
        if isinstance(parsed, Ignored):
            log.debug("slack event %s ignored: %s", body.get("event_id"), parsed.reason)
            return
        outcome = await self._accept(parsed, if_thread_live=in_thread)
        if outcome is AcceptOutcome.NOT_IN_LIVE_THREAD:
            log.debug("slack event %s ignored: thread message not addressed to the bot", body.get("event_id"))
            return
        _log_after_the_ack("slack event %s %s (thread %s)", body.get("event_id"), outcome.value, parsed.thread)

    async def _on_assistant_thread(self, body: dict[str, Any], event: dict[str, Any]) -> None:
        """Suggest prompts in the new assistant thread, after Slack has its acknowledgement
        (cosmetic: nothing is stored, a lost one costs nothing)."""
        thread = event.get("assistant_thread") or {}
        user, channel, thread_ts = thread.get("user_id"), thread.get("channel_id"), thread.get("thread_ts")
        if self._suggest is None or not (isinstance(user, str) and isinstance(channel, str) and isinstance(thread_ts, str)):
            return
        team = str(body.get("team_id") or "")
        task = asyncio.create_task(self._suggest_prompts(team, user, channel, thread_ts))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _suggest_prompts(self, team: str, user: str, channel: str, thread_ts: str) -> None:
        assert self._suggest is not None
        try:
            language = await self.responder.language_of(user, team)
            prompts = await self._suggest(self.platform, user, channel, language)
            await self.responder.suggest_prompts(team, channel, thread_ts, prompts, language)
        except Exception:
            log.exception("could not suggest prompts in %s", channel)

    async def _on_stop(self, body: dict[str, Any], event: dict[str, Any], context: AsyncBoltContext) -> None:
        team_id = body.get("team_id") or context.team_id or ""
        parsed = parse_stop(body.get("event_id") or f"stop:{event.get('event_ts')}", team_id, event)
        if isinstance(parsed, Ignored):
            log.warning("slack event %s ignored: %s", body.get("event_id"), parsed.reason)
            return
        outcome = await self._accept(parsed)
        _log_after_the_ack("slack stop %s %s (thread %s)", body.get("event_id"), outcome.value, parsed.thread)

    async def _on_approval_click(
        self, ack: AsyncAck, body: dict[str, Any], action: dict[str, Any]
    ) -> None:
        """Commit an approver's click to the inbox before Slack gets its acknowledgement; tell
        anyone else privately that it is not theirs (one Web API call, only then)."""
        user = body.get("user") or {}
        user_id = str(user.get("id") or "")
        answer = await accept_click(
            self._approvals,
            self._accept,
            platform=self.platform,
            approval_id=str(action.get("value") or ""),
            choice="approve" if action.get("action_id") == APPROVE_ACTION else "reject",
            user=user_id,
            user_name=user.get("username") or user.get("name"),
            event_id=f"action:{action.get('action_ts') or body.get('trigger_id')}:{user_id}",
        )
        await ack()
        log.info("slack approval click on %s: %s", action.get("value"), "accepted" if answer.accepted else "refused")
        if answer.note is not None and user_id:
            channel = (body.get("channel") or {}).get("id") or (body.get("container") or {}).get("channel_id")
            thread_ts = (body.get("container") or {}).get("thread_ts")
            if channel:
                await self.responder.tell_privately(_team_of(body), channel, user_id, answer.note, thread_ts)

    async def _on_alert_click(self, ack: AsyncAck, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Record an Acknowledge / Mute click before Slack gets its acknowledgement, then show
        who acted on the alert in place of its buttons."""
        user_id = str((body.get("user") or {}).get("id") or "")
        click = None
        if self._monitor_actions is not None and user_id:
            click = await self._monitor_actions(str(action.get("value") or ""), ACTIONS[action["action_id"]], user_id)
        await ack()
        log.info("slack alert click on %s: %s", action.get("value"), "recorded" if click else "unknown alert")
        if click is not None:
            alert = click.alert
            if click.changed:  # a later click leaves the alert as it reads
                await self.responder.update_alert(alert)
            if alert.acted_by != user_id:  # decided by someone else first
                channel = (body.get("channel") or {}).get("id") or alert.channel
                await self.responder.tell_privately(alert.workspace, channel, user_id, already_done(alert), None)

    async def _on_feedback(self, ack: AsyncAck, body: dict[str, Any], action: dict[str, Any]) -> None:
        """Store a 👍/👎 before Slack gets its acknowledgement; after a 👎, ask what was wrong."""
        user_id = str((body.get("user") or {}).get("id") or "")
        kind, _, answer_id = str(action.get("value") or "").partition(":")
        rating = {"up": 1, "down": -1}.get(kind)
        now = None
        if self._feedback is not None and rating is not None and answer_id and user_id:
            now = await self._feedback.rate(FeedbackClick(self.platform, answer_id, user_id, rating))
        await ack()
        log.info("slack feedback on %s: %s", answer_id, "unknown answer" if now is None else now)
        if now == -1 and body.get("trigger_id"):
            team = _team_of(body)
            language = await self.responder.language_of(user_id, team)
            await self.responder.ask_what_was_wrong(team, str(body["trigger_id"]), answer_id, language)

    async def _on_feedback_comment(self, ack: AsyncAck, body: dict[str, Any], view: dict[str, Any]) -> None:
        user_id = str((body.get("user") or {}).get("id") or "")
        values = ((view.get("state") or {}).get("values") or {}).get("comment") or {}
        text = str((values.get("comment") or {}).get("value") or "").strip()
        answer_id = str(view.get("private_metadata") or "")
        if self._feedback is not None and text and answer_id and user_id:
            await self._feedback.comment(self.platform, answer_id, user_id, text)
        await ack()

    async def _on_example_decision(self, ack: AsyncAck, body: dict[str, Any], action: dict[str, Any]) -> None:
        user_id = str((body.get("user") or {}).get("id") or "")
        proposal = None
        value = str(action.get("value") or "")
        if self._feedback is not None and _PROPOSAL_ID.fullmatch(value) and user_id:
            approve = action.get("action_id") == EXAMPLE_APPROVE_ACTION
            proposal = await self._feedback.decide_example(self.platform, int(value), approve, user_id)
        await ack()
        log.info("slack example decision on %s: %s", value, proposal.status if proposal else "refused")
        container = body.get("container") or {}
        if proposal is not None and container.get("channel_id") and container.get("message_ts"):
            team = _team_of(body)
            language = await self.responder.language_of(user_id, team)
            await self.responder.show_example_decision(
                team, str(container["channel_id"]), str(container["message_ts"]), proposal, language
            )

    async def _on_other_event(self, body: dict[str, Any]) -> None:
        log.debug("slack event %s acknowledged without action", body.get("event", {}).get("type"))


def oauth_settings(config: SlackConfig, installations: Installations) -> AsyncOAuthSettings:
    """Bolt's OAuth install flow on the gateway's routes, stored in the service database."""
    return AsyncOAuthSettings(
        client_id=config.client_id,
        client_secret=config.client_secret.get_secret_value() if config.client_secret else None,
        scopes=config.scope_list,
        user_scopes=[],
        redirect_uri=config.redirect_uri,
        install_path=INSTALL_PATH,
        redirect_uri_path=REDIRECT_PATH,
        authorization_url=config.authorize_url,
        installation_store=installations.store,
        installation_store_bot_only=True,
        state_store=installations.states,
    )


def _team_of(body: dict[str, Any]) -> str:
    """The workspace a button click came from."""
    return str((body.get("team") or {}).get("id") or (body.get("user") or {}).get("team_id") or "")


def _oauth_off() -> web.Response:
    return web.json_response(
        {"ok": False, "error": "OAuth installs are off: set SLACK_CLIENT_ID and SLACK_CLIENT_SECRET"}, status=404
    )


def bolt_logger() -> logging.Logger:
    """The logger slack-bolt's app and its middleware log through (see `SlackAdapter`).

    WARNING and above only: below that bolt logs request bodies (message text, and Slack's
    legacy verification token in the payload).
    """
    logger = logging.getLogger(f"{__name__}.bolt")
    logger.setLevel(max(logging.WARNING, logging.getLogger().level))
    logger.addFilter(_token_is_used)  # once: a filter already there is not added again
    return logger


def _token_is_used(record: logging.LogRecord) -> bool:
    """Drop bolt's warning that the token is ignored beside `authorize`: `BotIdentity` is the
    authorize, and it hands bolt that very token."""
    return record.getMessage() != warning_token_skipped()


def _bolt_request(request: web.Request, text: str) -> AsyncBoltRequest:
    """Bolt's request for a verified body. Bolt parses the body (JSON, or a form with a JSON
    `payload`) and reads its ids as it builds the request: its parse is the one checked, once,
    and a body it cannot take is a _Rejected(400)."""
    try:
        bolt_request = AsyncBoltRequest(body=text, query=request.query_string, headers=dict(request.headers.items()))
    except (ValueError, RecursionError):
        raise _Rejected(400, "body is not valid JSON") from None
    except Exception as exc:  # bolt read ids out of a list, a string, a number …
        an_object = text.lstrip().startswith(("{", "payload="))
        raise _Rejected(400, f"unreadable payload ({type(exc).__name__})" if an_object else "body is not a JSON object") from None
    if not isinstance(bolt_request.body, dict):
        raise _Rejected(400, "body is not a JSON object")
    return bolt_request


def _reject(status: int, reason: str) -> web.Response:
    log.warning("slack events: rejected with %d: %s", status, reason)
    return web.json_response({"ok": False, "error": reason}, status=status)
