"""An approval click arriving over Slack Socket Mode: the real gateway with SLACK_MODE=socket, its
events and the Approve click (an ``interactive`` envelope) delivered over FakeSlack's websocket.
The paused turn resumes once, however often the click comes."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from adapters.slack.render import APPROVE_ACTION, REJECT_ACTION
from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention, block_actions
from tests.harness import gateway_settings, running_gateway
from tests.test_approval_slack import ASKER, CHANNEL, analyst, answers, approval_post, buttons, settings_extra

__all__ = ["settings_extra"]  # the warehouse and policy fixture, shared with the HTTP tests


async def test_an_approve_click_over_the_socket_resumes_the_turn_once(settings_extra: dict[str, Any], tmp_path: Path) -> None:
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        anthropic.respond_with(analyst)
        settings = gateway_settings(
            f"sqlite:///{tmp_path / 'gw.db'}", tmp_path, anthropic, slack,
            SLACK_MODE="socket", SLACK_APP_TOKEN=slack.app_token, **settings_extra,
        )  # fmt: skip
        async with running_gateway(settings) as gw:
            question = await slack.socket_send_event(app_mention("<@UBOT> East total?", ASKER, CHANNEL, ts="1700000100.000100"))
            await slack.wait_for_ack(question)
            await gw.settled(timeout=30)
            post = approval_post(slack)
            assert answers(slack) == [] and buttons(post) == [APPROVE_ACTION, REJECT_ACTION]

            clicks = [await slack.socket_send_interaction(block_actions(post, APPROVE_ACTION, ASKER)) for _ in range(2)]
            for envelope in clicks:  # each acknowledged (after the first was committed)
                await slack.wait_for_ack(envelope)
            await gw.settled(timeout=30)
            await asyncio.sleep(0.3)  # a second resume, if there were one, would post by now
            assert answers(slack) == ["East total is 301.5."]
            assert buttons(approval_post(slack)) == []
            assert "already decided" in slack.ephemerals[-1]["text"]  # the second click
            assert len(anthropic.requests) == 2  # asked once before the pause, once after
