# Over 600 lines: the Feishu adapter's behaviours against the fake Open Platform, one concern per test.
"""The Feishu adapter end to end: webhook verification and parsing, the responder against
FakeFeishu through the real lark-oapi client, and long-connection mode over the fake's websocket."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from adapters.base import AcceptOutcome, ConnectionState, GatewayServices
from adapters.download import AttachmentError
from adapters.feishu import render
from adapters.feishu.app import FeishuAdapter
from adapters.feishu.client import FeishuClient
from adapters.feishu.config import FeishuConfig
from adapters.feishu.events import Ignored, parse_event
from adapters.feishu.longconn import FeishuLongConnection
from adapters.feishu.responder import FeishuResponder
from adapters.feishu.transport import ChatPacer
from adapters.feishu.webhook import make_feishu_handler
from agent_core.messages import InboundMessage, OutboundFile, OutboundReply, ThreadKey
from tests.fakes.feishu_api import FakeFeishu
from tests.fakes.feishu_events import (
    BOT_OPEN_ID,
    ENCRYPT_KEY,
    TENANT_KEY,
    VERIFICATION_TOKEN,
    bot_mention,
    card_action,
    encrypted_body,
    file_event,
    mention,
    post_event,
    signed_headers,
    text_event,
    url_verification,
)
from tests.waiting import eventually, scaled

# --- helpers ---------------------------------------------------------------------------------


class Inbox:
    """An in-memory accept callback that dedupes by event_id and dedupe_key, like the gateway's."""

    def __init__(self) -> None:
        self.calls = 0
        self.accepted: list[InboundMessage] = []
        self._seen: set[str] = set()

    async def accept(self, msg: InboundMessage, *, if_thread_live: bool = False) -> AcceptOutcome:
        self.calls += 1
        keys = {f"event:{msg.event_id}", f"message:{msg.dedupe_key}"}
        if keys & self._seen:
            return AcceptOutcome.DUPLICATE
        self._seen |= keys
        self.accepted.append(msg)
        return AcceptOutcome.ACCEPTED

    async def known_thread(self, key: ThreadKey) -> bool:
        """Like the thread store: a conversation exists once a message of it was accepted."""
        return any(m.thread == key for m in self.accepted)


def make_config(**overrides: Any) -> FeishuConfig:
    values: dict[str, Any] = {
        "app_id": "cli_test",
        "app_secret": "secret",
        "verification_token": VERIFICATION_TOKEN,
        "encrypt_key": ENCRYPT_KEY,
        "stream_update_interval_ms": 100,
    }
    values.update(overrides)
    return FeishuConfig(**values)


def fake_config(fake: FakeFeishu, **overrides: Any) -> FeishuConfig:
    return make_config(
        domain=fake.domain, app_id=fake.app_id, app_secret=fake.app_secret, **overrides
    )


async def bot_id() -> str:
    return BOT_OPEN_ID


async def no_bot_id() -> str:
    raise AssertionError("url_verification must not need the bot identity")


@asynccontextmanager
async def webhook(
    config: FeishuConfig, inbox: Inbox, provider: Callable[[], Awaitable[str]] = bot_id
) -> AsyncIterator[TestClient]:
    app = web.Application()
    app.router.add_post("/feishu/events", make_feishu_handler(config, inbox.accept, provider, inbox.known_thread))
    async with TestClient(TestServer(app)) as client:
        yield client


async def post_encrypted(client: TestClient, payload: dict[str, Any], **header_args: Any) -> Any:
    body = encrypted_body(payload)
    return await client.post(
        "/feishu/events", data=body, headers=signed_headers(body, **header_args)
    )


@pytest.fixture
def fake() -> Iterator[FakeFeishu]:
    with FakeFeishu() as server:
        yield server


@pytest.fixture
async def client(fake: FakeFeishu) -> AsyncIterator[FeishuClient]:
    api = FeishuClient(fake_config(fake), backoff_base_s=0.05)
    yield api
    await api.aclose()


