"""Conversation workspaces: uploads, table inspection, guarded DuckDB queries, the demo database."""

from __future__ import annotations

import multiprocessing
import time
from contextlib import closing
from datetime import date
from pathlib import Path

import duckdb
import pytest

from agent_core.data.demo import DEMO_ANOMALIES, DEMO_VERSION, ensure_demo_database
from agent_core.data.duckdb_engine import (
    _open_query_connection,
    describe_table,
    list_tables,
    run_duckdb_query,
)
from agent_core.data.errors import (
    MalformedUpload,
    QueryFailed,
    QueryTimeout,
    TableNotFound,
    UnsafeSQLError,
    UnsupportedUploadType,
    UploadTooLarge,
)
from agent_core.data.ingest import load_upload, table_name_for
from agent_core.data.upload_limits import UploadLimits
from tests.waiting import scaled


def _dump(db: Path, sql: str) -> bytes:
    with duckdb.connect(str(db), read_only=True) as conn:
        return repr(conn.execute(sql).fetchall()).encode()


# --- demo database ---------------------------------------------------------------------------


def test_demo_database_is_deterministic(tmp_path: Path) -> None:
    first = ensure_demo_database(tmp_path / "a" / "demo.duckdb")
    second = ensure_demo_database(tmp_path / "b" / "demo.duckdb")
    sql = "SELECT * FROM sales ORDER BY date, region, channel, category"
    assert _dump(first, sql) == _dump(second, sql)
    with duckdb.connect(str(first), read_only=True) as conn:
        count, start, end, regions, channels, categories = conn.execute(
            "SELECT count(*), min(date), max(date), count(DISTINCT region), "
            "count(DISTINCT channel), count(DISTINCT category) FROM sales"
        ).fetchone()
        types = dict(
            conn.execute(
                "SELECT column_name, data_type FROM information_schema.columns "
                "WHERE table_name = 'sales'"
            ).fetchall()
        )
    assert (count, start, end) == (184 * 5 * 3 * 5, date(2026, 5, 1), date(2026, 10, 31))
    assert (regions, channels, categories) == (5, 3, 5)
    assert types == {
        "date": "DATE",
        "region": "VARCHAR",
        "channel": "VARCHAR",
        "category": "VARCHAR",
        "orders": "INTEGER",
        "gmv": "DECIMAL(14,2)",
    }


def test_demo_database_contains_the_east_china_app_drop(tmp_path: Path) -> None:
    db = ensure_demo_database(tmp_path / "demo.duckdb")
    outage = DEMO_ANOMALIES[0]
    assert outage.start == date(2026, 10, 20) and outage.regions == ("East China",)
    with duckdb.connect(str(db), read_only=True) as conn:
        daily = dict(
            conn.execute(
                "SELECT date, sum(gmv) FROM sales WHERE region = 'East China' AND channel = 'app' "
                "AND date BETWEEN DATE '2026-10-06' AND DATE '2026-10-23' GROUP BY date"
            ).fetchall()
        )
    # Compare each outage day with the same weekday one and two weeks earlier.
    for day in (date(2026, 10, 20), date(2026, 10, 21), date(2026, 10, 22)):
        baseline = [daily[date.fromordinal(day.toordinal() - 7 * w)] for w in (1, 2)]
        ratio = float(daily[day]) / (float(sum(baseline)) / 2)
        assert 0.5 < ratio < 0.7, (day, ratio)
    recovered = float(daily[date(2026, 10, 23)]) / float(daily[date(2026, 10, 16)])
    assert 0.85 < recovered < 1.15


def test_demo_database_builds_and_rebuilds_when_outdated(tmp_path: Path) -> None:
    # How fast it builds is a figure of bench/startup.py (a new user's first `tool run`).
    path = tmp_path / "demo.duckdb"
    ensure_demo_database(path)
    with duckdb.connect(str(path)) as conn:
        conn.execute("UPDATE _demo_meta SET version = version - 1")
        conn.execute("DELETE FROM sales")
    ensure_demo_database(path)
    with duckdb.connect(str(path), read_only=True) as conn:
        assert conn.execute("SELECT max(version) FROM _demo_meta").fetchone() == (DEMO_VERSION,)
        assert conn.execute("SELECT count(*) FROM sales").fetchone() == (13800,)
    path.write_bytes(b"not a database")
    ensure_demo_database(path)
    assert _dump(path, "SELECT count(*) FROM sales") == b"[(13800,)]"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.duckdb"]


