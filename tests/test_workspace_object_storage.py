"""Conversation workspaces on S3-compatible object storage (BA_WORKSPACE_URL): two replicas
with data directories of their own answer one conversation, the second finding the file and
the table the first one loaded. The object store is a local S3-compatible server."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_core.workspace.local import use_object_storage
from gateway.config import ConfigError, load_settings
from tests.fakes.anthropic_api import FakeAnthropic, Reply, text, tool_use
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import message
from tests.harness import gateway_settings, running_gateway
from tests.s3_server import new_bucket, s3_server

THREAD = "1700000001.000100"


@pytest.fixture(scope="module")
def s3_endpoint() -> Iterator[str]:
    with s3_server() as endpoint:
        yield endpoint


@pytest.fixture(autouse=True)
def local_workspaces_afterwards() -> Iterator[None]:
    yield
    use_object_storage(None)  # the choice is process-wide: leave the default to other tests


def analyst(request: dict) -> Reply:
    """Counts the rows of the table the upload note names, and says how many there are."""
    messages = request["messages"]
    last = messages[-1]["content"]
    results = [b for b in last if b.get("type") == "tool_result"]
    if results:
        count = re.search(r"\| (\d+) \|", str(results[0]["content"]))
        return Reply([text(f"The table has {count.group(1) if count else 'no'} rows.")])
    notes = " ".join(b.get("text", "") for m in messages if m["role"] == "user" for b in m["content"] if b.get("type") == "text")
    table = re.search(r"loaded as table `([a-z0-9_]+)`", notes)
    assert table is not None, notes
    return Reply([tool_use("sql_query", {"sql": f"SELECT COUNT(*) FROM {table.group(1)}"})])


async def test_a_second_replica_reads_the_upload_and_table_the_first_one_stored(
    database_url: str, tmp_path: Path, s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    client, bucket = new_bucket(s3_endpoint, monkeypatch)
    store = {"BA_WORKSPACE_URL": f"s3://{bucket}/workspaces", "BA_S3_ENDPOINT_URL": s3_endpoint}
    csv = b"region,gmv\n" + b"".join(f"R{i},{i * 10}\n".encode() for i in range(12))
    async with FakeAnthropic() as anthropic, FakeSlack(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        anthropic.respond_with(analyst)
        first = gateway_settings(database_url, tmp_path / "replica-a", anthropic, slack, **store)
        async with running_gateway(first) as gw:
            file = slack.add_file("sales.csv", csv, "text/csv")
            await gw.post_event(message("how many rows?", "U1", "D1", ts=THREAD, channel_type="im", files=[file]))
            await gw.settled(timeout=60)
        second = gateway_settings(database_url, tmp_path / "replica-b", anthropic, slack, **store)
        async with running_gateway(second) as gw:
            follow_up = message("count them again", "U1", "D1", ts="1700000009.000100", channel_type="im")
            await gw.post_event(follow_up)
            await gw.settled(timeout=60)
    answers = [p["markdown_text"] for p in slack.posted(channel="D1") if "markdown_text" in p]
    assert answers == ["The table has 12 rows.", "The table has 12 rows."]
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=bucket)["Contents"]]
    [conversation] = {key.split("/")[1] for key in keys}
    stored = {key.removeprefix(f"workspaces/{conversation}/") for key in keys}
    assert {"uploads/sales.csv", "tables.duckdb"} <= stored  # and the query results' data files
    upload = client.get_object(Bucket=bucket, Key=f"workspaces/{conversation}/uploads/sales.csv")
    assert upload["Body"].read() == csv
    # The second replica's directory holds only its local copies, fetched from the store.
    assert not any((tmp_path / "replica-b").glob("workspaces/*/uploads/*"))


def test_a_workspace_url_that_is_not_s3_stops_start_up(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(_env_file=None, platforms=(), BA_DATA_DIR=str(tmp_path), BA_WORKSPACE_URL="/mnt/shared")
    assert str(raised.value) == "invalid configuration: BA_WORKSPACE_URL: must be s3://bucket[/prefix]"
