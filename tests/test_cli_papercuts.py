"""What an operator meets at the terminal: piping into `head`, partial periods, where the data
lives, a fast `skills list`, errors without pydantic's wording, `tool list`."""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gateway.cli.main import main
from gateway.config import ConfigError, load_settings
from tests.serve_process import BA_AGENT, clean_env
from tests.waiting import scaled


def run(tmp_path: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [BA_AGENT, *args], env=clean_env(tmp_path, **env), cwd=tmp_path, capture_output=True, text=True, timeout=scaled(120)
    )


@pytest.mark.parametrize(
    "args",
    [
        ("metrics", "query", "--metrics", "gmv", "--group-by", "region", "--grain", "day"),
        ("tool", "run", "sql_query", "--json", json.dumps({"sql": "SELECT repeat('x', 5000) AS s FROM range(200) t(x)"})),
    ],
    ids=["metrics-query", "tool-run"],
)
def test_piping_into_head_ends_quietly(tmp_path: Path, args: tuple[str, ...]) -> None:
    (tmp_path / "data").mkdir()
    # A pipe of one page, as small as Linux allows: the command is still writing when the
    # reader leaves, whatever its output's size (a default 64 KiB pipe could take it whole).
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 4096)
    proc = subprocess.Popen(
        [BA_AGENT, *args], env=clean_env(tmp_path), cwd=tmp_path, stdout=write_end, stderr=subprocess.PIPE
    )
    os.close(write_end)
    assert proc.stderr is not None
    with os.fdopen(read_end, "rb") as stdout:
        assert stdout.readline()  # what `head -1` reads, then it leaves
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=scaled(120)) == 141  # as a shell reports a command ended by SIGPIPE
    assert "Traceback" not in stderr and "BrokenPipeError" not in stderr, stderr


def test_weekly_metrics_mark_the_partial_first_and_last_weeks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("BA_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.chdir(tmp_path)
    # The demo data runs from Friday 2026-05-01 to Saturday 2026-10-31.
    assert main(["metrics", "query", "--metrics", "gmv", "--grain", "week"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["metric_time__week", "gmv", "note"]
    assert lines[2].startswith("2026-04-27") and lines[2].endswith("partial (from 2026-05-01)")
    assert lines[-2].startswith("2026-10-26") and lines[-2].endswith("partial (to 2026-10-31)")
    whole = lines[3:-2]
    assert len(whole) > 20 and not any("partial" in line for line in whole)
    assert lines[-1].startswith("(partial: a week the data or --start/--end cover only in part")

    assert main(["metrics", "query", "--metrics", "gmv", "--grain", "month", "--start", "2026-06-01", "--end", "2026-06-30"]) == 0
    assert capsys.readouterr().out.splitlines()[0].split() == ["metric_time__month", "gmv"]  # one whole month


def test_a_data_directory_not_there_yet_is_named_on_stderr(tmp_path: Path) -> None:
    fresh = run(tmp_path, "metrics", "list", BA_DATA_DIR="./elsewhere")
    assert fresh.returncode == 0, fresh.stderr
    assert fresh.stderr.splitlines()[0] == (
        f"ba-agent: {tmp_path / 'elsewhere'} (BA_DATA_DIR) does not exist yet; a command that stores data creates it "
        "there (a relative BA_DATA_DIR is read from the working directory)"
    )
    (tmp_path / "elsewhere").mkdir()
    assert run(tmp_path, "metrics", "list", BA_DATA_DIR="./elsewhere").stderr == ""


def test_skills_list_does_not_load_the_model_sdk(tmp_path: Path) -> None:
    script = (
        "import sys; from gateway.cli.main import main; code = main(['skills', 'list']); "
        "print(code, 'anthropic' in sys.modules)"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], env=clean_env(tmp_path), cwd=Path(__file__).parent.parent,
        capture_output=True, text=True, timeout=scaled(60),
    )  # fmt: skip
    assert done.stdout.splitlines()[-1] == "0 False", done.stdout + done.stderr
    assert "anomaly-detection" in done.stdout


def test_setting_and_tool_input_errors_carry_no_pydantic_wording(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as raised:
        load_settings(_env_file=None, platforms=(), DATABASE_URL="mysql://db/x", BA_DATA_DIR=str(tmp_path))
    assert str(raised.value) == (
        "invalid configuration: DATABASE_URL: database 'mysql' is not supported (use sqlite or postgresql)"
    )
    (tmp_path / "data").mkdir()
    bad = run(tmp_path, "tool", "run", "sql_query", "--json", '{"sqll": "SELECT 1"}')
    assert bad.returncode == 2
    assert bad.stderr == "ba-agent: invalid input for sql_query: sql: Field required\n"


def test_tool_list_names_every_tool_with_its_input(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    listing = run(tmp_path, "tool", "list")
    assert listing.returncode == 0, listing.stderr
    lines = listing.stdout.splitlines()
    names = [line for line in lines if not line.startswith(" ")]
    assert names[:3] == ["sql_query", "list_tables", "describe_table"] and len(names) == 15
    assert "    sql: string, required" in lines and '    grain: "day" | "week" | "month" | "quarter" | "year", optional' in lines
    schemas = json.loads(run(tmp_path, "tool", "list", "--json").stdout)
    [sql] = [s for s in schemas if s["name"] == "sql_query"]
    assert sql["input_schema"]["required"] == ["sql"]


def test_stats_and_threads_on_a_database_never_migrated_say_so(tmp_path: Path) -> None:
    for command in ("stats", "threads"):
        done = run(tmp_path, command, BA_DATA_DIR="./elsewhere")
        assert done.returncode == 1 and "Traceback" not in done.stderr
        assert done.stderr.splitlines()[-1] == (
            "ba-agent: this database has no tables yet: is DATABASE_URL (or BA_DATA_DIR) the service's? "
            "`ba-agent serve` or `ba-agent db upgrade` creates them"
        )