def group_mention(text: str = "@_user_1 revenue by region?", **kwargs: Any) -> InboundMessage:
    event = text_event(text, mentions=[bot_mention()], **kwargs)
    msg = parse_event(event, config=make_config(), bot_open_id=BOT_OPEN_ID)
    assert isinstance(msg, InboundMessage)
    return msg


# --- webhook: verification -------------------------------------------------------------------


async def test_encrypted_url_verification_answers_challenge_without_api_calls() -> None:
    inbox = Inbox()
    async with webhook(make_config(), inbox, no_bot_id) as http:
        body = encrypted_body(url_verification("ch-1"))
        unsigned = await http.post("/feishu/events", data=body)
        assert unsigned.status == 200
        assert await unsigned.json() == {"challenge": "ch-1"}
        signed = await http.post("/feishu/events", data=body, headers=signed_headers(body))
        assert await signed.json() == {"challenge": "ch-1"}
        forged = await http.post(
            "/feishu/events",
            data=body,
            headers={**signed_headers(body), "X-Lark-Signature": "0" * 64},
        )
        assert forged.status == 401
    assert inbox.calls == 0


async def test_plain_url_verification_checks_the_token() -> None:
    config = make_config(encrypt_key=None)
    async with webhook(config, Inbox(), no_bot_id) as http:
        ok = await http.post("/feishu/events", json=url_verification("ch-2"))
        assert await ok.json() == {"challenge": "ch-2"}
        wrong = await http.post("/feishu/events", json=url_verification("ch-2", token="nope"))
        assert wrong.status == 401


async def test_failed_checks_answer_401_and_store_nothing() -> None:
    inbox = Inbox()
    payload = text_event("hi", chat_type="p2p")
    async with webhook(make_config(), inbox) as http:
        body = encrypted_body(payload)
        bad_signature = {**signed_headers(body), "X-Lark-Signature": "f" * 64}
        assert (await http.post("/feishu/events", data=body, headers=bad_signature)).status == 401
        unsigned = await http.post("/feishu/events", data=body)
        assert unsigned.status == 401
        stale = await post_encrypted(http, payload, timestamp=int(time.time()) - 3600)
        assert stale.status == 401
        wrong_token = await post_encrypted(http, text_event("hi", chat_type="p2p", token="other"))
        assert wrong_token.status == 401
        wrong_key = encrypted_body(payload, "another-key")
        response = await http.post(
            "/feishu/events", data=wrong_key, headers=signed_headers(wrong_key)
        )
        assert response.status == 401
        plaintext = json.dumps(payload).encode()
        response = await http.post(
            "/feishu/events", data=plaintext, headers=signed_headers(plaintext)
        )
        assert response.status == 401
        assert (await http.post("/feishu/events", data=b"{not json")).status == 400
    assert inbox.calls == 0


async def test_header_names_are_case_insensitive() -> None:
    inbox = Inbox()
    async with webhook(make_config(), inbox) as http:
        body = encrypted_body(text_event("hi", chat_type="p2p"))
        headers = {name.lower(): value for name, value in signed_headers(body).items()}
        assert (await http.post("/feishu/events", data=body, headers=headers)).status == 200
    assert len(inbox.accepted) == 1


# --- webhook: routing and parsing ------------------------------------------------------------


async def test_group_mention_starts_a_topic_conversation() -> None:
    inbox = Inbox()
    event = text_event(
        "@_user_1 revenue by region, cc @_user_2 ?",
        mentions=[bot_mention(), mention("@_user_2", "ou_bob", "Bob")],
        message_id="om_root",
        chat_id="oc_sales",
    )
    async with webhook(make_config(), inbox) as http:
        assert (await post_encrypted(http, event)).status == 200
    [msg] = inbox.accepted
    assert msg.text == "revenue by region, cc @Bob ?"
    assert msg.message_id == "om_root" and msg.event_id == event["header"]["event_id"]
    assert (msg.workspace, msg.channel, msg.is_dm) == (TENANT_KEY, "oc_sales", False)
    assert msg.thread.root == "om_root" and msg.reply_in_thread == "om_root"
    assert msg.user == "ou_alice"

    follow_up = text_event(
        "@_user_1 and by channel?",
        mentions=[bot_mention()],
        root_id="om_root",
        thread_id="omt_1",
        chat_id="oc_sales",
    )
    parsed = parse_event(follow_up, config=make_config(), bot_open_id=BOT_OPEN_ID)
    assert isinstance(parsed, InboundMessage)
    assert parsed.thread == msg.thread and parsed.reply_in_thread == "om_root"


