"""The product as shipped: the wheel, installed non-editable into its own virtualenv, runs every
command the README documents from a directory that is not the checkout.

The wheel is built once per session from this checkout. Its dependencies come from the test
virtualenv through a `.pth` path entry (site-packages of the test venv is added as a plain path,
so its editable-install hooks, which would point back at the checkout, never run): what is
tested is our code exactly as the wheel ships it, without downloading the dependencies again.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import site
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.fakes.anthropic_api import FakeAnthropic, Reply, text, tool_use
from tests.serve_process import free_port, get_json, wait_healthy, wait_workers_ready
from tests.waiting import Deadline, scaled

ROOT = Path(__file__).resolve().parent.parent
BUNDLED_SKILLS = ("anomaly-detection", "attribution", "governed-metrics", "report-generation", "visualization")


@dataclass
class Installed:
    venv: Path
    home: Path  # a working directory outside the checkout

    @property
    def ba_agent(self) -> str:
        return str(self.venv / "bin" / "ba-agent")

    @property
    def python(self) -> str:
        return str(self.venv / "bin" / "python")

    def env(self, **extra: str) -> dict[str, str]:
        keep = {
            k: v for k, v in os.environ.items()
            if not k.startswith(("BA_", "SLACK_", "FEISHU_", "ANTHROPIC_", "DATABASE_URL", "PYTHON"))
        }  # fmt: skip
        return {**keep, "BA_DATA_DIR": str(self.home / "data"), **extra}

    def run(self, *args: str, stdin: str | None = None, timeout: float = 60, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [self.ba_agent, *args], cwd=self.home, env=self.env(**env), input=stdin,
            capture_output=True, text=True, timeout=scaled(timeout),
        )  # fmt: skip


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Installed]:
    base = tmp_path_factory.mktemp("release")
    # Built from a copy: setuptools writes build/ beside the sources, and a stale build/ must
    # not leak into the wheel (nor the build into the checkout).
    source = base / "source"
    shutil.copytree(ROOT, source, ignore=_not_shipped)
    dist = base / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-build-isolation",
         "--wheel-dir", str(dist), str(source)],
        check=True, cwd=base, timeout=scaled(300),
    )  # fmt: skip
    [wheel] = dist.glob("ba_agent_gateway-*.whl")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=scaled(120))
    target = Path(
        subprocess.check_output(
            [str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], text=True
        ).strip()
    )
    (target / "test-dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile",
         "--target", str(target), str(wheel)],
        check=True, timeout=scaled(300),
    )  # fmt: skip
    _console_script(venv)
    home = base / "home"
    home.mkdir()
    yield Installed(venv, home)


def _not_shipped(folder: str, names: list[str]) -> set[str]:
    """What the wheel build needs no copy of: the checkout's own state, tests and benches."""
    caches = {n for n in names if n in ("__pycache__", ".pytest_cache", ".hypothesis") or n.endswith(".egg-info")}
    if Path(folder) == ROOT:
        caches |= {".git", ".venv", "build", "data", "tests", "bench"} & set(names)
    return caches


def _console_script(venv: Path) -> None:
    """`pip install --target` installs no entry points: write the one the wheel declares."""
    script = venv / "bin" / "ba-agent"
    script.write_text(f"#!{venv / 'bin' / 'python'}\nimport sys\nfrom gateway.cli.main import main\nsys.exit(main())\n")
    script.chmod(0o755)


def test_the_installed_code_is_the_wheel_not_the_checkout(installed: Installed) -> None:
    code = "import gateway, agent_core, adapters, skills; print(gateway.__file__, skills.__file__)"
    out = subprocess.run([installed.python, "-c", code], cwd=installed.home, env=installed.env(),
                         capture_output=True, text=True, check=True).stdout
    assert str(installed.venv) in out and str(ROOT) not in out


def test_skills_list_shows_the_bundled_skills(installed: Installed) -> None:
    result = installed.run("skills", "list")
    assert result.returncode == 0, result.stderr + result.stdout
    for name in BUNDLED_SKILLS:
        assert any(line.startswith(name) for line in result.stdout.splitlines()), result.stdout
    assert "ERROR" not in result.stdout


