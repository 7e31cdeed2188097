"""Data permissions from chat identity, end to end on Slack and Feishu: the real gateway, the real
platform SDKs against the fakes, a protected PostgreSQL table behind a read-only role.

The same question -- GMV by region -- asked by an East-only seller: in a DM it shows East's
numbers and says a filter applied; in a channel without a configured group only what the
``default`` group may see (no rows, and it says so); in a channel configured for ``finance``
every region. And an
approved query's audit record names the approval that let it run.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import psycopg
import pytest
from aiohttp.test_utils import TestServer

from adapters.slack.render import APPROVE_ACTION
from agent_core.governance.approval import ApprovalStatus
from agent_core.governance.audit import read_audit
from gateway.service.app import RUNNER_OPTIONS, create_app
from tests.fakes.anthropic_api import FakeAnthropic, Reply, text, tool_use
from tests.fakes.feishu_api import FakeFeishu
from tests.fakes.feishu_events import bot_mention, encrypted_body, signed_headers, text_event
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention, block_actions, message, signed_interaction
from tests.harness import SIGNING_SECRET, Gateway, feishu_gateway_settings, gateway_settings, running_gateway
from tests.test_sources import PG_URL, _ensure_server, _start_postgres_command

# East: 3 orders of 100.50 (301.50); West: 2 of 40.25 (80.50); North: 1 of 12.34.
ORDERS = [
    (1, "East", "e1@secret.example", 100.5),
    (2, "East", "e2@secret.example", 100.5),
    (3, "East", "e3@secret.example", 100.5),
    (4, "West", "w4@secret.example", 40.25),
    (5, "West", "w5@secret.example", 40.25),
    (6, "North", "n6@secret.example", 12.34),
]
QUESTION_SQL = "SELECT region, SUM(gmv) AS gmv FROM wh_orders GROUP BY region ORDER BY region"
POLICY = """\
groups:
  east_sales: [slack:U01EAST, feishu:ou_east]
  finance: [slack:U02FIN, feishu:ou_fin]
sources:
  dwh:
    groups: [east_sales, finance, default]
    tables:
      wh_orders:
        row_filters:
          east_sales: "region = 'East'"
          finance: "true"
          default: "false"
        hidden_columns: [customer_email]
        column_grants: {finance: [customer_email]}
channels:
  slack:C0FIN: finance
  feishu:oc_fin: finance