async def test_group_message_without_mention_is_ignored() -> None:
    inbox = Inbox()
    async with webhook(make_config(), inbox) as http:
        response = await post_encrypted(
            http, text_event("@_user_1 hi", mentions=[mention("@_user_1", "ou_bob", "Bob")])
        )
        assert response.status == 200
        assert (await post_encrypted(http, card_action())).status == 200
    assert inbox.calls == 0


async def test_p2p_messages_continue_the_main_conversation() -> None:
    inbox = Inbox()
    async with webhook(make_config(), inbox) as http:
        await post_encrypted(http, text_event("top sellers?", chat_type="p2p", chat_id="oc_dm"))
        await post_encrypted(
            http,
            text_event(
                "in a topic",
                chat_type="p2p",
                chat_id="oc_dm",
                root_id="om_first",
                thread_id="omt_9",
            ),
        )
    main, topic = inbox.accepted
    assert main.is_dm and main.thread.root == "main" and main.reply_in_thread is None
    assert main.text == "top sellers?"
    assert topic.thread.root == "om_first" and topic.reply_in_thread == "om_first"


async def test_same_event_four_times_is_accepted_once() -> None:
    inbox = Inbox()
    event = text_event("@_user_1 hi", mentions=[bot_mention()])
    async with webhook(make_config(), inbox) as http:
        for _ in range(4):
            assert (await post_encrypted(http, event)).status == 200
    assert inbox.calls == 4 and len(inbox.accepted) == 1


def test_post_messages_flat_and_locale_wrapped() -> None:
    paragraphs = [
        [
            {"tag": "at", "user_id": "@_user_1", "user_name": "BA Agent"},
            {"tag": "text", "text": " compare "},
            {"tag": "a", "text": "Q3", "href": "https://example.com/q3"},
        ],
        [
            {"tag": "text", "text": "with "},
            {"tag": "at", "user_id": "@_user_2", "user_name": "Bob"},
        ],
        [{"tag": "img", "image_key": "img_v3_abc"}],
    ]
    mentions = [bot_mention(), mention("@_user_2", "ou_bob", "Bob")]
    config = make_config()
    flat = parse_event(
        post_event({"title": "Sales", "content": paragraphs}, mentions=mentions),
        config=config,
        bot_open_id=BOT_OPEN_ID,
    )
    wrapped = parse_event(
        post_event({"en_us": {"title": "Sales", "content": paragraphs}}, mentions=mentions),
        config=config,
        bot_open_id=BOT_OPEN_ID,
    )
    for msg in (flat, wrapped):
        assert isinstance(msg, InboundMessage)
        assert msg.text == "Sales\ncompare [Q3](https://example.com/q3)\nwith @Bob"
        [image] = msg.attachments
        assert image.file_id == "img_v3_abc" and (image.url or "").endswith("type=image")


def test_filtering_rules() -> None:
    config = make_config()
    parse = lambda event, cfg=config: parse_event(event, config=cfg, bot_open_id=BOT_OPEN_ID)  # noqa: E731
    assert isinstance(parse(text_event("x", chat_type="p2p", sender_type="app")), Ignored)
    assert isinstance(parse(text_event("x", chat_type="p2p", sender_open_id=BOT_OPEN_ID)), Ignored)
    stale = text_event("x", chat_type="p2p", create_time_ms=int((time.time() - 3600) * 1000))
    assert isinstance(parse(stale), Ignored)
    at_all = text_event("@_all weekly numbers?")
    assert isinstance(parse(at_all), Ignored)
    answered = parse(at_all, make_config(respond_to_at_all=True))
    assert isinstance(answered, InboundMessage) and answered.text == "weekly numbers?"
    upload = parse(file_event("file_v3_1", "sales.csv", chat_type="p2p"))
    assert isinstance(upload, InboundMessage) and upload.text == ""
    assert (
        upload.attachments[0].name == "sales.csv" and upload.attachments[0].mime_type == "text/csv"
    )


