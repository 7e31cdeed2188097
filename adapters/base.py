"""The contract between the gateway and a chat platform.

A platform is a `Platform` plugin, listed once in `adapters.registry`: its name, its settings
(`PlatformSettings`, read from environment variables with the platform's own prefix), the
routes it receives events on, and `build`, which makes its `PlatformAdapter` — the running
part: route handlers, an optional long-lived connection, and the `Responder` that answers (with
whichever capabilities — progress, streaming, approvals, alerts… — the platform has). The gateway
iterates over the registered plugins and knows none of them by name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Generic, Protocol, Self, TypeVar, cast, runtime_checkable

from pydantic import BaseModel, StringConstraints
from pydantic_settings import BaseSettings, SettingsConfigDict

from agent_core.i18n import Language
from agent_core.messages import Attachment, InboundMessage, OutboundReply, ThreadKey

if TYPE_CHECKING:
    from aiohttp import web
    from sqlalchemy.ext.asyncio import AsyncEngine

    from agent_core.catalog.learned import Proposal
    from agent_core.governance.approval import ApprovalView
    from agent_core.governance.approval_store import StoredApproval
    from agent_core.monitors.model import AlertClick, AlertView, MonitorAction
    from agent_core.thread_context import ThreadContext


class ConnectionState(StrEnum):
    """A long-lived platform connection (Feishu long connection, Slack Socket Mode)."""

    CONNECTING = "connecting"
    CONNECTED = "connected"
    RECONNECTING = "reconnecting"
    STOPPED = "stopped"


class ConnectionStatus(BaseModel):
    """What /readyz reports about a long-lived platform connection."""

    state: ConnectionState
    connected_since: datetime | None = None  # first frame on the current connection
    last_frame_at: datetime | None = None  # any frame, pings and pongs included
    last_event_at: datetime | None = None
    restarts: int = 0  # connections replaced by the adapter's supervisor


class CredentialState(StrEnum):
    """A platform's credentials as checked at start-up (`adapters.credentials`)."""

    CHECKING = "checking"
    OK = "ok"
    REFUSED = "refused"  # the platform answered: wrong token or secret, app not installed
    UNVERIFIED = "unverified"  # the platform did not answer (slow, unreachable); asked again


class CredentialStatus(BaseModel):
    """What /readyz reports about a platform's credentials (never a secret)."""

    state: CredentialState
    detail: str = ""  # who the credentials are, or why they could not be verified


# A platform's ids, timestamps and type names never hold control characters: one that does is
# hostile, and a NUL in a key is refused by PostgreSQL at the insert (a 500 for every retry).
# Adapters give the payload fields they key on this type; message text may hold anything (it is
# stored JSON-escaped).
CONTROL_CHARACTERS = "\x00-\x1f\x7f"
PlatformId = Annotated[str, StringConstraints(pattern=f"^[^{CONTROL_CHARACTERS}]*$")]