def _build_in_child(path: str) -> None:
    ensure_demo_database(Path(path))


def test_demo_database_concurrent_builds(tmp_path: Path) -> None:
    path = tmp_path / "demo.duckdb"
    context = multiprocessing.get_context("spawn")
    workers = [context.Process(target=_build_in_child, args=(str(path),)) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
        assert worker.exitcode == 0
    assert _dump(path, "SELECT count(*), sum(gmv) FROM sales") == _dump(
        ensure_demo_database(tmp_path / "fresh.duckdb"), "SELECT count(*), sum(gmv) FROM sales"
    )
    assert not [p for p in tmp_path.iterdir() if p.name.endswith((".tmp", ".wal"))]


# --- uploads ---------------------------------------------------------------------------------


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    return tmp_path / "workspace.duckdb"


def _write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, str):
        path.write_text(content, encoding="utf-8")
    else:
        path.write_bytes(content)
    return path


def _rows(db: Path, sql: str) -> list[tuple]:
    with duckdb.connect(str(db), read_only=True) as conn:
        return conn.execute(sql).fetchall()


def test_load_csv_detects_types(tmp_path: Path, workspace: Path) -> None:
    path = _write(
        tmp_path,
        "x.csv",
        "date,region,orders,gmv\n2026-10-01,East China,12,100.5\n2026-10-02,West China,7,\n",
    )
    [table] = load_upload(workspace, path, "Daily Sales (Oct).csv", UploadLimits())
    assert table.table_name == "daily_sales_oct"
    assert table.source_file == "Daily Sales (Oct).csv" and table.sheet is None
    assert table.row_count == 2 and table.detected_encoding == "utf-8"
    assert [(c.name, c.type) for c in table.columns] == [
        ("date", "DATE"),
        ("region", "VARCHAR"),
        ("orders", "BIGINT"),
        ("gmv", "DOUBLE"),
    ]
    assert _rows(workspace, "SELECT region, gmv FROM daily_sales_oct ORDER BY date") == [
        ("East China", 100.5),
        ("West China", None),
    ]


def test_load_tsv_and_utf8_bom(tmp_path: Path, workspace: Path) -> None:
    tsv = _write(tmp_path, "a.tsv", "name\tvalue\nalpha, with comma\t1\nbeta\t2\n")
    [table] = load_upload(workspace, tsv, "metrics.tsv", UploadLimits())
    assert _rows(workspace, "SELECT * FROM metrics ORDER BY value") == [
        ("alpha, with comma", 1),
        ("beta", 2),
    ]
    bom = _write(tmp_path, "b.csv", "\ufeff城市,人数\n上海,3\n".encode("utf-8"))
    [table] = load_upload(workspace, bom, "bom.csv", UploadLimits())
    assert [c.name for c in table.columns] == ["城市", "人数"]


def test_load_gbk_csv_with_chinese_headers(tmp_path: Path, workspace: Path) -> None:
    content = "日期,地区,渠道,销售额\n2026-10-20,华东,app,1234.5\n2026-10-21,华北,门店,88\n"
    path = _write(tmp_path, "export.csv", content.encode("gbk"))
    [table] = load_upload(workspace, path, "销售数据.csv", UploadLimits())
    assert table.table_name == "upload"  # nothing ASCII in the name: safe fallback
    assert table.detected_encoding == "gb18030" and table.notes
    assert [c.name for c in table.columns] == ["日期", "地区", "渠道", "销售额"]
    assert _rows(workspace, 'SELECT "地区", "渠道", "销售额" FROM upload ORDER BY "日期"') == [
        ("华东", "app", 1234.5),
        ("华北", "门店", 88.0),
    ]