def test_long_answers_split_by_size_and_tables() -> None:
    table = "| region | revenue |\n|---|---|\n" + "\n".join(f"| r{i} | {i} |" for i in range(3))
    parts = render.split_markdown("\n\n".join(["intro", table, table, table, table, table]))
    assert len(parts) == 2 and [p.count("|---|") for p in parts] == [3, 2]
    huge = "```sql\n" + "\n".join(f"SELECT {i};  -- 数据" + "x" * 80 for i in range(2000)) + "\n```"
    pieces = render.split_markdown(huge)
    assert len(pieces) > 1
    for piece in pieces:
        assert piece.startswith("```sql") and piece.endswith("```")
        assert (
            len(json.dumps(render.answer_card(piece), ensure_ascii=False).encode())
            <= render.MAX_CARD_BYTES
        )


# --- responder against FakeFeishu ------------------------------------------------------------


async def test_streaming_answer_lifecycle(fake: FakeFeishu, client: FeishuClient) -> None:
    responder = FeishuResponder(client, fake_config(fake))
    msg = group_mention()
    await responder.show_progress(msg)
    assert list(fake.reactions.values()) == [(msg.message_id, "Typing")]

    stream = await responder.open_stream(msg, "delivery-1")
    assert stream is not None
    await responder.show_status(msg, "Running sql_query…")
    status_card = fake.cards[stream.card_id]
    await eventually(  # the status line shows before the answer starts
        lambda: any("Running sql_query" in t for _, t, _ in status_card.element_updates), what="the status line"
    )
    text = ""
    for word in "Revenue grew in every region this quarter".split():
        text += word + " "
        await stream.update(text)
        await asyncio.sleep(0.03)
    await stream.close()
    await responder.deliver(msg, OutboundReply(text="**Revenue** grew 12%."), "delivery-1")
    await responder.clear_progress(msg)

    [card_message] = fake.messages
    assert card_message.msg_type == "interactive" and card_message.reply_to == msg.message_id
    assert card_message.reply_in_thread
    card = fake.cards[card_message.content["data"]["card_id"]]
    assert card.sequences == sorted(set(card.sequences))  # strictly increasing
    texts = [t for _, t, _ in card.element_updates]
    assert "Running sql_query" in texts[0]
    assert texts[-1] == text and len(texts) < 8  # coalesced, the last one complete
    updated_at = [c for c in fake.calls_to("card.element.content")]
    assert len(updated_at) == len(texts)
    assert card.settings == [{"config": {"streaming_mode": False}}]
    assert card.updates[-1]["body"]["elements"][0]["content"] == "**Revenue** grew 12%."
    assert not card.streaming and fake.reactions == {}


async def test_stream_updates_are_throttled(fake: FakeFeishu, client: FeishuClient) -> None:
    responder = FeishuResponder(client, fake_config(fake, stream_update_interval_ms=200))
    msg = group_mention()
    stream = await responder.open_stream(msg, "d-throttle")
    assert stream is not None
    started = time.monotonic()
    for i in range(30):
        await stream.update(f"part {i}")
        await asyncio.sleep(0.02)
    await stream.close()
    elapsed = time.monotonic() - started
    updates = fake.cards[fake.messages[0].content["data"]["card_id"]].element_updates
    assert updates[-1][1] == "part 29"
    assert len(updates) <= elapsed / 0.2 + 2


