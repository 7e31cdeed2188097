"""Start-up cost of the commands people run, beside a floor measured in the same run.

    .venv/bin/python bench/startup.py [--runs 10]

Prints the median (and min–max) wall time of:
- the floor: `python -c "import duckdb, pydantic"` (what any data command must load anyway);
- `ba-agent tool run sql_query` on the demo data and `ba-agent tool run list_tables`;
- `ba-agent skills list` (bundled skills and their load errors);
- `ba-agent serve`: from spawn to `/readyz` answering 200, and to its worker process ready;
and the idle resident memory (RSS) of serve and of its worker.
A command's ratio to the floor is the median of each run's ratio to the floor measured just before
it: on a machine whose speed drifts by half within a minute (a shared virtual machine), pairs
measured together keep the drift out of the ratio.
Targets (issues #12/#15/#30): tool run ≤ 3× the floor; skills list ≤ 1 s; serve ready ≤ 3 s; serve idle
RSS ≤ 120 MB.
Each run uses a fresh data directory, so the demo database is built as a new user's first
command builds it (the runs after the first of each command find it there). The checkout's
modules are byte-compiled first, as a first run caches them (and `pip install` does for the
wheel): where PYTHONDONTWRITEBYTECODE is set, every command would otherwise compile them again.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

BIN = Path(sys.executable).parent
BA_AGENT = str(BIN / "ba-agent")


def clean_env(data_dir: Path) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("BA_", "SLACK_", "FEISHU_", "ANTHROPIC_", "DATABASE_URL"))}
    return {**keep, "BA_DATA_DIR": str(data_dir)}


def timed(cmd: list[str], env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, env=env, cwd=cwd, check=True, capture_output=True, timeout=120)
    return time.perf_counter() - started


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def readyz(port: int) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as resp:
            return json.loads(resp.read())
    except (OSError, urllib.error.HTTPError):
        return None


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def serve_once(env: dict[str, str], cwd: Path) -> tuple[float, float, float, float]:
    """Seconds to /readyz 200 and to the worker ready; idle RSS (MB) of serve and its worker."""
    port = free_port()
    started = time.perf_counter()
    proc = subprocess.Popen([BA_AGENT, "serve", "--port", str(port)], env=env, cwd=cwd,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        ready_s = workers_s = float("nan")
        while time.perf_counter() - started < 60:
            body = readyz(port)
            if body is not None and ready_s != ready_s:
                ready_s = time.perf_counter() - started
            if body is not None and body.get("workers", {}).get("ready") == body.get("workers", {}).get("configured"):
                workers_s = time.perf_counter() - started
                break
            time.sleep(0.02)
        time.sleep(2.0)  # idle: start-up garbage collected, connections settled
        serve_rss = rss_mb(proc.pid)
        worker_rss = sum(rss_mb(child) for child in children(proc.pid))
        return ready_s, workers_s, serve_rss, worker_rss
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def summary(values: list[float], unit: str = "s") -> str:
    fmt = "{:.2f}" if unit == "s" else "{:.0f}"
    return f"{fmt.format(statistics.median(values))} {unit} (min {fmt.format(min(values))}, max {fmt.format(max(values))})"


def ratio(times: list[float], floor: list[float]) -> str:
    """The median of the runs' ratios to their own floor, with their min–max."""
    ratios = [t / f for t, f in zip(times, floor, strict=True)]
    return f"{statistics.median(ratios):.1f}x ({min(ratios):.1f}-{max(ratios):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    root = Path(__file__).resolve().parent.parent
    packages = [str(root / name) for name in ("agent_core", "gateway", "adapters", "skills")]
    subprocess.run([sys.executable, "-m", "compileall", "-q", *packages], check=True, capture_output=True)
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        env = clean_env(cwd / "data")
        sql = json.dumps({"sql": "SELECT region, SUM(gmv) FROM demo.sales GROUP BY 1"})
        subprocess.run([BA_AGENT, "db", "upgrade"], env=env, cwd=cwd, check=True, capture_output=True)
        floor, sql_query, list_tables, skills, ready, workers, serve_rss, worker_rss = ([] for _ in range(8))
        for _ in range(args.runs):  # interleaved, so machine load shifts affect all alike
            floor.append(timed([sys.executable, "-c", "import duckdb, pydantic"], env, cwd))
            sql_query.append(timed([BA_AGENT, "tool", "run", "sql_query", "--json", sql], env, cwd))
            list_tables.append(timed([BA_AGENT, "tool", "run", "list_tables"], env, cwd))
            skills.append(timed([BA_AGENT, "skills", "list"], env, cwd))
            r, w, srss, wrss = serve_once(env, cwd)
            ready.append(r)
            workers.append(w)
            serve_rss.append(srss)
            worker_rss.append(wrss)
    print(f"runs: {args.runs}")
    print(f"floor  python -c 'import duckdb, pydantic'   {summary(floor)}")
    print(
        f"tool run sql_query                          {summary(sql_query)}  "
        f"= {ratio(sql_query, floor)} floor (target <= 3x)"
    )
    print(
        f"tool run list_tables                        {summary(list_tables)}  "
        f"= {ratio(list_tables, floor)} floor"
    )
    print(f"skills list                                 {summary(skills)}  (target <= 1 s)")
    print(f"serve: /readyz 200 after                    {summary(ready)}  (target <= 3 s)")
    print(f"serve: worker ready after                   {summary(workers)}")
    print(f"idle RSS serve                              {summary(serve_rss, 'MB')}  (target <= 120 MB)")
    print(f"idle RSS worker                             {summary(worker_rss, 'MB')}")


if __name__ == "__main__":
    main()
