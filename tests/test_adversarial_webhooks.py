"""Hostile requests to the event endpoints, through the real running app.

Unauthenticated or malformed requests to /slack/events and /feishu/events answer 400 or 401 —
never 500 with a traceback — store nothing, and leave exactly one WARNING line that does not
quote the body. The log is captured at INFO, as the service runs.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from adapters.slack.render import APPROVE_ACTION, FEEDBACK_ACTION, FEEDBACK_COMMENT_VIEW
from gateway.service.app import RUNNER_OPTIONS, create_app
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.feishu_api import FakeFeishu
from tests.fakes.feishu_events import (
    bot_mention,
    card_action,
    encrypted_body,
    image_event,
    signed_headers,
    text_event,
)
from tests.fakes.feishu_events import url_verification as feishu_url_verification
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import VERIFICATION_TOKEN as SLACK_VERIFICATION_TOKEN
from tests.fakes.slack_events import app_mention, block_actions, encode, message, sign, signed_interaction, view_submission
from tests.harness import SIGNING_SECRET, Gateway, feishu_gateway_settings, gateway_settings, running_gateway

# Put into every hostile body: it must never reach the log.
MARKER = "BODY-MARKER-7f3a"


def _log_report(records: list[logging.LogRecord]) -> list[str]:
    return [f"{r.levelname} {r.name}: {r.getMessage()}" for r in records]


async def _assert_refused(
    gw: Gateway, caplog: pytest.LogCaptureFixture, case: str, status: int, expected: int
) -> None:
    """The request answered `expected`, stored nothing, and logged one WARNING, no body."""
    await asyncio.sleep(0.05)  # let anything the request set off finish logging
    records = caplog.records
    warnings = [r for r in records if r.levelno >= logging.WARNING]
    assert status == expected, f"{case}: answered {status}; log: {_log_report(records)}"
    assert len(warnings) == 1, f"{case}: expected one WARNING, got {_log_report(warnings)}"
    assert warnings[0].levelno == logging.WARNING and warnings[0].exc_info is None, case
    for record in records:
        text = record.getMessage()
        assert MARKER not in text, f"{case}: the body reached the log: {text[:300]}"
        assert SLACK_VERIFICATION_TOKEN not in text, f"{case}: the payload's token reached the log"
    assert await gw.stored_events() == 0, case
    caplog.clear()


# --- Slack -----------------------------------------------------------------------------------


@pytest.fixture
async def slack_gateway(database_url, tmp_path, caplog) -> AsyncIterator[Gateway]:
    # At INFO before the app is built, as `ba-agent serve` runs (slack-bolt takes its loggers'
    # levels from the root logger's when it builds them, unless given a logger).
    caplog.set_level(logging.INFO)
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        async with running_gateway(gateway_settings(database_url, tmp_path, anthropic, slack)) as gw:
            caplog.clear()
            yield gw


async def _post_slack(gw: Gateway, body: bytes, headers: dict[str, str]) -> int:
    async with gw.http.post(gw.server.make_url("/slack/events"), data=body, headers=headers) as resp:
        await resp.read()
        return resp.status


def _with_marker(payload: dict[str, Any]) -> dict[str, Any]:
    payload = json.loads(json.dumps(payload))
    payload["event"]["text"] = f"<@UBOT> {MARKER}\n2026-01-01 00:00:00,000 INFO gateway: forged line"
    return payload


JSON = {"Content-Type": "application/json"}
FORM = {"Content-Type": "application/x-www-form-urlencoded"}


def _slack_event() -> dict[str, Any]:
    return _with_marker(app_mention("<@UBOT> hi", "U1", "C1", ts="1700000001.000100"))


async def test_unauthenticated_slack_requests_get_401_and_one_warning(slack_gateway, caplog) -> None:
    gw = slack_gateway
    now = str(int(time.time()))
    forged_sig = {"X-Slack-Request-Timestamp": now, "X-Slack-Signature": "v0=" + "0" * 64}
    valid_body = encode(_slack_event())
    cases: list[tuple[str, bytes, dict[str, str], int]] = [
        ("bad JSON, unsigned", b'{bad "' + MARKER.encode(), JSON, 401),
        ("bad JSON, forged signature", b'{bad "' + MARKER.encode(), {**JSON, **forged_sig}, 401),
        ("invalid UTF-8", b'{"text": "\xff\xfe' + MARKER.encode() + b'"}', JSON, 401),
        ("invalid UTF-8, forged signature", b'{"text": "\xff\xfe' + MARKER.encode() + b'"}', {**JSON, **forged_sig}, 400),
        ("JSON array", json.dumps([MARKER]).encode(), JSON, 401),
        ("JSON array, forged signature", json.dumps([MARKER]).encode(), {**JSON, **forged_sig}, 401),
        ("form with a bad payload", b"payload=%7Bbad" + MARKER.encode(), FORM, 401),
        ("form with a bad payload, forged signature", b"payload=%7Bbad" + MARKER.encode(), {**FORM, **forged_sig}, 401),
        ("timestamp abc", valid_body, {**JSON, "X-Slack-Request-Timestamp": "abc", "X-Slack-Signature": "v0=00"}, 401),
        ("400-digit timestamp", valid_body, {**JSON, **sign(valid_body, SIGNING_SECRET, int("9" * 400))}, 401),
        # A well-formed event, message text and Slack's verification token in it, wrongly
        # signed: bolt used to log the whole body at INFO.
        ("event with a forged signature", valid_body, {**JSON, **forged_sig}, 401),
        ("event signed with another secret", valid_body, {**JSON, **sign(valid_body, "another-secret")}, 401),
        ("stale event", valid_body, {**JSON, **sign(valid_body, SIGNING_SECRET, int(time.time()) - 3600)}, 401),
    ]
    for case, body, headers, expected in cases:
        status = await _post_slack(gw, body, headers)
        await _assert_refused(gw, caplog, case, status, expected)


def _mutated(base: dict[str, Any], change) -> dict[str, Any]:
    payload = json.loads(json.dumps(base))
    change(payload)
    return payload


async def test_signed_malformed_slack_bodies_get_400_and_one_warning(slack_gateway, caplog) -> None:
    gw = slack_gateway
    mention = _slack_event()
    file_share = _with_marker(message("x", "U1", "D1", ts="1700000002.000100", channel_type="im"))
    payloads: list[tuple[str, dict[str, Any]]] = [
        ("event is not an object", _mutated(mention, lambda p: p.update(event="not-an-object " + MARKER))),
        ("message without channel", _mutated(mention, lambda p: p["event"].pop("channel"))),
        ("files is not a list", _mutated(file_share, lambda p: p["event"].update(files="nope", subtype="file_share"))),
        ("a file is not an object", _mutated(file_share, lambda p: p["event"].update(files=[MARKER], subtype="file_share"))),
        ("ts is a number", _mutated(mention, lambda p: p["event"].update(ts=1700000001.0001))),
        ("event type is a number", _mutated(mention, lambda p: p["event"].update(type=7))),
        ("authorizations is a string", _mutated(mention, lambda p: p.update(authorizations=MARKER))),
        ("team is a number", _mutated(mention, lambda p: p.update(team=7))),
        # Ids with a NUL: PostgreSQL refuses them at the insert (it was a 500 for every retry).
        ("event_id with a NUL", _mutated(mention, lambda p: p.update(event_id="Ev\x001"))),
        ("team_id with a NUL", _mutated(mention, lambda p: p.update(team_id="T\x001"))),
        ("channel with a NUL", _mutated(mention, lambda p: p["event"].update(channel="C\x001"))),
        ("thread_ts with a NUL", _mutated(mention, lambda p: p["event"].update(thread_ts="17000\x0000001.000100"))),
        ("user with a line break", _mutated(mention, lambda p: p["event"].update(user="U1\nINFO forged"))),
        ("file name with a NUL", _mutated(file_share, lambda p: p["event"].update(
            files=[{"id": "F1", "name": "a\x00.csv"}], subtype="file_share"))),
    ]
    raw: list[tuple[str, bytes, dict[str, str]]] = [(case, encode(p), JSON) for case, p in payloads]
    raw += [
        ("bad JSON", b'{bad "' + MARKER.encode(), JSON),
        ("invalid UTF-8", b'{"text": "\xff' + MARKER.encode() + b'"}', JSON),
        ("JSON array", json.dumps([MARKER]).encode(), JSON),
        ("form with a bad payload", b"payload=%7Bbad" + MARKER.encode(), FORM),
        ("nested a million deep", b"[" * 200_000, JSON),
    ]
    for case, body, headers in raw:
        status = await _post_slack(gw, body, {**headers, **sign(body, SIGNING_SECRET)})
        await _assert_refused(gw, caplog, case, status, 400)


async def test_signed_slack_bodies_that_are_no_json_object_are_named_so_in_the_warning(slack_gateway, caplog) -> None:
    gw = slack_gateway
    cases = [
        (b"[1, 2]", "body is not a JSON object"),
        (b'"just text"', "body is not a JSON object"),
        (b"7", "body is not a JSON object"),
        (b'{"type": "event_callback", "event"', "body is not valid JSON"),
    ]
    for body, reason in cases:
        status = await _post_slack(gw, body, {**JSON, **sign(body, SIGNING_SECRET)})
        warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
        assert (status, warnings) == (400, [f"slack events: rejected with 400: {reason}"]), body
        caplog.clear()


def _buttons(action_id: str, value: str) -> dict[str, Any]:
    """A bot message with one button, as the click's payload quotes it."""
    button = {"type": "button", "action_id": action_id, "value": value, "text": {"type": "plain_text", "text": "x"}}
    return {"ts": "1700000000.000100", "channel": "C1", "blocks": [{"type": "actions", "block_id": "b1", "elements": [button]}]}