async def test_retried_turn_reuses_its_card(fake: FakeFeishu, client: FeishuClient) -> None:
    responder = FeishuResponder(client, fake_config(fake))
    msg = group_mention()
    first = await responder.open_stream(msg, "d-retry")
    assert first is not None
    await first.update("partial answer")
    await first.close()  # the turn failed; the gateway retries it with the same delivery id
    second = await responder.open_stream(msg, "d-retry")
    assert second is first
    await second.update("complete answer")
    await second.close()
    await responder.deliver(msg, OutboundReply(text="complete answer"), "d-retry")
    [card_message] = fake.messages
    card = fake.cards[card_message.content["data"]["card_id"]]
    assert [s["config"]["streaming_mode"] for s in card.settings] == [False, True, False]
    assert card.element_updates[-1][1] == "complete answer"
    assert card.sequences == sorted(set(card.sequences))


async def test_card_failures_fall_back_to_a_post(fake: FakeFeishu, client: FeishuClient) -> None:
    responder = FeishuResponder(client, fake_config(fake))
    msg = group_mention()
    fake.fail("card.create", code=200850, msg="cardkit not permitted")
    assert await responder.open_stream(msg, "d-2") is None
    fake.fail("message.reply", code=230099, msg="card content invalid")
    await responder.deliver(msg, OutboundReply(text="# Result\n\nall good"), "d-2")
    [post] = fake.messages
    assert post.msg_type == "post"
    assert post.content["zh_cn"]["content"][0][0] == {"tag": "md", "text": "# Result\n\nall good"}


async def test_retried_delivery_posts_once(fake: FakeFeishu, client: FeishuClient) -> None:
    responder = FeishuResponder(client, fake_config(fake, streaming_cards=False))
    msg = group_mention()
    table = "| a | b |\n|---|---|\n| 1 | 2 |"
    reply = OutboundReply(text="\n\n".join([table] * 5))
    await responder.deliver(msg, reply, "d-3")
    await responder.deliver(msg, reply, "d-3", resumed=True)
    # One table component per card: five cards, each posted once however often it was sent.
    assert len(fake.calls_to("message.reply")) == 10
    assert [m.msg_type for m in fake.messages] == ["interactive"] * 5
    assert all(m.reply_in_thread for m in fake.messages)


async def test_reply_placement_dm_and_quote_reply(fake: FakeFeishu, client: FeishuClient) -> None:
    config = fake_config(fake, reply_in_thread=False, streaming_cards=False)
    responder = FeishuResponder(client, config)
    dm = parse_event(
        text_event("hi", chat_type="p2p", chat_id="oc_dm"), config=config, bot_open_id=BOT_OPEN_ID
    )
    group = parse_event(
        text_event("@_user_1 hi", mentions=[bot_mention()]), config=config, bot_open_id=BOT_OPEN_ID
    )
    assert isinstance(dm, InboundMessage) and isinstance(group, InboundMessage)
    await responder.deliver(dm, OutboundReply(text="hello"), "d-dm")
    await responder.deliver(group, OutboundReply(text="hello"), "d-group")
    to_chat, quote = fake.messages
    assert to_chat.chat_id == "oc_dm" and to_chat.reply_to is None
    assert quote.reply_to == group.message_id and not quote.reply_in_thread


async def test_scheduled_reports_post_top_level_or_into_their_topic(fake: FakeFeishu, client: FeishuClient) -> None:
    """A scheduled run has no user message to quote: it posts to the group itself, or replies
    in its topic through the topic's root message."""
    from datetime import UTC, datetime

    from agent_core.schedules.tables import ReportScheduleRow
    from gateway.jobs.report_messages import report_message

    responder = FeishuResponder(client, fake_config(fake, streaming_cards=False))
    fire = datetime(2026, 11, 23, 1, 0, tzinfo=UTC)
    common = {"creator": "ou_creator", "platform": "feishu", "workspace": "tenant", "channel": "oc_group",
              "cron": "0 9 * * mon", "tz": "Asia/Shanghai", "prompt": "Weekly GMV", "next_run_at": fire}
    top_level = report_message(ReportScheduleRow(id=7, is_dm=False, thread_root=None, **common), fire)
    in_topic = report_message(ReportScheduleRow(id=8, is_dm=False, thread_root="om_topic_root", **common), fire)
    await responder.deliver(top_level, OutboundReply(text="GMV report"), "d-s7")
    await responder.deliver(in_topic, OutboundReply(text="GMV report"), "d-s8")
    group_post, topic_reply = fake.messages
    assert group_post.chat_id == "oc_group" and group_post.reply_to is None
    assert topic_reply.reply_to == "om_topic_root" and topic_reply.reply_in_thread


