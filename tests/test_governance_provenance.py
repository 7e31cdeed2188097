"""When the access policy shaped an answer (a row filter applied, columns hidden), the provenance
line the bot posts under it says so, in the asker's language, even when the model does not
repeat the tool's note. Through the real gateway and the Slack SDK against the fake."""

from __future__ import annotations

import json
from pathlib import Path

from agent_core.i18n import Language, t
from tests.fakes.anthropic_api import FakeAnthropic, Reply, text, tool_use
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention, message
from tests.harness import gateway_settings, running_gateway
from tests.policies import sales_policy
from tests.test_semantic import build_duckdb

POLICY = sales_policy(channels={"slack:C0FIN": "finance"})
SHAPED = "Limited by the access policy to what may be shown here"


def silent_analyst(request: dict) -> Reply:
    """Plays a model that queries, then answers without passing on the access-policy note."""
    last = request["messages"][-1]["content"]
    if not any(isinstance(b, dict) and b.get("type") == "tool_result" for b in last):
        sql = "SELECT region, count(*) AS n FROM orders GROUP BY region ORDER BY region"
        return Reply([tool_use("sql_query", {"source": "dwh", "sql": sql}, id="toolu_regions")])
    return Reply([text("Here are the orders by region.")])


async def test_the_posted_provenance_line_says_when_the_policy_shaped_the_answer(tmp_path: Path) -> None:
    warehouse = tmp_path / "dwh.duckdb"
    build_duckdb(warehouse)
    (tmp_path / "access.yaml").write_text(POLICY)
    governed = {
        "BA_DATASOURCES": json.dumps({"dwh": f"duckdb://{warehouse}"}),
        "BA_ACCESS_POLICY": str(tmp_path / "access.yaml"),
    }
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        anthropic.respond_with(silent_analyst)
        settings = gateway_settings(f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, slack, **governed)
        async with running_gateway(settings) as gw:

            async def ask(event: dict, channel: str) -> str:
                await gw.post_event(event)
                await gw.settled(timeout=60)
                return json.dumps(slack.posted(channel=channel), ensure_ascii=False)

            english = await ask(message("how many orders per region?", "U01EAST", "D0EAST", ts="1700000100.000100"), "D0EAST")
            chinese = await ask(message("各地区有多少订单？", "U01EAST", "D0EASTZH", ts="1700000200.000100"), "D0EASTZH")
            finance = await ask(
                app_mention("<@UBOT> how many orders per region?", "U01EAST", "C0FIN", ts="1700000300.000100"), "C0FIN"
            )
    assert SHAPED in english
    assert t(Language.ZH_HANS, SHAPED) in chinese and t(Language.ZH_HANS, SHAPED) != SHAPED
    assert SHAPED not in chinese
    # The finance channel reads every row: nothing was withheld, and the line does not claim so.
    assert "Source: dwh (orders)" in finance and SHAPED not in finance