async def test_signed_slack_clicks_with_control_characters_get_400_and_one_warning(slack_gateway, caplog) -> None:
    # A NUL in what a click's listener looks up made PostgreSQL refuse the query: a 500 with a
    # traceback. Only Slack (or whoever holds the signing secret) can send these.
    gw = slack_gateway
    comment_view = {"type": "modal", "id": "V1", "callback_id": FEEDBACK_COMMENT_VIEW, "private_metadata": "a\x001"}
    no_view_type = view_submission({**comment_view, "private_metadata": "a1"}, "U1", {"comment": {"comment": MARKER}})
    del no_view_type["view"]["type"]
    actions_not_a_list = block_actions(_buttons(APPROVE_ACTION, "ap1"), APPROVE_ACTION, "U1")
    actions_not_a_list["actions"] = MARKER
    cases = [
        ("approval id with a NUL", block_actions(_buttons(APPROVE_ACTION, "ap\x001"), APPROVE_ACTION, "U1")),
        ("clicking user with a NUL", block_actions(_buttons(APPROVE_ACTION, "ap1"), APPROVE_ACTION, "U\x001")),
        ("answer id with a NUL", block_actions(_buttons(FEEDBACK_ACTION, "down:an\x001"), FEEDBACK_ACTION, "U1")),
        ("modal metadata with a NUL", view_submission(comment_view, "U1", {"comment": {"comment": MARKER}})),
        ("modal without a type", no_view_type),
        ("actions is not a list", actions_not_a_list),
    ]
    for case, payload in cases:
        body, headers = signed_interaction(payload, SIGNING_SECRET)
        status = await _post_slack(gw, body, headers)
        await _assert_refused(gw, caplog, case, status, 400)