async def test_files_are_uploaded_and_posted(
    fake: FakeFeishu, client: FeishuClient, tmp_path: Path
) -> None:
    chart, table = tmp_path / "chart.png", tmp_path / "data.csv"
    chart.write_bytes(b"\x89PNG fake")
    table.write_text("a,b\n1,2\n")
    responder = FeishuResponder(client, fake_config(fake, streaming_cards=False))
    reply = OutboundReply(
        text="see attached",
        files=[
            OutboundFile(path=str(chart), title="Chart", mime_type="image/png"),
            OutboundFile(path=str(table), title="Data", mime_type="text/csv"),
        ],
    )
    await responder.deliver(group_mention(), reply, "d-files")
    _, image, file = fake.messages
    assert image.msg_type == "image" and fake.uploads[image.content["image_key"]] == b"\x89PNG fake"
    assert file.msg_type == "file" and fake.uploads[file.content["file_key"]] == b"a,b\n1,2\n"


async def test_attachment_download(fake: FakeFeishu, client: FeishuClient, tmp_path: Path) -> None:
    config = fake_config(fake)
    responder = FeishuResponder(client, config)
    event = file_event("file_v3_9", "sales.csv", chat_type="p2p", message_id="om_upload")
    msg = parse_event(event, config=config, bot_open_id=BOT_OPEN_ID)
    assert isinstance(msg, InboundMessage)
    csv = b"region,revenue\nnorth,10\n"
    fake.add_resource("om_upload", "file_v3_9", csv, filename="sales.csv")
    dest = tmp_path / "uploads" / "sales.csv"
    assert await responder.fetch_attachment(msg, msg.attachments[0], dest, 1000) == dest
    assert dest.read_bytes() == csv

    fake.add_resource("om_upload", "file_v3_9", b"x" * 5000, filename="sales.csv")
    with pytest.raises(AttachmentError, match="larger than"):
        await responder.fetch_attachment(msg, msg.attachments[0], tmp_path / "big.csv", 1000)
    with pytest.raises(AttachmentError):  # unknown to Feishu
        await responder.fetch_attachment(
            msg, msg.attachments[0].model_copy(update={"file_id": "nope"}), tmp_path / "x", 1000
        )
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["sales.csv", "uploads"]  # no leftovers


async def test_rate_limits_back_off_and_succeed(fake: FakeFeishu, client: FeishuClient) -> None:
    responder = FeishuResponder(client, fake_config(fake, streaming_cards=False))
    fake.fail("message.reply", code=230020, msg="frequency limit")
    await responder.deliver(group_mention(), OutboundReply(text="one"), "d-rl1")
    fake.fail("reaction.create", code=99991400, status=429, headers={"x-ogw-ratelimit-reset": "1"})
    started = time.monotonic()
    await responder.show_progress(group_mention())
    assert time.monotonic() - started >= 0.9
    assert len(fake.calls_to("message.reply")) == 2 and len(fake.messages) == 1
    assert len(fake.calls_to("reaction.create")) == 2 and len(fake.reactions) == 1


async def test_token_is_cached_and_renewed_when_rejected(
    fake: FakeFeishu, client: FeishuClient
) -> None:
    assert await client.bot_open_id() == fake.bot_open_id
    assert await client.bot_open_id() == fake.bot_open_id
    await client.add_reaction("om_1", "Typing")
    assert len(fake.calls_to("token")) == 1 and len(fake.calls_to("bot.info")) == 1
    fake.revoke_tokens()
    await client.add_reaction("om_1", "Typing")
    assert len(fake.calls_to("token")) == 2