def test_load_multi_sheet_xlsx(tmp_path: Path, workspace: Path) -> None:
    openpyxl = pytest.importorskip("openpyxl")
    workbook = openpyxl.Workbook()
    orders = workbook.active
    orders.title = "Orders"
    orders.append(["date", "region", "orders", "gmv"])
    orders.append([date(2026, 10, 1), "East China", 10, 99.5])
    orders.append([date(2026, 10, 2), "South China", 12, 120.0])
    workbook.create_sheet("Empty")
    chinese = workbook.create_sheet("区域")
    chinese.append([])  # a blank row above the header is skipped
    chinese.append(["区域", "负责人"])
    chinese.append(["华东", "张三"])
    path = tmp_path / "book.xlsx"
    workbook.save(path)

    tables = load_upload(workspace, path, "Q4 Report.xlsx", UploadLimits())
    assert [(t.table_name, t.sheet, t.row_count) for t in tables] == [
        ("q4_report_orders", "Orders", 2),
        ("q4_report_sheet3", "区域", 1),
    ]
    assert {c.name: c.type for c in tables[0].columns} == {
        "date": "DATE",
        "region": "VARCHAR",
        "orders": "BIGINT",
        "gmv": "DOUBLE",
    }
    assert _rows(workspace, "SELECT sum(gmv) FROM q4_report_orders") == [(219.5,)]
    assert _rows(workspace, 'SELECT "负责人" FROM q4_report_sheet3') == [("张三",)]
    assert [t.source_file for t in list_tables(workspace)] == ["Q4 Report.xlsx"] * 2


def test_load_parquet_and_json(tmp_path: Path, workspace: Path) -> None:
    parquet = tmp_path / "p.parquet"
    with duckdb.connect() as conn:
        conn.execute(
            f"COPY (SELECT range AS id, range * 1.5 AS v FROM range(5)) TO '{parquet}' "
            "(FORMAT parquet)"
        )
    [table] = load_upload(workspace, parquet, "facts.parquet", UploadLimits())
    assert table.row_count == 5 and table.detected_encoding is None
    array = _write(tmp_path, "a.json", '[{"sku": "A1", "qty": 2}, {"sku": "B2", "qty": null}]')
    [table] = load_upload(workspace, array, "stock.json", UploadLimits())
    assert _rows(workspace, "SELECT sku, qty FROM stock ORDER BY sku") == [("A1", 2), ("B2", None)]
    lines = _write(tmp_path, "l.jsonl", '{"event": "click", "n": 1}\n{"event": "view", "n": 3}\n')
    [table] = load_upload(workspace, lines, "events.jsonl", UploadLimits())
    assert _rows(workspace, "SELECT sum(n) FROM events") == [(4,)]


def test_oversized_upload_is_refused_and_nothing_stored(tmp_path: Path, workspace: Path) -> None:
    big = _write(tmp_path, "big.csv", "a,b\n" + "1,2\n" * 1000)
    with pytest.raises(UploadTooLarge, match="limit"):
        load_upload(workspace, big, "big.csv", UploadLimits(max_bytes=1000))
    with pytest.raises(UploadTooLarge, match="1,000 rows|999 rows"):
        load_upload(workspace, big, "big.csv", UploadLimits(max_rows=999))
    assert list_tables(workspace) == []


def test_xlsx_row_cap(tmp_path: Path, workspace: Path) -> None:
    openpyxl = pytest.importorskip("openpyxl")
    workbook = openpyxl.Workbook()
    workbook.active.append(["n"])
    for n in range(20):
        workbook.active.append([n])
    path = tmp_path / "rows.xlsx"
    workbook.save(path)
    with pytest.raises(UploadTooLarge):
        load_upload(workspace, path, "rows.xlsx", UploadLimits(max_rows=10))
    assert list_tables(workspace) == []


