"""Feedback that teaches, end to end on Slack: 👍/👎 under every answer (feedback buttons in a
context_actions block), stored per answer and person (a click toggles, the latest counts), the
optional "what was wrong?" after a 👎, `ba-agent feedback` and /metrics; a 👍 on an answer from
SQL on a data source proposes a verified example that `search_schema` returns only once the
source's data owner approved it (a DM button, or `ba-agent examples review`)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import duckdb
import pytest

from adapters.slack.render import EXAMPLE_APPROVE_ACTION
from tests.fakes.anthropic_api import FakeAnthropic, Reply, text, tool_use
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import (
    app_mention,
    block_actions,
    feedback_click,
    signed_interaction,
    view_submission,
)
from tests.harness import SIGNING_SECRET, Gateway, gateway_settings, running_gateway
from tests.waiting import eventually, scaled

THREAD = "1699999999.000100"
OWNER = "U0OWNER"
SHOP_SQL = "SELECT region, SUM(gmv) AS gmv FROM orders GROUP BY region ORDER BY gmv DESC"


@pytest.fixture
async def fakes():
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        yield anthropic, slack


def shop_source(tmp_path: Path, owner: str) -> dict[str, str]:
    """The settings of a DuckDB data source `shop` whose data owner (in the access policy) is
    `owner` (`platform:user`)."""
    path = tmp_path / "shop.duckdb"
    with duckdb.connect(str(path)) as conn:
        conn.execute("CREATE TABLE orders (region VARCHAR, gmv DOUBLE)")
        conn.execute("INSERT INTO orders VALUES ('East', 120.0), ('West', 80.0)")
    policy = tmp_path / "policy.yml"
    policy.write_text(f"sources:\n  shop:\n    groups: [default]\n    owners: [{owner}]\n")
    return {"BA_DATASOURCES": json.dumps({"shop": f"duckdb:///{path}"}), "BA_ACCESS_POLICY": str(policy)}


@pytest.fixture
def shop(tmp_path: Path) -> dict[str, str]:
    return shop_source(tmp_path, f"slack:{OWNER}")


@pytest.fixture
async def gateway(database_url, tmp_path, fakes, shop):
    anthropic, slack = fakes
    async with running_gateway(gateway_settings(database_url, tmp_path, anthropic, slack, **shop)) as gw:
        yield gw


async def interact(gw: Gateway, payload: dict) -> int:
    body, headers = signed_interaction(payload, SIGNING_SECRET)
    async with gw.http.post(gw.server.make_url("/slack/events"), data=body, headers=headers) as resp:
        await resp.read()
        return resp.status


def feedback_cli(gw: Gateway, database_url: str, tmp_path: Path, *args: str) -> str:
    env = {"DATABASE_URL": database_url, "BA_DATA_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [str(Path(".venv/bin/ba-agent").resolve()), *args],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=scaled(120),
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


async def test_every_answer_carries_feedback_and_a_click_toggles(gateway, fakes, database_url, tmp_path) -> None:
    anthropic, slack = fakes
    anthropic.script(Reply([text("GMV fell 4% last week.")]))
    await gateway.post_event(app_mention("<@UBOT> how was GMV?", "U1", "C1", ts=THREAD))
    await gateway.settled()
    [answer] = slack.posted(channel="C1")
    assert answer["markdown_text"] == "GMV fell 4% last week."
    [buttons] = [b for b in answer["blocks"] if b["type"] == "context_actions"]
    assert buttons["elements"][0]["type"] == "feedback_buttons"

    assert await interact(gateway, feedback_click(answer, True, "U1")) == 200
    assert await interact(gateway, feedback_click(answer, True, "U2")) == 200
    assert await interact(gateway, feedback_click(answer, True, "U2")) == 200  # U2 takes it back
    out = feedback_cli(gateway, database_url, tmp_path, "feedback")
    assert "👍 1  👎 0" in out.splitlines()[0]

    # U1 changes their mind: the latest counts, and a 👎 asks what was wrong (optional).
    assert await interact(gateway, feedback_click(answer, False, "U1")) == 200
    [view] = slack.views
    assert view["blocks"][0]["optional"] is True
    assert await interact(gateway, view_submission(view, "U1", {"comment": {"comment": "It was 6%, not 4%."}})) == 200
    out = feedback_cli(gateway, database_url, tmp_path, "feedback")
    assert out.splitlines()[0] == "👍 0  👎 1"
    assert "what was wrong: slack:U1: It was 6%, not 4%." in out
    async with gateway.http.get(gateway.server.make_url("/metrics")) as resp:
        metrics = await resp.text()
    assert 'ba_agent_answer_feedback{rating="not_helpful"} 1.0' in metrics
    assert 'ba_agent_answer_feedback{rating="helpful"} 0.0' in metrics

    # A typed comment may hold anything: a NUL (which PostgreSQL refuses) and an escape sequence
    # (which would reach the terminal of whoever reads the comments) are left out.
    comment = {"comment": {"comment": "It was 6%,\x00 not 4%.\x1b[2J"}}
    assert await interact(gateway, view_submission(view, "U1", comment)) == 200
    out = feedback_cli(gateway, database_url, tmp_path, "feedback")
    assert "what was wrong: slack:U1: It was 6%, not 4%.[2J" in out
    assert "\x1b" not in out


async def test_thumbs_up_teaches_an_example_once_its_owner_confirms_it(gateway, fakes) -> None:
    anthropic, slack = fakes
    anthropic.script(
        Reply([tool_use("sql_query", {"sql": SHOP_SQL, "source": "shop"}, id="toolu_01")]),
        Reply([text("East leads with 120.")]),
        # A similar question before the owner confirmed: nothing learned yet.
        Reply([tool_use("search_schema", {"question": "which region has the most gmv"}, id="toolu_02")]),
        Reply([text("Let me look.")]),
        # The same after the owner confirmed.
        Reply([tool_use("search_schema", {"question": "which region has the most gmv"}, id="toolu_03")]),
        Reply([text("Using the verified example.")]),
    )
    await gateway.post_event(app_mention("<@UBOT> GMV by region in the shop?", "U1", "C1", ts=THREAD))
    await gateway.settled()
    answer, provenance = slack.posted(channel="C1")
    assert not any(b["type"] == "context_actions" for b in answer.get("blocks", []))
    assert await interact(gateway, feedback_click(provenance, True, "U1")) == 200

    # The data owner is asked in a DM, after the click's acknowledgement.
    await eventually(lambda: bool(slack.posted(channel=OWNER)), 10, "the owner's review request")
    [review] = slack.posted(channel=OWNER)
    assert SHOP_SQL in json.dumps(review["blocks"])

    await gateway.post_event(app_mention("<@UBOT> which region has the most gmv?", "U1", "C1", ts="1699999999.000500"))
    await gateway.settled()
    before = anthropic.requests[3].body["messages"][-1]["content"][0]["content"]
    assert SHOP_SQL not in before

    # A button value naming no possible example changes nothing (and is no server error).
    forged = json.loads(json.dumps(review).replace(f'"value": "{review_id(review)}"', '"value": "99999999999999999999"'))
    assert await interact(gateway, block_actions(forged, EXAMPLE_APPROVE_ACTION, OWNER)) == 200
    assert len(slack.calls_to("chat.update")) == 0
    # Someone who is not an owner cannot confirm it; the owner can.
    assert await interact(gateway, block_actions(review, EXAMPLE_APPROVE_ACTION, "U1")) == 200
    assert await interact(gateway, block_actions(review, EXAMPLE_APPROVE_ACTION, OWNER)) == 200
    assert "Approved by <@U0OWNER>" in slack.posted(channel=OWNER)[0]["text"]

    await gateway.post_event(app_mention("<@UBOT> which region has the most gmv?", "U1", "C1", ts="1699999999.000700"))
    await gateway.settled()
    after = anthropic.requests[5].body["messages"][-1]["content"][0]["content"]
    assert SHOP_SQL in after


def review_id(review: dict) -> str:
    """The proposal id an example review's Approve button carries."""
    [value] = [e["value"] for b in review["blocks"] if b["type"] == "actions" for e in b["elements"]
               if e["action_id"] == EXAMPLE_APPROVE_ACTION]  # fmt: skip
    return str(value)