"""
REGION_TOTALS = {"East": "301.50", "West": "80.50", "North": "12.34"}


@pytest.fixture(scope="module")
def pg_warehouse() -> Iterator[str]:
    """A schema with the protected `wh_orders` and a role that may only read it; yields its URL."""
    _ensure_server(5432, _start_postgres_command())
    suffix = uuid.uuid4().hex[:8]
    schema, role = f"gov_{suffix}", f"ba_gov_{suffix}"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(
            f"CREATE TABLE {schema}.wh_orders (id int PRIMARY KEY, region text, customer_email text, gmv numeric(12, 2))"
        )
        with conn.cursor() as cur:
            cur.executemany(f"INSERT INTO {schema}.wh_orders VALUES (%s, %s, %s, %s)", ORDERS)
        conn.execute(f"CREATE ROLE {role} LOGIN")
        conn.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        conn.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}")
        conn.execute(f"ALTER ROLE {role} SET search_path = {schema}")
    try:
        yield f"postgresql://{role}@127.0.0.1:5432/test"
    finally:
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {schema} CASCADE")
            conn.execute(f"DROP ROLE {role}")


@pytest.fixture
def governed(pg_warehouse: str, tmp_path: Path) -> dict[str, str]:
    policy = tmp_path / "access.yaml"
    policy.write_text(POLICY)
    return {"BA_DATASOURCES": json.dumps({"dwh": {"url": pg_warehouse}}), "BA_ACCESS_POLICY": str(policy)}


def analyst(request: dict) -> Reply:
    """Plays the model: queries GMV by region, then states each region's total it was given
    and repeats the access-policy note when the result carries one, as the tool asks it to."""
    last = request["messages"][-1]["content"]
    results = [b for b in last if isinstance(b, dict) and b.get("type") == "tool_result"]
    if not results:
        return Reply([tool_use("sql_query", {"source": "dwh", "sql": QUESTION_SQL}, id="toolu_gmv")])
    content = results[0]["content"]
    body = content if isinstance(content, str) else " ".join(b.get("text", "") for b in content)
    totals = [f"{region} {float(amount):.2f}" for region, amount in re.findall(r"(East|West|North)\D+?(\d+(?:\.\d+)?)", body)]
    note = re.search(r"Access policy: [^\n]*", body)
    answer = f"GMV by region: {', '.join(totals) or 'no rows'}."
    return Reply([text(f"{answer} {note.group(0) if note else ''}".strip())])


def regions_in(shown: str) -> set[str]:
    """The regions whose totals the user was shown."""
    return {region for region, total in REGION_TOTALS.items() if f"{region} {total}" in shown}


def assert_as_east_seller_in_a_dm(shown: str) -> None:
    assert regions_in(shown) == {"East"}
    assert "80.50" not in shown and "12.34" not in shown and "@secret" not in shown
    assert "allowed for east_sales only" in shown and "per your access" in shown


def assert_as_an_unconfigured_channel(shown: str) -> None:
    assert regions_in(shown) == set()  # the default group's rows (none here), whoever asks
    assert "301.50" not in shown and "80.50" not in shown and "12.34" not in shown
    assert "no rows of wh_orders are open here" in shown and "everyone here reads the answer" in shown


def assert_as_the_finance_channel(shown: str) -> None:
    assert regions_in(shown) == {"East", "West", "North"}
    assert "Access policy" not in shown


# --- Slack ------------------------------------------------------------------------------------


async def test_slack_an_east_sellers_question_in_a_dm_and_in_channels(governed: dict[str, str], tmp_path: Path) -> None:
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        anthropic.respond_with(analyst)
        settings = gateway_settings(f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, slack, **governed)
        async with running_gateway(settings) as gw:

            async def ask(event: dict[str, Any], channel: str) -> str:
                await gw.post_event(event)
                await gw.settled(timeout=60)
                return json.dumps(slack.posted(channel=channel))  # every post: text, blocks, tables

            question = "what was GMV by region?"
            dm = await ask(message(question, "U01EAST", "D0EAST", ts="1700000100.000100"), "D0EAST")
            general = await ask(app_mention(f"<@UBOT> {question}", "U01EAST", "C0GENERAL", ts="1700000200.000100"), "C0GENERAL")
            finance = await ask(app_mention(f"<@UBOT> {question}", "U01EAST", "C0FIN", ts="1700000300.000100"), "C0FIN")
        assert_as_east_seller_in_a_dm(dm)
        assert_as_an_unconfigured_channel(general)
        assert_as_the_finance_channel(finance)


# --- Feishu -----------------------------------------------------------------------------------


@asynccontextmanager
async def feishu_gateway(settings_extra: dict[str, str], tmp_path: Path) -> AsyncIterator[tuple[Gateway, FakeFeishu]]:
    with FakeFeishu() as feishu:
        async with FakeAnthropic() as anthropic:
            anthropic.respond_with(analyst)
            settings = feishu_gateway_settings(f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, feishu, **settings_extra)
            server = TestServer(create_app(settings))
            await server.start_server(**RUNNER_OPTIONS)
            try:
                async with aiohttp.ClientSession() as http:
                    yield Gateway(server, http), feishu
            finally:
                await server.close()


def shown_since(feishu: FakeFeishu, first: int) -> str:
    """Everything posted from message ``first`` on: message contents and every card state."""
    posted: list[Any] = []
    for sent in feishu.messages[first:]:
        posted.append(sent.content)
        card_id = sent.content.get("data", {}).get("card_id") if sent.msg_type == "interactive" else None
        if isinstance(card_id, str) and card_id in feishu.cards:
            card = feishu.cards[card_id]
            posted += [card.card, card.element_updates, card.updates]
    return json.dumps(posted, ensure_ascii=False)


async def test_feishu_an_east_sellers_question_in_a_p2p_chat_and_in_groups(governed: dict[str, str], tmp_path: Path) -> None:
    async with feishu_gateway(governed, tmp_path) as (gw, feishu):

        async def ask(event: dict[str, Any]) -> str:
            first = len(feishu.messages)
            body = encrypted_body(event)
            async with gw.http.post(gw.server.make_url("/feishu/events"), data=body, headers=signed_headers(body)) as resp:
                assert resp.status == 200
            await gw.settled(timeout=60)
            return shown_since(feishu, first)

        question = "what was GMV by region?"
        in_group: Callable[[str], dict[str, Any]] = lambda chat: text_event(  # noqa: E731
            f"@_user_1 {question}", mentions=[bot_mention()], chat_id=chat, sender_open_id="ou_east"
        )
        dm = await ask(text_event(question, chat_type="p2p", chat_id="oc_p2p_east", sender_open_id="ou_east"))
        general = await ask(in_group("oc_general"))
        finance = await ask(in_group("oc_fin"))
    assert_as_east_seller_in_a_dm(dm)
    assert_as_an_unconfigured_channel(general)
    assert_as_the_finance_channel(finance)


# --- the approval behind a query, in its audit record ----------------------------------------


async def test_an_approved_querys_audit_record_names_the_approval(pg_warehouse: str, tmp_path: Path) -> None:
    policy = tmp_path / "access.yaml"
    gated = "    groups: [east_sales, finance, default]\n    require_approval: true\n"
    policy.write_text(POLICY.replace("    groups: [east_sales, finance, default]\n", gated))
    extra = {"BA_DATASOURCES": json.dumps({"dwh": {"url": pg_warehouse}}), "BA_ACCESS_POLICY": str(policy)}
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        anthropic.respond_with(analyst)
        settings = gateway_settings(f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, slack, **extra)
        async with running_gateway(settings) as gw:
            await gw.post_event(app_mention("<@UBOT> GMV by region?", "U02FIN", "C0FIN", ts="1700000400.000100"))
            await gw.settled(timeout=60)
            [request] = [p for p in slack.posted(channel="C0FIN") if "*Approval needed*" in json.dumps(p.get("blocks", []))]
            body, headers = signed_interaction(block_actions(request, APPROVE_ACTION, "U02FIN"), SIGNING_SECRET)
            async with gw.http.post(gw.server.make_url("/slack/events"), data=body, headers=headers) as resp:
                assert resp.status == 200
            await gw.settled(timeout=60)
            [record] = await read_audit(gw.runtime.sessions)
            approval = await gw.runtime.approvals.get(record.approval_id or "")
        assert regions_in(json.dumps(slack.posted(channel="C0FIN"))) == {"East", "West", "North"}
        assert approval is not None and approval.status is ApprovalStatus.APPROVED
        assert approval.thread_id == record.thread_id and approval.decided_by == "U02FIN"
        assert (record.user_id, record.tool_call_id) == ("U02FIN", "toolu_gmv")
