"""Running `ba-agent serve` as a real process, for tests of the process contract."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from tests.fakes.slack_events import signed_request
from tests.harness import SIGNING_SECRET
from tests.waiting import Deadline, scaled

BA_AGENT = str(Path(sys.executable).parent / "ba-agent")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("BA_", "SLACK_", "ANTHROPIC_", "DATABASE_URL"))}
    return {**keep, "BA_DATA_DIR": str(tmp_path / "data"), **extra}


def start(env: dict[str, str], port: int, cwd: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [BA_AGENT, "serve", "--port", str(port)],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def wait_healthy(port: int, timeout: float = 20) -> None:
    deadline = Deadline(timeout)
    while not deadline.passed():
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=scaled(1)) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError("service did not become healthy")


def stop(proc: subprocess.Popen) -> str:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        out, _ = proc.communicate(timeout=scaled(10))
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
    return out


def post_event(port: int, payload: dict) -> int:
    body, headers = signed_request(payload, SIGNING_SECRET)
    request = urllib.request.Request(f"http://127.0.0.1:{port}/slack/events", data=body, headers=headers)
    with urllib.request.urlopen(request, timeout=scaled(5)) as resp:
        return resp.status


def get_json(port: int, path: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=scaled(2)) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def wait_workers_ready(port: int, timeout: float = 60) -> dict[str, int]:
    """Wait until /readyz reports every worker process answering; returns that report."""
    deadline = Deadline(timeout)
    while not deadline.passed():
        _, body = get_json(port, "/readyz")
        workers = body.get("workers")
        if workers and workers["ready"] == workers["configured"]:
            return workers
        time.sleep(0.1)
    raise TimeoutError("worker processes did not get ready")


def children(pid: int) -> list[int]:
    """Child process ids of `pid` (Linux /proc)."""
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except FileNotFoundError:
        return []


def alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status  # a zombie has exited