def test_malformed_and_unsupported_uploads(tmp_path: Path, workspace: Path) -> None:
    good = _write(tmp_path, "good.json", '[{"a": 1}]')
    load_upload(workspace, good, "data.json", UploadLimits())
    broken = _write(tmp_path, "bad.json", '[{"a": 1},, {"a": }')
    # A failed re-upload of the same name must leave the previous tables untouched.
    with pytest.raises(MalformedUpload, match="data.json"):
        load_upload(workspace, broken, "data.json", UploadLimits())
    assert _rows(workspace, "SELECT a FROM data") == [(1,)]
    fake_xlsx = _write(tmp_path, "fake.xlsx", b"this is not a zip file")
    with pytest.raises(MalformedUpload, match="xlsx"):
        load_upload(workspace, fake_xlsx, "fake.xlsx", UploadLimits())
    with pytest.raises(MalformedUpload, match="empty"):
        load_upload(workspace, _write(tmp_path, "e.csv", b""), "e.csv", UploadLimits())
    with pytest.raises(UnsupportedUploadType, match="PDF|pdf"):
        load_upload(workspace, _write(tmp_path, "r.pdf", b"%PDF-1.4"), "report.pdf", UploadLimits())
    with pytest.raises(UnsupportedUploadType, match="xlsx"):
        load_upload(workspace, _write(tmp_path, "o.xls", b"\xd0\xcf"), "old.xls", UploadLimits())
    assert [t.name for t in list_tables(workspace)] == ["data"]


@pytest.mark.parametrize(
    ("original", "sheet", "expected"),
    [
        ("Sales Report 2026.csv", None, "sales_report_2026"),
        ("2026-sales.csv", None, "t_2026_sales"),
        ("Café--Déjà vu!!.csv", None, "cafe_deja_vu"),
        ("销售.csv", None, "upload"),
        ("order.csv", None, "order_data"),
        ("book.xlsx", "Sheet 1", "book_sheet_1"),
        ("book.xlsx", "汇总", "book_sheet2"),
        ("x" * 80 + ".csv", None, "x" * 48),
    ],
)
def test_table_name_cleaning(original: str, sheet: str | None, expected: str) -> None:
    assert table_name_for(original, sheet, index=1, reserved={"order", "select"}) == expected


def test_table_names_dedupe_and_reupload_replaces(tmp_path: Path, workspace: Path) -> None:
    first = _write(tmp_path, "1.csv", "a\n1\n")
    second = _write(tmp_path, "2.csv", "a\n2\n")
    assert load_upload(workspace, first, "sales.csv", UploadLimits())[0].table_name == "sales"
    assert load_upload(workspace, second, "Sales.tsv", UploadLimits())[0].table_name == "sales_2"
    replaced = load_upload(workspace, second, "sales.csv", UploadLimits())
    assert replaced[0].table_name == "sales" and "Replaced" in replaced[0].notes[-1]
    assert _rows(workspace, "SELECT a FROM sales") == [(2,)]
    assert [t.name for t in list_tables(workspace)] == ["sales", "sales_2"]


def test_describe_table_stats(tmp_path: Path, workspace: Path) -> None:
    path = _write(
        tmp_path,
        "d.csv",
        "day,city,amount\n2026-01-01,A,10\n2026-01-05,B,\n2026-01-03,A,30\n2026-01-02,,20\n",
    )
    load_upload(workspace, path, "d.csv", UploadLimits())
    description = describe_table(workspace, "d")
    assert description.row_count == 4 and len(description.sample_rows) == 4
    stats = {c.name: c for c in description.columns}
    assert (stats["day"].min, stats["day"].max) == (date(2026, 1, 1), date(2026, 1, 5))
    assert (stats["amount"].min, stats["amount"].max) == (10, 30)
    assert stats["amount"].null_share == 0.25 and stats["city"].null_share == 0.25
    assert stats["city"].min is None and stats["city"].distinct_count == 2
    with pytest.raises(TableNotFound, match="Available tables: d"):
        describe_table(workspace, "nope")


# --- guarded queries -------------------------------------------------------------------------


@pytest.fixture
def demo_db(tmp_path: Path) -> Path:
    return ensure_demo_database(tmp_path / "demo" / "demo.duckdb")


