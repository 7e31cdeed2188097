"""Slack's chat streaming methods for the fake Web API (``tests.fakes.slack_api.FakeSlack``).

``chat.startStream`` posts a bot reply in a thread that then grows with ``chat.appendStream``
(markdown text, task and plan updates) until ``chat.stopStream`` finalizes it (with metadata
and blocks, as Slack takes them there). As in Slack, a stream in a channel names the user and
team it answers; appending to or stopping a message that is not a live stream fails. A
workspace that does not stream is one call away::

    fake.streams.refuse("unknown_method")   # every streaming call now fails with that error

The stream's message is an ordinary bot message in ``FakeSlack.messages`` (its ``text`` and
``markdown_text`` hold the text so far), so ``FakeSlack.posted`` shows streamed answers too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

# Slack's limit on the markdown text of one call.
MAX_MARKDOWN_CHARS = 12_000
_TASK_STATUSES = frozenset({"pending", "in_progress", "complete", "error"})


class StreamError(Exception):
    """A streaming call Slack would refuse: ``{"ok": false, "error": error}``."""

    def __init__(self, error: str, detail: str | None = None) -> None:
        super().__init__(error)
        self.error = error
        self.detail = detail


@dataclass
class FakeStream:
    """One streamed message as the fake tracks it."""

    channel: str
    ts: str
    thread_ts: str
    recipient_user_id: str | None
    recipient_team_id: str | None
    text: str = ""
    tasks: dict[str, dict[str, Any]] = field(default_factory=dict)  # task id -> latest update
    plan_title: str | None = None
    appends: int = 0
    stopped: bool = False

    def task_titles(self) -> list[str]:
        """Titles of the tasks shown, in the order they first appeared."""
        return [task["title"] for task in self.tasks.values()]


PostMessage = Callable[..., dict[str, Any]]
FindMessage = Callable[[str, str], dict[str, Any]]


class FakeStreams:
    """The streaming state of a ``FakeSlack``; its methods are the Web API methods' handlers."""

    def __init__(self, post: PostMessage, find: FindMessage, bot_id: str) -> None:
        self._post = post
        self._find = find
        self._bot_id = bot_id
        self.streams: list[FakeStream] = []
        self.refused: str | None = None

    def refuse(self, error: str | None = "not_allowed") -> None:
        """Fail every streaming call with ``error`` (None: stream again), as a workspace without
        streaming does."""
        self.refused = error

    def of(self, channel: str, ts: str) -> FakeStream:
        """The stream that made the message ``ts`` (KeyError if none did)."""
        for stream in self.streams:
            if stream.channel == channel and stream.ts == ts:
                return stream
        raise KeyError((channel, ts))

    def start(self, params: dict[str, Any]) -> dict[str, Any]:
        self._check_refused()
        _require(params, "channel", "thread_ts")
        channel = params["channel"]
        if not channel.startswith("D"):
            # Outside a DM Slack needs to know whom the streamed text is for.
            _require(params, "recipient_team_id", "recipient_user_id")
        message = self._post(channel, thread_ts=params["thread_ts"], text="", markdown_text="")
        stream = FakeStream(
            channel,
            message["ts"],
            params["thread_ts"],
            params.get("recipient_user_id"),
            params.get("recipient_team_id"),
        )
        self.streams.append(stream)
        self._apply(stream, message, params)
        return {"channel": channel, "ts": message["ts"]}

    def append(self, params: dict[str, Any]) -> dict[str, Any]:
        self._check_refused()
        stream, message = self._live(params)
        self._apply(stream, message, params)
        stream.appends += 1
        return {"channel": stream.channel, "ts": stream.ts}

    def stop(self, params: dict[str, Any]) -> dict[str, Any]:
        self._check_refused()
        stream, message = self._live(params)
        self._apply(stream, message, params)
        if params.get("metadata"):
            message["metadata"] = params["metadata"]
        if params.get("blocks"):
            message["blocks"] = params["blocks"]
        stream.stopped = True
        return {"channel": stream.channel, "ts": stream.ts, "message": {**message}}

    def _check_refused(self) -> None:
        if self.refused is not None:
            raise StreamError(self.refused)

    def _live(self, params: dict[str, Any]) -> tuple[FakeStream, dict[str, Any]]:
        _require(params, "channel", "ts")
        message = self._find(params["channel"], params["ts"])  # message_not_found if deleted
        if message.get("bot_id") != self._bot_id:
            raise StreamError("cant_update_message")
        try:
            stream = self.of(params["channel"], params["ts"])
        except KeyError:
            raise StreamError("message_not_in_streaming_state") from None
        if stream.stopped:
            raise StreamError("message_not_in_streaming_state")
        return stream, message

    def _apply(self, stream: FakeStream, message: dict[str, Any], params: dict[str, Any]) -> None:
        """Add a call's markdown text and chunks to the stream and its message."""
        texts = [params["markdown_text"]] if params.get("markdown_text") else []
        for chunk in params.get("chunks") or []:
            kind = chunk.get("type") if isinstance(chunk, dict) else None
            if kind == "markdown_text":
                texts.append(str(chunk.get("text", "")))
            elif kind == "task_update":
                if not chunk.get("id") or not chunk.get("title") or chunk.get("status") not in _TASK_STATUSES:
                    raise StreamError("invalid_chunks", "task_update needs an id, a title and a known status")
                stream.tasks[chunk["id"]] = {k: v for k, v in chunk.items() if k != "type"}
            elif kind == "plan_update":
                stream.plan_title = str(chunk.get("title", ""))
            else:
                raise StreamError("invalid_chunks", f"unknown chunk type {kind!r}")
        added = "".join(texts)
        if len(added) > MAX_MARKDOWN_CHARS:
            raise StreamError("msg_too_long")
        stream.text += added
        message["text"] = message["markdown_text"] = stream.text


def _require(params: dict[str, Any], *names: str) -> None:
    for name in names:
        if params.get(name) in (None, ""):
            raise StreamError("invalid_arguments", f"missing required field: {name}")