async def test_valid_slack_event_is_still_accepted(slack_gateway, caplog) -> None:
    gw = slack_gateway
    body = encode(app_mention("<@UBOT> what is GMV?", "U1", "C1", ts="1700000001.000100"))
    assert await _post_slack(gw, body, {**JSON, **sign(body, SIGNING_SECRET)}) == 200
    # Text may hold anything, a NUL included: it is stored JSON-escaped.
    body = encode(app_mention("<@UBOT> GMV \x00 by region?", "U1", "C1", ts="1700000002.000100"))
    assert await _post_slack(gw, body, {**JSON, **sign(body, SIGNING_SECRET)}) == 200
    assert await gw.stored_events() == 2
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]



async def test_each_slack_delivery_is_logged_once_with_what_became_of_it(slack_gateway, caplog) -> None:
    """The line is written after the 200 is (so Slack's wait does not include it): it must
    still come, once per delivery, by the time the sender has its answer."""
    gw = slack_gateway
    body = encode(app_mention("<@UBOT> GMV?", "U1", "C1", ts="1700000003.000100", event_id="EvLogged"))
    headers = {**JSON, **sign(body, SIGNING_SECRET)}
    assert await _post_slack(gw, body, headers) == 200
    assert await _post_slack(gw, body, {**headers, "X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"}) == 200
    thread = "slack:T1:C1:1700000003.000100"
    assert [r.getMessage() for r in caplog.records if r.name == "adapters.slack.app"] == [
        f"slack event EvLogged accepted (thread {thread})",
        f"slack event EvLogged duplicate (thread {thread})",
    ]

