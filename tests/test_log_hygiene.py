"""The log never carries request bodies, and one record is always one line.

slack-bolt resets its loggers' levels to the root logger's when an app is built and logs every
rejected request at INFO with its whole body (the message text, and Slack's legacy verification
token in the payload); and text from a request containing a newline used to start a separate,
genuine-looking line. These tests run the real logging set-up in a child process, as the
service does.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.fakes.slack_events import VERIFICATION_TOKEN, app_mention, encode, sign
from tests.harness import SIGNING_SECRET
from tests.serve_process import clean_env, free_port, start, stop, wait_healthy
from tests.waiting import scaled

MARKER = "BODY-MARKER-51c0"
FORGED = "1999-12-31 23:59:59,000 INFO [ba-agent/production] gateway.service.app: admin granted"


def _run(script: str) -> list[str]:
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=scaled(120), check=True)
    return result.stderr.splitlines()


FORMAT_SCRIPT = f"""
import logging, sys
from gateway.logs import configure_logging

configure_logging("INFO", sys.argv[1] if len(sys.argv) > 1 else "text", "svc", "test")
log = logging.getLogger("hygiene")
forged = {FORGED!r}
log.warning("user wrote %s", "hi\\n" + forged)
log.warning("carriage\\r" + forged + " and escape \\x1b[2J, separator \\u2028" + forged)
log.info("args %r %s", {{"text": "a\\nb"}}, "tab\\tkept")
try:
    raise ValueError("bad value\\n" + forged)
except ValueError:
    log.exception("failed for %s", "x\\n" + forged)
log.warning("last")
"""


def test_text_records_are_one_line_whatever_the_message_holds() -> None:
    lines = _run(FORMAT_SCRIPT)
    assert not [line for line in lines if line.startswith(FORGED[:10])], "\n".join(lines)
    records = [line for line in lines if " [svc/test] hygiene: " in line]
    assert len(records) == 5, "\n".join(lines)
    assert records[0].endswith("user wrote hi\\n" + FORGED)
    assert records[1].endswith(f"carriage\\r{FORGED} and escape \\x1b[2J, separator \\u2028{FORGED}")
    assert records[2].endswith("args {'text': 'a\\nb'} tab\tkept")
    assert records[3].endswith("failed for x\\n" + FORGED)
    # The traceback keeps its lines; the exception's message in it is escaped.
    assert "ValueError: bad value\\n" + FORGED in lines
    assert lines[-1].endswith("hygiene: last")


def test_json_records_are_one_line() -> None:
    result = subprocess.run(
        [sys.executable, "-c", FORMAT_SCRIPT, "json"], capture_output=True, text=True, timeout=scaled(120), check=True
    )
    # splitlines: it also breaks at NEL and the Unicode line separators.
    entries = [json.loads(line) for line in result.stderr.splitlines()]
    messages = [e["message"] for e in entries if e["logger"] == "hygiene"]
    assert len(messages) == 5
    assert messages[0] == "user wrote hi\n" + FORGED
    assert messages[1].endswith("separator \u2028" + FORGED)


BOLT_SCRIPT = """
import asyncio, logging, sys, time
from adapters.slack.platform import SlackPlatform
from gateway.logs import configure_logging

configure_logging("INFO", "text", "svc", "test", SlackPlatform.quiet_loggers)

from slack_bolt.request.async_request import AsyncBoltRequest
from adapters.base import GatewayServices
from adapters.slack.app import SlackAdapter
from adapters.slack.config import SlackConfig

async def main():
    async def accept(msg):
        raise AssertionError("nothing may be accepted")
    async def known(key):
        return False
    # Building the app is what resets bolt's logger levels.
    config = SlackConfig(_env_file=None, bot_token="xoxb-test", signing_secret="s3cret")
    adapter = SlackAdapter(config, GatewayServices(accept=accept, is_live=known))
    body = sys.argv[1]
    ts = str(int(time.time()))
    request = AsyncBoltRequest(body=body, headers={
        "content-type": "application/json",
        "x-slack-request-timestamp": ts,
        "x-slack-signature": "v0=" + "0" * 64,
    })
    # Straight into bolt, past our own checks in SlackAdapter.handle.
    response = await adapter.bolt.async_dispatch(request)
    logging.getLogger("check").warning("bolt answered %s", response.status)
    await adapter.responder.close()

asyncio.run(main())
"""


def test_slack_bolt_does_not_log_rejected_bodies_after_resetting_its_levels() -> None:
    body = encode(app_mention(f"<@UBOT> {MARKER}", "U1", "C1", ts="1700000001.000100")).decode()
    result = subprocess.run(
        [sys.executable, "-c", BOLT_SCRIPT, body], capture_output=True, text=True, timeout=scaled(120), check=True
    )
    assert "check: bolt answered 401" in result.stderr
    assert MARKER not in result.stderr and VERIFICATION_TOKEN not in result.stderr, result.stderr


def test_serve_logs_one_line_without_the_body_for_a_forged_request(tmp_path: Path) -> None:
    port = free_port()
    env = clean_env(
        tmp_path,
        SLACK_BOT_TOKEN="xoxb-test",
        SLACK_SIGNING_SECRET=SIGNING_SECRET,
        BA_WORKER_PROCESSES="0",
        BA_LOG_LEVEL="INFO",
    )
    event = app_mention(f"<@UBOT> {MARKER}\n{FORGED}", "U1", "C1", ts="1700000001.000100")
    body = encode(event)
    cases = [
        # A well-formed event with a signature made with another secret.
        sign(body, "not-the-signing-secret"),
        # A body bolt could not parse, with a newline and a forged line in it.
        {"X-Slack-Request-Timestamp": str(int(time.time())), "X-Slack-Signature": "v0=00"},
    ]
    bodies = [body, f"{{{MARKER}\n{FORGED}".encode()]
    proc = start(env, port, tmp_path)
    statuses = []
    try:
        wait_healthy(port)
        for payload, headers in zip(bodies, cases, strict=True):
            request = urllib.request.Request(
                f"http://127.0.0.1:{port}/slack/events",
                data=payload,
                headers={"Content-Type": "application/json", **headers},
            )
            try:
                with urllib.request.urlopen(request, timeout=scaled(5)) as resp:
                    statuses.append(resp.status)
            except urllib.error.HTTPError as exc:
                statuses.append(exc.code)
        time.sleep(0.3)
    finally:
        out = stop(proc)
    lines = out.splitlines()
    assert statuses == [401, 401]
    assert MARKER not in out and VERIFICATION_TOKEN not in out, out
    assert not [line for line in lines if line.startswith(FORGED[:10])], out
    started = next(i for i, line in enumerate(lines) if "gateway.service.app: platforms:" in line)
    warnings = [line for line in lines[started:] if " WARNING " in line]
    assert len(warnings) == 2 and all("slack events: rejected with 401" in w for w in warnings), out
