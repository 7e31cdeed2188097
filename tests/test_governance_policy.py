"""The access policy file (BA_ACCESS_POLICY): checked at start-up with the line of every
problem; and the audience rule: who an answer is for decides what it may contain."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from agent_core.config import AgentConfig
from agent_core.governance.audience import Identity, access_note, audience_of, table_view
from agent_core.governance.errors import PolicyFileError
from agent_core.governance.loader import load_policy
from agent_core.governance.policy import AccessPolicy
from tests.serve_process import BA_AGENT, clean_env
from tests.waiting import scaled

CONTRACT_EXAMPLE = """\
groups:                        # members as platform:user_id
  east_sales: [slack:U01EAST, feishu:ou_7d8a]
  finance: [slack:U02FIN]
sources:
  dwh:
    groups: [east_sales, finance, default]
    tables:
      orders:
        row_filters:
          east_sales: "region = 'East'"
          finance: "true"
          default: "false"
        hidden_columns: [customer_email]
        column_grants: {finance: [customer_email]}
channels:
  slack:C0SALES: east_sales
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "access.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def problems_of(tmp_path: Path, text: str, dialects: dict[str, str] | None = None) -> list[tuple[int | None, str]]:
    with pytest.raises(PolicyFileError) as raised:
        load_policy(write(tmp_path, text), dialects)
    assert str(tmp_path / "access.yaml") in str(raised.value)
    return raised.value.problems


@pytest.fixture
def policy(tmp_path: Path) -> AccessPolicy:
    return load_policy(write(tmp_path, CONTRACT_EXAMPLE), {"dwh": "postgres"})


# --- the file ---------------------------------------------------------------------------------


def test_the_public_contract_example_loads(policy: AccessPolicy) -> None:
    orders = policy.sources["dwh"].tables["orders"]
    assert policy.groups["east_sales"] == ["slack:U01EAST", "feishu:ou_7d8a"]
    assert orders.row_filters == {"east_sales": "region = 'East'", "finance": "true", "default": "false"}
    assert orders.hidden_columns == ["customer_email"]
    assert orders.column_grants == {"finance": ["customer_email"]}
    assert policy.channels == {"slack:C0SALES": "east_sales"}


@pytest.mark.parametrize(
    ("text", "line", "reason"),
    [
        ("groups:\n  a: [slack:U1\n", 3, "is not valid YAML"),
        ("groups:\n  a: [slack:U1]\n  a: [slack:U2]\n", 3, "'a' is given twice under groups"),
        ("groups:\n  a: [slack:U1, U2]\n", 2, "'U2' is not a member as platform:user_id"),
        ("groups: {}\nsources:\n  dwh:\n    tables: {}\n", 3, "sources.dwh.groups: Field required"),
        ("groups: {}\nsource: {}\n", 2, "source: is not a setting of the policy file"),
        ("sources:\n  dwh:\n    groups: [default]\n    tables:\n      orders:\n        hiden_columns: [x]\n",
         6, "hiden_columns: is not a setting"),
        ("sources:\n  dwh:\n    groups: [default, sales]\n", 3, "unknown group 'sales'"),
        ("groups:\n  default: [slack:U1]\n", 2, "everyone is in the default group"),
        ("channels:\n  C0SALES: default\n", 2, "'C0SALES' is not a channel as platform:channel_id"),
        ("channels:\n  slack:C1: sales\n", 2, "unknown group 'sales'"),
        ("sources:\n  dwh:\n    groups: [default]\n    tables:\n      orders:\n        hidden_columns: [a]\n"
         "        column_grants: {default: [b]}\n", 7, "'b' is not in hidden_columns"),
        ("sources:\n  dwh:\n    groups: [default]\n    tables:\n      orders: {}\n      public.Orders: {}\n",
         6, "can name the same table"),
    ],
)
def test_invalid_files_name_the_line_and_the_reason(tmp_path: Path, text: str, line: int, reason: str) -> None:
    problems = problems_of(tmp_path, text)
    assert any(found == line and reason in message for found, message in problems), problems


@pytest.mark.parametrize(
    ("condition", "reason"),
    [
        ("region = (SELECT max(region) FROM secrets)", "a subquery is not allowed"),
        ("region IN (SELECT region FROM allowed)", "a subquery is not allowed"),
        ("pg_read_file('/etc/passwd') = 'x'", "may not call pg_read_file()"),
        ("current_setting('data_directory') = 'x'", "may not call current_setting()"),
        ("region = 'East' -- and comment", "must not contain comments"),
        ("region = 'East' /* and comment */", "must not contain comments"),
        ("orders.region = 'East'", "without a prefix"),
        ("region", "must be a condition"),
        ("region = 'East'; DROP TABLE orders", "exactly one condition"),
        ("region = ", "is not valid SQL"),
    ],
)
def test_row_filters_are_literal_conditions_over_the_table(tmp_path: Path, condition: str, reason: str) -> None:
    text = (
        "sources:\n  dwh:\n    groups: [default]\n    tables:\n      orders:\n        row_filters:\n"
        f"          default: \"{condition}\"\n"
    )
    problems = problems_of(tmp_path, text, {"dwh": "postgres"})
    assert problems[0][0] == 7 and reason in problems[0][1], problems


