"""The ingest benchmark's traffic: signed Slack Events API deliveries in a realistic mix.

Per message a user writes:
- 30 % mentions in a channel, which Slack delivers twice: `app_mention` and its companion
  `message` (same ts, so one stored event);
- 10 % mentions inside a thread of people's (`thread_ts` set), delivered twice likewise: the
  companion is a thread reply, which the gateway also checks against its live threads;
- 35 % follow-ups in a thread the bot is part of (`message` with `thread_ts`, no mention; the
  gateway asks its database whether it knows the thread);
- 25 % direct messages (`message`, `channel_type: im`).
About 1 % of deliveries are sent again a little later with Slack's retry headers
(X-Slack-Retry-Num: 1, X-Slack-Retry-Reason: http_timeout): each must be a duplicate.
"""

from __future__ import annotations

import itertools
import random
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.slack_events import app_mention, message, signed_request  # noqa: E402

SECRET = "bench-signing-secret"
TEAM = "T1"
THREAD_CHANNELS = 50  # channels with one live bot thread each, for the follow-ups
RETRY_SHARE = 0.01
_ts = itertools.count(1)


@dataclass(frozen=True)
class Delivery:
    """One HTTP delivery of a message (`message`: its inbox dedupe key, which the message's
    companion events and retries share)."""

    body: bytes
    headers: dict[str, str]
    message: str


def thread_roots() -> list[tuple[str, str]]:
    """(channel, root ts) of the bot threads the follow-ups continue (seeded before the run)."""
    return [(f"CT{k}", f"1600000000.{k:06d}") for k in range(THREAD_CHANNELS)]


def _next_ts() -> str:
    return f"1700{next(_ts):09d}.000100"


def message_key(payload: dict) -> str:
    """The inbox's dedupe key of the message a delivery carries."""
    event = payload["event"]
    return f"slack:{payload['team_id']}:{event['channel']}:{event['ts']}"


def _message_deliveries(kind: str, tag: str, rng: random.Random) -> list[dict]:
    ts = _next_ts()
    user = f"U{rng.randrange(500)}"
    if kind == "mention":
        channel = f"C{rng.randrange(50)}"
        text = "<@UBOT> how did sales move last week?"
        return [
            app_mention(text, user, channel, ts=ts, event_id=f"Ev{tag}{ts}a"),
            message(text, user, channel, ts=ts, channel_type="channel", event_id=f"Ev{tag}{ts}m"),
        ]
    if kind == "thread mention":
        channel = f"C{rng.randrange(50)}"
        root = f"1650000000.{rng.randrange(1000):06d}"
        text = "<@UBOT> can you check these numbers?"
        return [
            app_mention(text, user, channel, ts=ts, thread_ts=root, event_id=f"Ev{tag}{ts}a"),
            message(text, user, channel, ts=ts, channel_type="channel", thread_ts=root, event_id=f"Ev{tag}{ts}m"),
        ]
    if kind == "follow-up":
        channel, root = rng.choice(thread_roots())
        text = "and by channel?"
        return [message(text, user, channel, ts=ts, channel_type="channel", thread_ts=root, event_id=f"Ev{tag}{ts}")]
    text = "what were yesterday's refunds?"
    return [message(text, user, f"D{user}", ts=ts, channel_type="im", event_id=f"Ev{tag}{ts}")]


def realistic_mix(count: int, tag: str, seed: int | str | None = None) -> list[Delivery]:
    """`count` signed deliveries in the mix above (retries included), in sending order.

    `seed` fixes the sequence of kinds, users, channels and retries (the tag when not given);
    `tag` goes into the event ids, so two sides can take the same sequence as distinct events."""
    rng = random.Random(f"seed:{seed}" if seed is not None else tag)
    out: list[Delivery] = []
    retries: dict[int, dict] = {}
    while len(out) < count:
        if retries and min(retries) <= len(out):
            payload = retries.pop(min(retries))
            body, headers = signed_request(payload, SECRET, retry_num=1, retry_reason="http_timeout")
            out.append(Delivery(body, headers, message_key(payload)))
            continue
        kind = rng.choices(["mention", "thread mention", "follow-up", "dm"], weights=[30, 10, 35, 25])[0]
        for payload in _message_deliveries(kind, tag, rng):
            body, headers = signed_request(payload, SECRET)
            out.append(Delivery(body, headers, message_key(payload)))
            if rng.random() < RETRY_SHARE:
                retries[len(out) + rng.randrange(20, 200)] = payload
    return out[:count]


def fresh_mentions(count: int, tag: str) -> list[Delivery]:
    """`count` channel mentions, each opening a thread of its own (to keep the workers busy)."""
    out = []
    for n in range(count):
        payload = app_mention("<@UBOT> break last quarter's GMV down by region", f"UB{n}", f"CB{n}",
                              ts=_next_ts(), event_id=f"Ev{tag}{n}")
        body, headers = signed_request(payload, SECRET)
        out.append(Delivery(body, headers, message_key(payload)))
    return out


def deliveries_per_message() -> float:
    """Deliveries the mix sends per message a user writes (retries included)."""
    return ((0.30 + 0.10) * 2 + 0.35 + 0.25) * (1 + RETRY_SHARE)
