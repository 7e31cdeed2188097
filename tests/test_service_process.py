"""`ba-agent serve` as a real process: start-up contract, and crash recovery with kill -9."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests.fakes.anthropic_api import FakeAnthropic, Reply, text
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention
from tests.harness import SIGNING_SECRET
from tests.serve_process import (
    BA_AGENT,
    clean_env,
    free_port,
    post_event,
    start,
    stop,
    wait_healthy,
    wait_workers_ready,
)
from tests.waiting import scaled


def test_serve_starts_with_no_configuration(tmp_path: Path) -> None:
    port = free_port()
    proc = start(clean_env(tmp_path), port, tmp_path)
    try:
        wait_healthy(port)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=scaled(2)) as resp:
            assert resp.status == 200
    finally:
        out = stop(proc)
    assert "missing: ANTHROPIC_API_KEY, SLACK_BOT_TOKEN, SLACK_SIGNING_SECRET" in out
    assert (tmp_path / "data" / "ba_agent.db").exists()


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("BA_PORT", "eighty"),
        ("SLACK_API_URL", "https://slack.com/"),
        ("FEISHU_MODE", "socket"),
        ("DATABASE_URL", "mysql://x@y/z"),
        ("BA_DATASOURCES", "{not json"),
        ("BA_DATASOURCES", '{"dwh": "oracle://ro@db/dwh"}'),
        ("BA_DATASOURCES", '{"dwh": {"url": "postgresql://ro@db/dwh", "row_cap": -1}}'),
    ],
)
def test_invalid_configuration_fails_fast_naming_the_variable(tmp_path: Path, variable: str, value: str) -> None:
    env = clean_env(tmp_path, **{variable: value})
    result = subprocess.run([BA_AGENT, "serve"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=scaled(30))
    assert result.returncode == 2
    assert variable in result.stderr and "Traceback" not in result.stderr
    if "dwh" in value:
        assert "'dwh'" in result.stderr  # the message names the source


def test_a_source_whose_role_can_write_stops_serve_unless_overridden(tmp_path: Path) -> None:
    superuser = "postgresql://postgres@127.0.0.1:5432/test"  # the local cluster's superuser
    env = clean_env(tmp_path, BA_DATASOURCES=json.dumps({"dwh": superuser}))
    refused = subprocess.run([BA_AGENT, "serve"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=scaled(60))
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    assert "BA_DATASOURCES" in refused.stderr and "'dwh'" in refused.stderr and "superuser" in refused.stderr
    assert "GRANT SELECT" in refused.stderr  # says how to make a read-only role

    port = free_port()
    allowed = json.dumps({"dwh": {"url": superuser, "allow_privileged": True}})
    proc = start(clean_env(tmp_path, BA_DATASOURCES=allowed), port, tmp_path)
    try:
        wait_healthy(port)
    finally:
        out = stop(proc)
    assert any("WARNING" in line and "dwh" in line for line in out.splitlines()), out


def test_secrets_are_not_logged(tmp_path: Path) -> None:
    port = free_port()
    env = clean_env(tmp_path, ANTHROPIC_API_KEY="anthropic-secret-value", SLACK_BOT_TOKEN="slack-bot-secret-token",
                    SLACK_SIGNING_SECRET="signing-secret-value", BA_LOG_LEVEL="DEBUG")
    proc = start(env, port, tmp_path)
    try:
        wait_healthy(port)
    finally:
        out = stop(proc)
    for secret in ("anthropic-secret-value", "slack-bot-secret-token", "signing-secret-value"):
        assert secret not in out


def test_event_accepted_then_process_killed_is_answered_once_after_restart(database_url: str, tmp_path: Path) -> None:
    slack_fake = FakeSlack.in_thread(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1")
    with FakeAnthropic.in_thread() as anthropic, slack_fake as slack:
        # The first model call streams slowly: the process is killed in the middle of it.
        anthropic.script(
            Reply([text("This answer never arrives because the process dies " * 5)], event_delay=0.5),
            Reply([text("Answered after the restart.")]),
        )
        env = clean_env(
            tmp_path,
            DATABASE_URL=database_url,
            ANTHROPIC_API_KEY="test-key",
            ANTHROPIC_BASE_URL=anthropic.base_url,
            SLACK_BOT_TOKEN="xoxb-test",
            SLACK_SIGNING_SECRET=SIGNING_SECRET,
            SLACK_API_URL=slack.base_url,
            BA_LEASE_SECONDS="2",
            BA_POLL_INTERVAL="0.2",
        )
        port = free_port()
        first = start(env, port, tmp_path)
        try:
            wait_healthy(port)
            wait_workers_ready(port)
            assert post_event(port, app_mention("<@UBOT> GMV?", "U1", "C1", ts="1700000001.000100")) == 200
            anthropic.wait_for_requests_sync(1, timeout=15)
        finally:
            first.kill()  # SIGKILL: no cleanup, the lease is left behind
            first.communicate()
        assert slack.posted(channel="C1") == []

        second = start(env, port, tmp_path)
        try:
            slack.wait_for_sync("chat.stopStream", count=1, timeout=30)  # the answer streams
            time.sleep(1.0)  # anything duplicated would show up by now
        finally:
            stop(second)
        posts = slack.posted(channel="C1")
        assert [p["markdown_text"] for p in posts] == ["Answered after the restart."]
        assert posts[0]["thread_ts"] == "1700000001.000100"
        assert len(anthropic.requests) == 2


def test_tool_run_prints_the_raw_result_as_json(tmp_path: Path) -> None:
    sql = "SELECT region, SUM(gmv) AS gmv FROM demo.sales GROUP BY 1 ORDER BY 2 DESC LIMIT 1"
    result = subprocess.run(
        [BA_AGENT, "tool", "run", "sql_query", "--json", json.dumps({"sql": sql})],
        env=clean_env(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=scaled(60),
    )
    assert result.returncode == 0, result.stderr
    raw = json.loads(result.stdout)
    assert raw["columns"] == ["region", "gmv"] and raw["rows"][0][0] == "East China"
    refused = subprocess.run(
        [BA_AGENT, "tool", "run", "sql_query", "--json", '{"sql": "DROP TABLE demo.sales"}'],
        env=clean_env(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=scaled(60),
    )
    assert refused.returncode == 1 and json.loads(refused.stdout)["error"]["type"] == "permission_denied"


def test_tool_run_output_survives_its_quick_exit(tmp_path: Path) -> None:
    """`tool run` leaves without the interpreter's teardown: what it printed still arrives
    whole through a pipe (small or a thousand rows), with the exit code of the outcome."""
    buffered = {k: v for k, v in clean_env(tmp_path).items() if k != "PYTHONUNBUFFERED"}  # as in a shell pipe

    def tool_run(tool_input: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [BA_AGENT, "tool", "run", "sql_query", "--json", tool_input],
            env=buffered, cwd=tmp_path, capture_output=True, text=True, timeout=scaled(60),
        )  # fmt: skip

    small = tool_run('{"sql": "SELECT count(*) AS n FROM demo.sales"}')
    assert small.returncode == 0 and small.stdout.endswith("}\n"), small.stderr
    assert json.loads(small.stdout)["rows"] == [[13800]]
    large = tool_run(json.dumps({"sql": "SELECT * FROM demo.sales ORDER BY ALL", "max_rows": 1000}))
    assert large.returncode == 0 and large.stdout.endswith("}\n"), large.stderr
    assert json.loads(large.stdout)["row_count"] == 1000
    refused = tool_run('{"sql": "DELETE FROM demo.sales"}')
    assert refused.returncode == 1 and json.loads(refused.stdout)["error"]["type"] == "permission_denied"
    bad_input = tool_run('{"sql": 1}')
    assert bad_input.returncode == 2 and "invalid input for sql_query" in bad_input.stderr


def test_tool_run_reads_no_chat_platform_settings(tmp_path: Path) -> None:
    """A command that answers no chat does not stop on a chat platform's setting."""
    env = {**clean_env(tmp_path), "SLACK_MODE": "carrier-pigeon"}
    ran = subprocess.run(
        [BA_AGENT, "tool", "run", "sql_query", "--json", '{"sql": "SELECT count(*) FROM demo.sales"}'],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=scaled(60),
    )  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["rows"] == [[13800]]
    serve = subprocess.run(
        [BA_AGENT, "serve", "--port", "1"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=scaled(60)
    )
    assert serve.returncode == 2 and "SLACK_MODE" in serve.stderr


def test_tool_runner_loads_no_platform_sdk_and_no_heavy_stack() -> None:
    """`tool run` starts fast: no platform SDK, no model client, no plotting or statistics stack
    until a tool that needs one runs."""
    heavy = ("slack_bolt", "slack_sdk", "lark_oapi", "anthropic", "matplotlib", "scipy", "statsmodels", "pandas")
    code = f"import sys, gateway.cli.tool_run; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    root = Path(__file__).parent.parent
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=scaled(60), cwd=root)
    assert result.stdout.strip() == "[]", result.stderr


def test_json_logs_are_one_tagged_object_per_line(tmp_path: Path) -> None:
    port = free_port()
    proc = start(clean_env(tmp_path, BA_LOG_FORMAT="json", BA_ENVIRONMENT="staging"), port, tmp_path)
    try:
        wait_healthy(port)
    finally:
        out = stop(proc)
    entries = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert any("missing:" in e["message"] for e in entries)
    assert all(e["environment"] == "staging" and e["service"] == "ba-agent-gateway" for e in entries)