async def test_a_malformed_request_line_gets_400_and_is_counted_as_unmatched(slack_gateway, caplog) -> None:
    gw = slack_gateway
    reader, writer = await asyncio.open_connection(gw.server.host, gw.server.port)
    writer.write(b"GARBAGE \x01\x02 " + MARKER.encode() + b"\r\n\r\n")
    await writer.drain()
    status_line = await reader.readline()
    writer.close()
    assert status_line.startswith(b"HTTP/1.0 400")
    async with gw.http.get(gw.server.make_url("/metrics")) as resp:
        metrics = await resp.text()
    assert 'ba_agent_http_requests_total{method="other",route="unmatched",status="400"}' in metrics
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # no traceback from counting it
    assert MARKER not in caplog.text


# --- Feishu ----------------------------------------------------------------------------------


@pytest.fixture
async def feishu_gateway(database_url, tmp_path, caplog) -> AsyncIterator[Gateway]:
    caplog.set_level(logging.INFO)
    with FakeFeishu() as feishu:
        async with FakeAnthropic() as anthropic:
            settings = feishu_gateway_settings(database_url, tmp_path, anthropic, feishu)
            server = TestServer(create_app(settings))
            await server.start_server(**RUNNER_OPTIONS)
            try:
                async with aiohttp.ClientSession() as http:
                    caplog.clear()
                    yield Gateway(server, http)
            finally:
                await server.close()


async def _post_feishu(gw: Gateway, body: bytes, headers: dict[str, str]) -> int:
    async with gw.http.post(gw.server.make_url("/feishu/events"), data=body, headers=headers) as resp:
        await resp.read()
        return resp.status


async def test_hostile_feishu_requests_get_400_or_401_and_one_warning(feishu_gateway, caplog) -> None:
    gw = feishu_gateway
    mention = text_event(f"@_user_1 {MARKER}", mentions=[bot_mention()])
    signed_body = encrypted_body(mention)
    huge_time = json.loads(json.dumps(mention))
    huge_time["event"]["message"]["create_time"] = "9" * 400
    deep_content = json.loads(json.dumps(mention))
    deep_content["event"]["message"]["content"] = "[" * 200_000
    numeric_key = image_event(MARKER, chat_type="p2p")
    numeric_key["event"]["message"]["content"] = json.dumps({"image_key": 12345})
    challenge_missing = feishu_url_verification("c")
    del challenge_missing["challenge"]
    nul_chat = json.loads(json.dumps(mention))
    nul_chat["event"]["message"]["chat_id"] = "oc_\x001"
    nul_event_id = json.loads(json.dumps(mention))
    nul_event_id["header"]["event_id"] = "ev\x001"

    def signed(payload: dict[str, Any]) -> tuple[bytes, dict[str, str]]:
        body = encrypted_body(payload)
        return body, signed_headers(body)

    cases: list[tuple[str, bytes, dict[str, str], int]] = [
        ("400-digit timestamp, signed", signed_body, signed_headers(signed_body, timestamp=int("9" * 400)), 401),
        ("timestamp abc", signed_body, {**signed_headers(signed_body), "X-Lark-Request-Timestamp": "abc"}, 401),
        ("bad JSON", b'{bad "' + MARKER.encode(), {"Content-Type": "application/json"}, 400),
        ("invalid UTF-8", b'{"encrypt": "\xff' + MARKER.encode() + b'"}', {"Content-Type": "application/json"}, 400),
        ("nested a million deep", b"[" * 200_000, {"Content-Type": "application/json"}, 400),
        ("create_time of 400 digits", *signed(huge_time), 400),
        ("content nested a million deep", *signed(deep_content), 400),
        ("image_key is a number", *signed(numeric_key), 400),
        ("url_verification without a challenge", *signed(challenge_missing), 400),
        # Ids with a NUL: PostgreSQL refuses them at the insert.
        ("chat_id with a NUL", *signed(nul_chat), 400),
        ("event_id with a NUL", *signed(nul_event_id), 400),
        ("card action whose event_id holds a NUL", *signed(card_action({"approval_id": "ap1", "choice": "approve"},
                                                                       event_id="ev\x001")), 400),
        ("card action whose clicking user holds a NUL", *signed(card_action({"approval_id": "ap1", "choice": "approve"},
                                                                            open_id="ou_\x001")), 400),
    ]
    for case, body, headers, expected in cases:
        status = await _post_feishu(gw, body, headers)
        await _assert_refused(gw, caplog, case, status, expected)