async def test_chat_pacer_limits_sends_per_chat() -> None:
    pacer = ChatPacer(5)
    started = time.monotonic()
    for _ in range(6):
        await pacer.wait("oc_a")
    await pacer.wait("oc_b")  # another chat is not held back
    assert 0.9 <= time.monotonic() - started < scaled(1.5)


# --- long connection -------------------------------------------------------------------------


async def test_long_connection_delivers_reconnects_and_restarts_when_silent(
    fake: FakeFeishu,
) -> None:
    config = fake_config(fake, mode="websocket", ws_silence_timeout_s=2.5)
    inbox = Inbox()
    adapter = FeishuAdapter(config, GatewayServices(accept=inbox.accept, is_live=inbox.known_thread))
    connection = adapter.long_connection
    assert connection is not None
    states: list[ConnectionState] = []

    def sample() -> None:
        if not states or states[-1] != connection.state:
            states.append(connection.state)

    async def watch() -> None:
        while True:
            sample()
            await asyncio.sleep(0.01)

    assert connection.state == ConnectionState.STOPPED
    await adapter.start()
    watcher = asyncio.create_task(watch())
    try:
        await eventually(lambda: connection.state == ConnectionState.CONNECTED)

        event = text_event("how are sales?", chat_type="p2p", chat_id="oc_dm")
        fake.ws_push_event(event)
        await eventually(lambda: len(inbox.accepted) == 1)
        await eventually(lambda: len(fake.ws_acks) == 1)
        assert fake.ws_acks[0]["response"]["code"] == 200
        assert inbox.accepted[0].text == "how are sales?"

        first_connected = connection.status().connected_since
        fake.ws_drop()
        await eventually(
            lambda: fake.ws_connections == 2 and connection.state == ConnectionState.CONNECTED
        )
        # connected_since is only set on a transition into "connected": it moved, so the state
        # went through "reconnecting" even if the sampler below was too slow to see it.
        assert connection.status().connected_since != first_connected
        fake.ws_push_event(event)  # Feishu redelivers what it is unsure about
        await eventually(lambda: inbox.calls == 2)
        assert len(inbox.accepted) == 1

        before_silence = connection.status().connected_since
        fake.ws_silence(True)
        await eventually(lambda: fake.ws_connections == 3, timeout=15)
        fake.ws_silence(False)
        await eventually(lambda: connection.state == ConnectionState.CONNECTED)
        status = adapter.status()
        assert status is not None and status.restarts == 1 and status.last_event_at is not None
        # Restarted after the silence: through "reconnecting" (which clears connected_since) and
        # back; against the local fake that can take less than the sampler's 10 ms.
        assert status.connected_since is not None and status.connected_since != before_silence
    finally:
        watcher.cancel()
        sample()
        await adapter.stop()
    assert connection.state == ConnectionState.STOPPED
    assert states[:2] == [ConnectionState.CONNECTING, ConnectionState.CONNECTED]
    assert set(states) <= {ConnectionState.CONNECTING, ConnectionState.CONNECTED, ConnectionState.RECONNECTING}


async def test_long_connection_joins_a_split_event_and_acknowledges_it_once(fake: FakeFeishu) -> None:
    inbox = Inbox()
    client = FeishuClient(fake_config(fake))
    connection = FeishuLongConnection(
        fake_config(fake, mode="websocket"), inbox.accept, client.bot_open_id, inbox.known_thread
    )
    await connection.start()
    try:
        await eventually(lambda: connection.state == ConnectionState.CONNECTED)
        long_question = "@_user_1 " + "revenue by region and channel, " * 200
        frame_id = fake.ws_push_event(text_event(long_question, mentions=[bot_mention()]), parts=3)
        await eventually(lambda: len(fake.ws_acks) == 1)
        [ack] = fake.ws_acks
        assert ack == {"message_id": frame_id, "response": {"code": 200}}
        [msg] = inbox.accepted
        assert msg.text == long_question.removeprefix("@_user_1 ").strip()
    finally:
        await connection.stop()
        await client.aclose()
    assert connection.state == ConnectionState.STOPPED
    await eventually(lambda: not fake.ws_open)