class AcceptOutcome(StrEnum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    # Accepted `if_thread_live`, in a thread the bot is not part of: not for the bot, not stored.
    NOT_IN_LIVE_THREAD = "not in a live thread"


class AcceptMessage(Protocol):
    """The gateway's durable inbox. An adapter calls it once per parsed message and answers the
    platform only after it returns: the message is committed to the database by then.

    `if_thread_live`: the message is for the bot only if its thread is a live conversation of
    the bot (a reply in a thread, without a mention). The inbox asks that in the statement
    that stores it: one round trip on the acknowledgement's path, not two."""

    def __call__(self, msg: InboundMessage, *, if_thread_live: bool = False) -> Awaitable[AcceptOutcome]: ...


class AnswerStream(Protocol):
    """A reply being written live (a Slack message edited in place, a Feishu streaming card)."""

    async def update(self, text_so_far: str) -> None:
        """Show the answer so far (Markdown); implementations throttle platform calls."""

    async def close(self) -> None:
        """End streaming mode; the final answer follows through `Responder.deliver`."""


# --- what a platform answers with --------------------------------------------------------------
#
# `Responder` is the core every platform implements: posting an answer. Everything else is a
# capability, a small protocol a platform's responder implements when the platform can do it;
# the gateway checks for it where it uses it (`isinstance(responder, ProgressDisplay)`) and does
# without when it is absent. A new platform starts with `deliver` and gains the rest one at a time.


class Responder(Protocol):
    """Posts answers to one platform: the contract every platform implements."""

    platform: str

    async def deliver(
        self, msg: InboundMessage, reply: OutboundReply, delivery_id: str, *, resumed: bool = False
    ) -> None:
        """Post the answer (its text, tables and files) in the right place.

        Idempotent per `delivery_id`: `resumed` says an earlier attempt may have posted some or
        all of it (a crash between posting and recording); nothing may then be posted twice.
        """

    async def close(self) -> None:
        """Release what the responder holds (HTTP sessions); called once, when the gateway stops."""


@runtime_checkable
class ProgressDisplay(Protocol):
    """Shows that the bot is working on a message. Without it, the answer simply arrives."""

    async def show_progress(self, msg: InboundMessage) -> None:
        """Tell the user at once that the bot is on it (a reaction, a status line)."""

    async def show_status(self, msg: InboundMessage, status: str) -> None:
        """Update the progress line (e.g. "Running sql_query…"); best effort."""

    async def clear_progress(self, msg: InboundMessage) -> None:
        """Remove the progress indicator; best effort."""


@runtime_checkable
class AnswerStreaming(Protocol):
    """Writes the answer live while the model writes it. Without it, the answer is posted when done."""

    async def open_stream(self, msg: InboundMessage, delivery_id: str) -> AnswerStream | None:
        """Start a live answer, or None when this message or the configuration does not stream;
        `Responder.deliver` then finishes it. Retires what an earlier attempt left streaming."""


@runtime_checkable
class CutAnswerReading(Protocol):
    """Reads back what an attempt that died while streaming left shown. Without it, a turn
    stopped after such a crash keeps no partial answer."""

    async def cut_answer(self, msg: InboundMessage, delivery_id: str) -> str:
        """The text of `msg`'s answer that an attempt which died while streaming left shown in
        the chat ("" if none): a turn stopped then keeps it as its partial answer."""


@runtime_checkable
class Attachments(Protocol):
    """Fetches the files people share with a message. Without it, the model is told each file
    could not be fetched."""

    async def resolve_attachments(self, msg: InboundMessage) -> list[Attachment]:
        """The files to fetch for `msg`: its own, with any that stand for another message (a
        quoted file) replaced by that message's files."""

    async def fetch_attachment(
        self, msg: InboundMessage, attachment: Attachment, dest: Path, max_bytes: int
    ) -> Path:
        """Download a file the user shared into `dest` (raises `AttachmentError`)."""


@runtime_checkable
class Mentions(Protocol):
    """Notifies a person by name in a post. Without it, a note names them by their id."""

    def mention(self, user: str) -> str:
        """Markup that notifies `user` in a post, ending in a space."""


@runtime_checkable
class LocaleLookup(Protocol):
    """Knows the locale a person set on the platform. Without it, the message's own language
    decides the reply's."""

    async def user_locale(self, user: str, workspace: str) -> str | None:
        """`user`'s locale (a user of `workspace`) as the platform states it ("zh-CN",
        "en-US"); None where it does not."""


@runtime_checkable
class DirectMessages(Protocol):
    """Addresses a direct message by user alone. Without it, DMs go only where the person
    already talks to the bot (a schedule made in a DM is delivered there)."""

    def dm_address(self, user: str) -> str | None:
        """The channel to post to for a direct message to `user`; None when only the DM
        conversation's own id will do for this user."""


@runtime_checkable
class ThreadHistory(Protocol):
    """Reads the earlier messages of the thread a message was posted in. Without it, the model
    sees only the messages addressed to the bot."""

    async def thread_context(self, msg: InboundMessage) -> ThreadContext | None:
        """The earlier messages of the platform thread `msg` was posted in (that thread of that
        channel only), oldest first, up to `msg`; None where there is none to fetch."""


@runtime_checkable
class ApprovalPrompts(Protocol):
    """Asks for an approval of a paused query and shows the decision. Without it, a query that
    needs one is not run, and the answer says approvals cannot be given on the platform."""

    async def ask_approval(self, msg: InboundMessage, approval: ApprovalView, *, resumed: bool = False) -> str | None:
        """Post in `msg`'s thread what the paused query would run (source, tables, estimate,
        the SQL collapsed) with Approve / Reject buttons whose clicks name `approval.id`;
        returns the posted message's id, to update it with the decision. `resumed`: an earlier
        attempt may have posted it before it was cut short; that post is the request then,
        not a second one."""

    async def show_decision(self, msg: InboundMessage, approval: ApprovalView) -> None:
        """Replace the buttons of the posted request with its outcome; best effort."""


@runtime_checkable
class AlertPosting(Protocol):
    """Posts a monitor's alert with Acknowledge and Mute buttons. Without it, the alert is
    delivered as a plain message (`AlertView.markdown`)."""

    async def post_alert(self, alert: AlertView) -> str | None:
        """Post a monitor's alert as a new message in its channel, with Acknowledge and Mute
        buttons whose clicks name `alert.id`, and its chart in the alert's thread; returns the
        posted message's id (to note the recovery in its thread)."""


@runtime_checkable
class ExampleReview(Protocol):
    """Asks a data owner in a DM to review a proposed example. Without it, `ba-agent examples
    review` is the only way to decide."""

    async def ask_example_review(self, workspace: str, owner: str, proposal: Proposal, language: Language) -> bool:
        """Ask a data owner in a DM to confirm or reject a proposed example (Approve / Reject
        buttons naming `proposal.id`); False when it could not be posted."""

    async def close(self) -> None:
        """Release what it holds (HTTP sessions); called once, after its last answer."""


# --- the platform plugin contract ------------------------------------------------------------

# Whether a live conversation exists for a thread key (the bot is part of that thread), so a
# follow-up there needs no new mention.
IsLive = Callable[[ThreadKey], Awaitable[bool]]
Handler = Callable[["web.Request"], Awaitable["web.StreamResponse"]]


# The stored approval of an id (None if unknown): adapters check a click against it.
LookupApproval = Callable[[str], Awaitable["StoredApproval | None"]]
# Records a click on a monitor alert's button (alert id, action, user) before the platform is
# answered; returns the alert as it now reads and whether this click changed it (None if
# unknown), for the adapter to show.
ActOnAlert = Callable[[str, "MonitorAction", str], Awaitable["AlertClick | None"]]


@dataclass(frozen=True)
class FeedbackClick:
    """A person's 👍 (1) or 👎 (-1) on an answer, named by the answer's delivery id."""

    platform: str
    answer_id: str
    user: str
    rating: int


class FeedbackActions(Protocol):
    """Stores feedback on answers before the platform is answered (`gateway.service.feedback`)."""

    async def rate(self, click: FeedbackClick) -> int | None:
        """Record the click (the same one again withdraws it); the person's rating now (1, -1,
        0 withdrawn), None when the answer is not one of ours on that platform."""

    async def comment(self, platform: str, answer_id: str, user: str, text: str) -> bool:
        """Keep the person's "what was wrong?" with their rating; False when there is none."""

    async def decide_example(self, platform: str, proposal_id: int, approve: bool, user: str) -> Proposal | None:
        """A data owner's decision on a proposed example; the proposal as it now stands, None
        when it is unknown or `user` is not an owner of its source."""


# The prompts to suggest to a person opening the agent in their DM with it (platform, user id,
# DM channel id, their language).
SuggestPrompts = Callable[[str, str, str, Language], Awaitable[list[str]]]


@dataclass(frozen=True)
class GatewayServices:
    """What the gateway lends a platform adapter when it is built."""

    accept: AcceptMessage
    is_live: IsLive
    approvals: LookupApproval | None = None  # None: approval buttons are not answered
    monitor_actions: ActOnAlert | None = None  # None: alert buttons are not answered
    # The service database, for a platform's own tables (created by the gateway's migrations).
    engine: AsyncEngine | None = None
    feedback: FeedbackActions | None = None  # None: feedback buttons are not answered
    suggested_prompts: SuggestPrompts | None = None  # None: nothing is suggested


@dataclass(frozen=True)
class Route:
    """An HTTP endpoint a platform receives events on, mounted whether or not it is configured
    (unconfigured, it answers 503 saying what to set)."""

    method: str
    path: str


class PlatformSettings(BaseSettings, ABC):
    """A platform's settings: environment variables (and `.env`) with the subclass's
    `env_prefix`, e.g. ``SLACK_`` for ``SLACK_BOT_TOKEN``. Loading never fails for lack of
    credentials: an unconfigured platform is simply off."""

    model_config = SettingsConfigDict(env_file=".env", env_file_encoding="utf-8", extra="ignore")

    @property
    @abstractmethod
    def configured(self) -> bool:
        """Whether the gateway builds this platform's adapter in `serve` and its workers."""

    @abstractmethod
    def missing(self) -> list[str]:
        """Variables that would enable (more of) this platform, for the start-up log."""

    @abstractmethod
    def describe(self) -> str:
        """How it runs, for the start-up log ("http", "websocket", "off"); never a secret."""


class PlatformAdapter(Protocol):
    """A configured platform, built by its plugin: receives events and answers."""

    @property
    def responder(self) -> Responder: ...

    def handler(self, route: Route) -> Handler:
        """The aiohttp handler of one of the plugin's `routes`."""

    async def start(self) -> None:
        """Open the long-lived connection, where the configured mode has one."""

    def status(self) -> ConnectionStatus | None:
        """The long-lived connection's state for /readyz; None when there is none."""

    def credentials(self) -> CredentialStatus | None:
        """The start-up check of the platform's credentials, for /readyz; None when the
        platform has none to check."""

    async def stop(self) -> None:
        """Stop receiving: in-flight events commit and are acknowledged first."""


SettingsT = TypeVar("SettingsT", bound=PlatformSettings)


class Platform(ABC, Generic[SettingsT]):
    """A chat platform plugin, holding its loaded settings.

    Subclasses set the class attributes and implement `build`; their module must import no
    platform SDK at the top (every command loads the registry), only inside `build`.
    """

    name: str  # InboundMessage.platform, the /readyz connection key, the start-up log's name
    title: str  # in messages to people ("Slack is not configured…")
    settings_class: ClassVar[type[PlatformSettings]]  # its SettingsT
    setup_hint: str = ""  # what to set to enable it, for the 503 of an unconfigured route
    routes: tuple[Route, ...] = ()
    # Loggers of its SDKs that log request bodies or tokens below WARNING.
    quiet_loggers: tuple[str, ...] = ()

    def __init__(self, settings: SettingsT) -> None:
        self.settings = settings

    @classmethod
    def load(cls, overrides: dict[str, Any], env_file: Any = ".env") -> Self:
        """Read the settings from the environment and `env_file`; `overrides` are keyed by
        environment variable name (``SLACK_MODE``) and win over both."""
        prefix = str(cls.settings_class.model_config.get("env_prefix", "")).upper()
        own = {
            name[len(prefix) :].lower(): value
            for name, value in overrides.items()
            if name.upper().startswith(prefix) and name[len(prefix) :].lower() in cls.settings_class.model_fields
        }
        return cls(cast(SettingsT, cls.settings_class(_env_file=env_file, **own)))

    @classmethod
    def env_name(cls, field: str) -> str:
        """The environment variable a settings field is read from."""
        return f"{cls.settings_class.model_config.get('env_prefix', '')}{field}".upper()

    @abstractmethod
    def build(self, services: GatewayServices) -> PlatformAdapter:
        """The running adapter; only called when `settings.configured`."""