def test_row_filters_may_use_literals_casts_and_a_few_functions(tmp_path: Path) -> None:
    text = (
        "sources:\n  dwh:\n    groups: [default]\n    tables:\n      orders:\n        row_filters:\n"
        "          default: \"lower(region) IN ('east', 'north') AND NOT amount BETWEEN 1 AND 2 "
        "AND day >= current_date - INTERVAL '30' DAY AND created > CAST('2024-01-01' AS DATE)\"\n"
    )
    for dialect in ("postgres", "mysql", "duckdb"):
        assert load_policy(write(tmp_path, text), {"dwh": dialect}).sources["dwh"].tables["orders"].row_filters


def test_a_policy_for_an_unconfigured_source_is_refused(tmp_path: Path) -> None:
    problems = problems_of(tmp_path, CONTRACT_EXAMPLE, {"warehouse": "postgres"})
    assert problems == [(5, "sources.dwh: no data source of that name is configured in BA_DATASOURCES "
                         "(configured: warehouse)")]


def test_yaml_words_stay_text(tmp_path: Path) -> None:
    """YAML 1.1 reads `no` as false and `1:20` as a number; a policy must mean what it says."""
    policy = load_policy(write(tmp_path, "groups:\n  no: [telegram:1:20]\nchannels:\n  slack:C1: no\n"))
    assert policy.groups == {"no": ["telegram:1:20"]}
    assert policy.channels == {"slack:C1": "no"}


def test_settings_load_the_policy_with_the_sources_dialects(tmp_path: Path) -> None:
    path = write(tmp_path, CONTRACT_EXAMPLE)
    config = AgentConfig(
        datasources={"dwh": {"name": "dwh", "url": f"duckdb://{tmp_path / 'dwh.duckdb'}"}},
        access_policy=str(path),
    )
    assert config.access_policy is not None
    assert config.access_policy.channels == {"slack:C0SALES": "east_sales"}
    assert AgentConfig().access_policy is None


def test_an_invalid_policy_stops_start_up_with_exit_2_naming_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, CONTRACT_EXAMPLE.replace("finance: \"true\"", "finance: \"(SELECT true)\""))
    env = clean_env(
        tmp_path,
        BA_DATASOURCES=f'{{"dwh": "duckdb://{tmp_path / "dwh.duckdb"}"}}',
        BA_ACCESS_POLICY=str(path),
    )
    for command in (["tool", "run", "sql_query", "--json", '{"sql": "SELECT 1"}'], ["serve", "--port", "1"]):
        done = subprocess.run([BA_AGENT, *command], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=scaled(60))
        assert done.returncode == 2, done.stderr
        assert f"BA_ACCESS_POLICY: {path}: line 11:" in done.stderr
        assert "sources.dwh.tables.orders.row_filters.finance" in done.stderr


# --- the audience -----------------------------------------------------------------------------


def test_in_a_dm_the_askers_groups_apply(policy: AccessPolicy) -> None:
    east = audience_of(policy, Identity(platform="slack", user="U01EAST", is_dm=True))
    assert east.groups == {"east_sales", "default"}
    feishu = audience_of(policy, Identity(platform="feishu", user="ou_7d8a", is_dm=True))
    assert feishu.groups == {"east_sales", "default"}
    stranger = audience_of(policy, Identity(platform="slack", user="U9", is_dm=True))
    assert stranger.groups == {"default"}
    # The same id on another platform is another person.
    assert audience_of(policy, Identity(platform="feishu", user="U01EAST", is_dm=True)).groups == {"default"}


def test_in_a_channel_the_channel_decides_not_the_asker(policy: AccessPolicy) -> None:
    finance_in_sales = audience_of(policy, Identity(platform="slack", user="U02FIN", channel="C0SALES"))
    assert finance_in_sales.groups == {"east_sales", "default"}
    finance_elsewhere = audience_of(policy, Identity(platform="slack", user="U02FIN", channel="C0GENERAL"))
    assert finance_elsewhere.groups == {"default"}
    # A Feishu chat with the same id as the Slack channel is not that channel.
    assert audience_of(policy, Identity(platform="feishu", user="ou_7d8a", channel="C0SALES")).groups == {"default"}


def test_several_groups_see_the_union_of_rows_and_columns(tmp_path: Path) -> None:
    text = CONTRACT_EXAMPLE.replace("finance: [slack:U02FIN]", "finance: [slack:U02FIN, slack:U01EAST]")
    policy = load_policy(write(tmp_path, text))
    both = audience_of(policy, Identity(platform="slack", user="U01EAST", is_dm=True))
    view = table_view("orders", policy.sources["dwh"].tables["orders"], both)
    assert view.row_filters is None and not view.hidden_columns and not view.restricts


def test_what_each_audience_sees_of_the_table_and_is_told(policy: AccessPolicy) -> None:
    orders = policy.sources["dwh"].tables["orders"]
    east = audience_of(policy, Identity(platform="slack", user="U01EAST", is_dm=True))
    view = table_view("orders", orders, east)
    assert view.row_filters == ("region = 'East'",)
    assert view.hidden_columns == {"customer_email"}
    assert access_note([view], east) == (
        "Access policy: showing rows of orders allowed for east_sales only; customer_email of "
        "orders hidden — per your access."
    )
    channel = audience_of(policy, Identity(platform="slack", user="U02FIN", channel="C0GENERAL"))
    closed = table_view("orders", orders, channel)
    assert closed.row_filters == ()  # default: "false"
    assert "no rows of orders are open here" in (access_note([closed], channel) or "")
    assert "everyone here reads the answer" in (access_note([closed], channel) or "")
    finance = audience_of(policy, Identity(platform="slack", user="U02FIN", is_dm=True))
    assert access_note([table_view("orders", orders, finance)], finance) is None