def test_query_joins_uploads_with_demo(tmp_path: Path, workspace: Path, demo_db: Path) -> None:
    path = _write(tmp_path, "t.csv", "region,target\nEast China,1000000\nWest China,500000\n")
    load_upload(workspace, path, "targets.csv", UploadLimits())
    result = run_duckdb_query(
        workspace,
        "SELECT t.region, sum(s.gmv) AS gmv, any_value(t.target) AS target FROM targets t "
        "JOIN demo.sales s USING (region) WHERE s.date >= DATE '2026-10-01' GROUP BY 1 ORDER BY 1",
        demo_db=demo_db,
    )
    assert result.columns == ["region", "gmv", "target"]
    assert [row[0] for row in result.rows] == ["East China", "West China"]
    assert not result.truncated and result.row_count == 2 and result.elapsed_ms >= 0
    # Without uploads the demo data is still there, under the same name.
    only_demo = run_duckdb_query(None, "SELECT count(*) FROM demo.sales", demo_db=demo_db)
    assert only_demo.rows == [[13800]]


def test_query_row_and_byte_caps(demo_db: Path) -> None:
    capped = run_duckdb_query(None, "SELECT * FROM demo.sales", demo_db=demo_db, row_cap=7)
    assert capped.row_count == 7 and capped.truncated
    exact = run_duckdb_query(None, "SELECT * FROM range(7)", row_cap=7)
    assert exact.row_count == 7 and not exact.truncated
    by_bytes = run_duckdb_query(None, "SELECT repeat('x', 100) FROM range(50)", byte_cap=1000)
    assert by_bytes.row_count == 10 and by_bytes.truncated


def test_query_timeout() -> None:
    started = time.perf_counter()
    with pytest.raises(QueryTimeout, match="cancelled"):
        run_duckdb_query(
            None,
            "SELECT count(*) FROM range(1000000) a, range(1000000) b "
            "WHERE a.range * b.range % 7 = 3",
            timeout_s=0.5,
        )
    assert time.perf_counter() - started < scaled(5)  # the limit applied, not a default of minutes


def test_query_errors_are_typed(workspace: Path, demo_db: Path) -> None:
    with pytest.raises(UnsafeSQLError):
        run_duckdb_query(None, "DROP TABLE demo.sales", demo_db=demo_db)
    with pytest.raises(QueryFailed, match="nope"):
        run_duckdb_query(None, "SELECT nope FROM demo.sales", demo_db=demo_db)


def test_a_refused_query_leaves_the_workspace_free(tmp_path: Path, workspace: Path, demo_db: Path) -> None:
    """The connection opens while the guard reads the SQL; a refusal closes it, so the next
    upload's read-write connection to the same file is not turned away."""
    load_upload(workspace, _write(tmp_path, "a.csv", "x\n1\n"), "a.csv", UploadLimits())
    for refused in ("DROP TABLE a", "SELECT * FROM a; DELETE FROM a", "SELECT (((((("):
        with pytest.raises(UnsafeSQLError):  # parse errors included
            run_duckdb_query(workspace, refused, demo_db=demo_db)
    load_upload(workspace, _write(tmp_path, "b.csv", "y\n2\n"), "b.csv", UploadLimits())
    assert run_duckdb_query(workspace, "SELECT x + y FROM a, b", demo_db=demo_db).rows == [[3]]


def test_query_connection_blocks_external_access_and_writes(
    tmp_path: Path, workspace: Path, demo_db: Path
) -> None:
    """Below the guard: even raw SQL on the query connection cannot escape or write."""
    secret = _write(tmp_path, "secret.csv", "a\n1\n")
    load_upload(workspace, secret, "s.csv", UploadLimits())
    with closing(_open_query_connection(workspace, demo_db)) as conn:
        for sql in (
            f"SELECT * FROM read_csv('{secret}')",
            f"SELECT * FROM '{secret}'",
            f"ATTACH '{tmp_path / 'other.duckdb'}' AS other",
            f"COPY s TO '{tmp_path / 'out.csv'}'",
            "SET enable_external_access = true",
            "INSERT INTO s VALUES (2)",
            "INSERT INTO demo.sales SELECT * FROM demo.sales LIMIT 1",
            "INSTALL httpfs",
        ):
            with pytest.raises(duckdb.Error):
                conn.execute(sql)
    assert not (tmp_path / "out.csv").exists() and not (tmp_path / "other.duckdb").exists()
