"""`/metrics` of a replica reports that replica (serve and its worker processes) only, so two
replicas' figures add up; each run's metric files are its own and leave with it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from tests.fakes.anthropic_api import FakeAnthropic
from tests.fakes.slack_api import FakeSlack
from tests.fakes.slack_events import app_mention
from tests.harness import SIGNING_SECRET
from tests.serve_process import (
    children,
    clean_env,
    free_port,
    get_json,
    post_event,
    start,
    stop,
    wait_healthy,
    wait_workers_ready,
)
from tests.waiting import eventually_sync, scaled


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=scaled(5)) as resp:
        return resp.read().decode()


def value(body: str, sample: str, **labels: str) -> float:
    return sum(
        s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
        if s.name == sample and all(s.labels.get(k) == v for k, v in labels.items())
    )


def wait_for(predicate, timeout: float, what: str) -> None:
    eventually_sync(predicate, timeout, what, poll=0.1)  # each poll may scrape a process


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_two_replicas_report_their_own_processes_and_clean_up_their_files(tmp_path: Path) -> None:
    metrics_dir = tmp_path / "data" / "metrics"
    stale = metrics_dir / f"{socket.gethostname()}-{dead_pid()}-abc123"
    stale.mkdir(parents=True)
    (stale / "counter_1.db").write_bytes(b"left by a killed serve")
    with FakeAnthropic.in_thread(api_keys={"the-right-key"}) as anthropic, \
            FakeSlack.in_thread(bot_token="xoxb-test", bot_user_id="UBOT", team_id="T1") as slack:
        env = clean_env(
            tmp_path,
            DATABASE_URL=f"sqlite:///{tmp_path / 'ba.db'}",
            ANTHROPIC_API_KEY="a-wrong-key",
            ANTHROPIC_BASE_URL=anthropic.base_url,
            SLACK_BOT_TOKEN="xoxb-test",
            SLACK_SIGNING_SECRET=SIGNING_SECRET,
            SLACK_API_URL=slack.base_url,
            BA_POLL_INTERVAL="60",  # only a woken worker answers: the one of the replica that accepted
            BA_WORKER_PROCESSES="1",
        )
        ports = free_port(), free_port()
        replicas: list[subprocess.Popen] = []
        try:
            for port in ports:  # one after the other: the first migrates the new database
                replicas.append(start(env, port, tmp_path))
                wait_healthy(port)
                wait_workers_ready(port)
                wait_for(lambda p=port: get_json(p, "/readyz")[1]["model"]["state"] == "rejected", 20, "the model check")
            assert not stale.exists()
            assert len(list(metrics_dir.iterdir())) == 2

            assert post_event(ports[0], app_mention("<@UBOT> orders?", "U1", "C1", ts="1700000001.000100")) == 200
            wait_for(lambda: slack.posted(channel="C1"), 30, "the answer")
            first, second = scrape(ports[0]), scrape(ports[1])
            auth = {"kind": "authentication"}
            # The first replica: its serve's start-up check and its worker's failed turn.
            assert value(first, "ba_agent_model_errors_total", **auth) == 2
            assert value(first, "ba_agent_turn_duration_seconds_count", outcome="model_unavailable") == 1
            assert value(first, "ba_agent_http_requests_total", route="/slack/events") == 1
            # The second: its own check only; nothing of the first's.
            assert value(second, "ba_agent_model_errors_total", **auth) == 1
            assert value(second, "ba_agent_turn_duration_seconds_count") == 0
            assert value(second, "ba_agent_http_requests_total", route="/slack/events") == 0

            [worker] = children(replicas[0].pid)
            os.kill(worker, signal.SIGKILL)
            wait_for(lambda: value(scrape(ports[0]), "ba_agent_worker_restarts_total") == 1, 30, "the restart")
            wait_workers_ready(ports[0])
            # The dead worker's counts stay in its replica's figures.
            assert value(scrape(ports[0]), "ba_agent_turn_duration_seconds_count") == 1
        finally:
            outputs = [stop(proc) for proc in replicas]
    assert all(proc.returncode == 0 for proc in replicas), outputs
    assert list(metrics_dir.iterdir()) == []