def test_db_upgrade_stats_and_threads(installed: Installed) -> None:
    upgraded = installed.run("db", "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    assert upgraded.stdout.startswith("database upgraded to revision ")
    stats = installed.run("stats")
    assert stats.returncode == 0 and stats.stdout.startswith("Calls (all conversations)"), stats.stderr
    threads = installed.run("threads")
    assert threads.returncode == 0 and threads.stdout.startswith("thread id"), threads.stderr
    unknown = installed.run("stats", "--thread", "no-such-thread")
    assert unknown.returncode == 1 and "Traceback" not in unknown.stderr
    assert "no conversation with id 'no-such-thread'" in unknown.stderr


def test_tool_run_queries_the_demo_data(installed: Installed) -> None:
    sql = "SELECT region, SUM(gmv) AS gmv FROM demo.sales GROUP BY 1 ORDER BY 2 DESC LIMIT 1"
    result = installed.run("tool", "run", "sql_query", "--json", json.dumps({"sql": sql}))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["rows"][0][0] == "East China"


def test_search_schema_is_listed_and_finds_tables_that_join(installed: Installed) -> None:
    import duckdb

    warehouse = installed.home / "shop.duckdb"
    with duckdb.connect(str(warehouse)) as conn:
        conn.execute("CREATE OR REPLACE TABLE customers AS SELECT range AS customer_id, 'n' || range AS name FROM range(5)")
        conn.execute("CREATE OR REPLACE TABLE orders AS SELECT range AS order_id, range % 5 AS customer_id FROM range(20)")
    sources = json.dumps({"shop": f"duckdb://{warehouse}"})
    listed = installed.run("tool", "list", BA_DATASOURCES=sources)
    assert listed.returncode == 0 and "search_schema" in listed.stdout.split(), listed.stderr
    assert "search_schema" not in installed.run("tool", "list").stdout.split()  # no sources, nothing to search
    question = json.dumps({"question": "orders by customer name"})
    found = installed.run("tool", "run", "search_schema", "--json", question, BA_DATASOURCES=sources)
    assert found.returncode == 0, found.stderr
    tables = {t["name"]: t for t in json.loads(found.stdout)["tables"]}
    assert {"main.orders", "main.customers"} <= set(tables)
    assert any(j["on"] == "main.orders.customer_id = main.customers.customer_id" for j in tables["main.orders"]["joins"])


def test_a_query_on_a_data_source_shows_in_the_audit(installed: Installed) -> None:
    import duckdb

    warehouse = installed.home / "audit-dwh.duckdb"
    with duckdb.connect(str(warehouse)) as conn:
        conn.execute("CREATE OR REPLACE TABLE orders AS SELECT range AS id FROM range(12)")
    sources = json.dumps({"auditdwh": f"duckdb://{warehouse}"})
    query = json.dumps({"source": "auditdwh", "sql": "SELECT count(*) AS n FROM orders"})
    ran = installed.run("tool", "run", "sql_query", "--json", query, "--platform", "slack", "--user", "U7",
                        BA_DATASOURCES=sources)  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    audit = installed.run("audit", "--source", "auditdwh", "--since", "1h")
    assert audit.returncode == 0, audit.stderr
    head, sql = audit.stdout.splitlines()[-2:]
    assert "slack:U7  auditdwh  sql_query  1 rows" in head
    assert "orders" in sql and "count" in sql.lower()


def test_metrics_list_and_query_on_the_bundled_demo_model(installed: Installed) -> None:
    listed = installed.run("metrics", "list")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert any(line.split()[:2] == ["gmv", "simple"] and "Gross merchandise value" in line for line in lines)
    assert any(line.split()[:2] == ["aov", "ratio"] for line in lines), listed.stdout
    queried = installed.run("metrics", "query", "--metrics", "gmv", "--group-by", "region", "--grain", "week",
                            "--start", "2026-10-05", "--end", "2026-10-11")  # fmt: skip
    assert queried.returncode == 0, queried.stderr
    header, _, *rows = queried.stdout.splitlines()
    assert header.split() == ["region", "metric_time__week", "gmv"]
    # The demo data's week of 2026-10-05 in East China, summed from demo.sales directly.
    assert "East China     2026-10-05         2,876,993.49" in rows, queried.stdout
    assert len(rows) == 5


def test_monitors_list_and_a_dry_run_of_the_operators_monitor(installed: Installed) -> None:
    monitors = installed.home / "monitors.yml"
    monitors.write_text("monitors:\n  - name: gmv-by-region\n    metric: gmv\n    dimensions: [region, channel]\n"
                        "    cron: '0 9 * * *'\n    timezone: Asia/Shanghai\n    platform: slack\n    workspace: T1\n"
                        "    channel: C0SALES\n    creator: U0OPS\n")  # fmt: skip
    listed = installed.run("monitors", "list", BA_MONITORS_FILE=str(monitors))
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("gmv-by-region  gmv by region,channel  daily  '0 9 * * *' Asia/Shanghai  slack:C0SALES")
    ran = installed.run("monitors", "run", "gmv-by-region", "--at", "2026-10-21T09:00+08:00", "--dry-run",
                        BA_MONITORS_FILE=str(monitors))  # fmt: skip
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("gmv-by-region: 2026-10-20 is anomalous; would post an alert:"), ran.stdout
    assert "region=East China & channel=app" in ran.stdout


def test_catalog_refresh_and_search_over_a_duckdb_source(installed: Installed) -> None:
    import duckdb

    archive = installed.home / "archive.duckdb"
    with duckdb.connect(str(archive)) as conn:
        conn.execute("CREATE TABLE refunds (category VARCHAR, amount DECIMAL(10, 2))")
        conn.execute("COMMENT ON TABLE refunds IS '退货退款记录'")
        conn.execute("INSERT INTO refunds VALUES ('服装', 9.9), ('家电', 99), ('服装', 19.9)")
        conn.execute("CREATE TABLE web_sessions (device VARCHAR, started_at TIMESTAMP)")
    examples = installed.home / "examples.yml"
    examples.write_text("examples:\n  - question: 各类别退货金额\n    source: archive\n"
                        "    sql: SELECT category, SUM(amount) FROM refunds GROUP BY 1\n")  # fmt: skip
    env = {"BA_DATASOURCES": json.dumps({"archive": f"duckdb:///{archive}"}), "BA_EXAMPLES_FILE": str(examples)}
    refreshed = installed.run("catalog", "refresh", **env)
    assert refreshed.returncode == 0, refreshed.stderr
    assert re.fullmatch(r"archive: 2 tables in \d+\.\d s\n", refreshed.stdout), refreshed.stdout
    found = installed.run("catalog", "search", "上个月各类别的退货金额", "--limit", "1", **env)
    assert found.returncode == 0, found.stderr
    lines = found.stdout.splitlines()
    assert re.match(r" *\d+\.\d\d  archive:main\.refunds  3 rows  退货退款记录$", lines[0]), found.stdout
    assert lines[1].split() == ["category", "VARCHAR", "[家电,", "服装]"]
    assert any(line.startswith("example (archive, ") and line.endswith("各类别退货金额") for line in lines)
    unknown = installed.run("catalog", "refresh", "--source", "crm", **env)
    assert unknown.returncode == 2 and unknown.stderr == "ba-agent: no data source 'crm' in BA_DATASOURCES\n"
    examples.write_text(examples.read_text().replace("source: archive", "source: crm"))
    invalid = installed.run("catalog", "search", "refunds", **env)
    assert invalid.returncode == 2 and "Traceback" not in invalid.stderr
    assert f"BA_EXAMPLES_FILE {examples}:3: examples.0.source: no data source 'crm'" in invalid.stderr, invalid.stderr


def test_memory_edit_then_show(installed: Installed) -> None:
    scope = ("--platform", "slack", "--workspace", "T123", "--channel", "C1")
    edited = installed.run("memory", "edit", *scope, "--set", "GMV means paid orders only.")
    assert edited.returncode == 0 and edited.stdout.startswith("wrote "), edited.stderr
    shown = installed.run("memory", "show", *scope)
    assert shown.returncode == 0 and "GMV means paid orders only." in shown.stdout


def test_chat_answers_a_question_through_the_model(installed: Installed) -> None:
    with FakeAnthropic.in_thread() as anthropic:
        anthropic.script(
            Reply([tool_use("sql_query", {"sql": "DROP TABLE demo.sales"}, id="toolu_drop")]),
            Reply([text("GMV grew 4 % last week.")]),
        )
        result = installed.run(
            "chat", stdin="how did GMV do last week?\nexit\n", timeout=120,
            ANTHROPIC_API_KEY="test-key", ANTHROPIC_BASE_URL=anthropic.base_url,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "GMV grew 4 % last week." in result.stdout
    # A failed step is shown as failed, not like a successful one.
    assert "· Querying the data…" in result.stdout and "· sql_query failed (permission_denied)" in result.stdout
    assert "how did GMV do last week?" in json.dumps(anthropic.last_request.body["messages"])


def test_serve_is_healthy_ready_and_stops_on_sigterm(installed: Installed) -> None:
    port = free_port()
    proc = subprocess.Popen([installed.ba_agent, "serve", "--port", str(port)], cwd=installed.home,
                            env=installed.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        wait_healthy(port)
        assert wait_workers_ready(port) == {"ready": 1, "configured": 1}
        status, body = get_json(port, "/readyz")
        assert status == 200 and body["database"] == "ok"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=scaled(30))
    assert proc.returncode == 0, out
    assert f"listening on http://127.0.0.1:{port}" in out


def test_a_second_serve_on_a_taken_port_says_so_and_exits(installed: Installed) -> None:
    port = free_port()
    first = subprocess.Popen([installed.ba_agent, "serve", "--port", str(port)], cwd=installed.home,
                             env=installed.env(BA_WORKER_PROCESSES="0"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_healthy(port)
        second = installed.run("serve", "--port", str(port), timeout=30)
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=scaled(30))
    assert second.returncode == 1
    assert second.stderr.strip() == f"ba-agent: port {port} on 127.0.0.1 is in use; set BA_PORT or --port"
    assert "listening" not in second.stdout and "Traceback" not in second.stderr


def test_worker_starts_answering_and_stops_on_sigterm(installed: Installed) -> None:
    """A worker started on its own migrates a new database itself (serve's workers leave that
    to serve)."""
    env = installed.env(BA_DATA_DIR=str(installed.home / "worker-data"))
    proc = subprocess.Popen([installed.ba_agent, "worker"], cwd=installed.home, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = Deadline(60)
        lines: list[str] = []
        while not deadline.passed() and proc.stdout is not None:
            line = proc.stdout.readline()
            lines.append(line)
            if "worker answering" in line or not line:
                break
        assert any("worker answering" in line for line in lines), "".join(lines)
        assert any("database at revision" in line for line in lines), "".join(lines)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=scaled(30))
    assert proc.returncode == 0


def test_feedback_and_examples_review_on_an_empty_database(installed: Installed) -> None:
    assert installed.run("db", "upgrade").returncode == 0
    feedback = installed.run("feedback")
    assert feedback.returncode == 0, feedback.stderr
    assert feedback.stdout.splitlines() == ["👍 0  👎 0", "(no feedback yet)"]
    review = installed.run("examples", "review")
    assert review.returncode == 0 and review.stdout.strip() == "(no examples waiting for review)", review.stderr
    unknown = installed.run("examples", "review", "--approve", "99")
    assert unknown.returncode == 1 and unknown.stderr == "ba-agent: no proposed example 99\n"


def test_readme_commands_all_have_a_release_test() -> None:
    """Every `ba-agent …` command in the README is exercised above (a new command needs a test)."""
    readme = (ROOT / "README.md").read_text()
    documented = {line.split()[1] for line in readme.splitlines() if line.startswith(".venv/bin/ba-agent ")}
    tested = {
        "chat", "serve", "worker", "db", "skills", "stats", "threads", "tool", "memory", "metrics", "catalog", "audit",
        "monitors", "feedback", "examples",
    }  # fmt: skip
    assert documented <= tested, documented - tested
