"""A generated PostgreSQL warehouse of 500+ tables, for the schema catalog's tests and bench.

Twenty-five business domains of twenty tables each share vocabulary on purpose (campaign,
ticket, order, shipment, stock … appear in many names and comments, as in a real warehouse),
and eight hand-written tables are the right answers to :data:`QUESTIONS`, in English and
Chinese, found by names, comments or column values. The schema and a read-only login role are
created by the admin connection and dropped afterwards.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import psycopg
from psycopg import sql

ADMIN_URL = "postgresql://postgres@127.0.0.1:5432/test"

_DOMAINS: dict[str, tuple[str, list[str]]] = {
    "sales": ("Sales", ["order", "order_item", "quote", "invoice", "discount", "region_target", "rep", "pipeline"]),
    "fin": ("Finance", ["ledger", "journal", "budget", "invoice", "payment_term", "cost_center", "accrual", "fx_rate"]),
    "hr": ("Human resources", ["employee", "payroll", "department", "leave", "review", "position", "headcount", "benefit"]),
    "mkt": ("Marketing", ["campaign", "campaign_budget", "lead", "audience", "email_send", "landing_page", "utm", "coupon"]),
    "logi": ("Logistics", ["shipment_event", "route", "vehicle", "driver", "depot", "parcel", "freight_bill", "dock"]),
    "inv": ("库存", ["stock_move", "sku", "bin", "cycle_count", "reorder", "lot", "adjustment", "transfer"]),
    "crm": ("CRM", ["account", "contact", "opportunity", "activity", "segment", "note", "task", "territory"]),
    "support": (
        "Support", ["ticket_tag", "ticket_comment", "sla_policy", "macro", "queue", "satisfaction", "kb_article", "ticket_event"]
    ),
    "prod": ("Product", ["catalog", "category", "attribute", "price", "bundle", "review", "image", "variant"]),
    "web": ("Web analytics", ["session", "pageview", "event", "funnel", "referrer", "device", "experiment", "search_term"]),
    "pay": ("Payments", ["payout", "chargeback", "card_token", "settlement", "gateway_log", "fee", "wallet", "dispute"]),
    "proc": ("采购", ["purchase_order", "supplier", "rfq", "contract", "receipt", "price_list", "approval", "spend"]),
    "mfg": ("Manufacturing", ["work_order", "bom", "machine", "downtime", "yield", "shift", "scrap", "routing"]),
    "risk": ("Risk", ["fraud_score", "rule_hit", "blacklist", "review_case", "limit", "exposure", "alert", "model_run"]),
    "legal": ("Legal", ["case", "contract_clause", "entity", "filing", "counsel", "matter", "hold", "policy"]),
    "it": ("IT", ["asset", "license", "incident", "change", "server", "backup", "user_access", "patch"]),
    "ops": ("运营", ["store_visit", "store_hour", "kpi", "audit", "checklist", "staff_plan", "footfall", "energy"]),
    "ads": ("Advertising", ["ad_group", "keyword", "creative", "bid", "placement", "conversion_pixel", "spend_cap", "publisher"]),
    "store": ("Stores", ["store", "pos_terminal", "till", "shelf", "planogram", "promotion", "markdown", "queue_time"]),
    "sup": ("Supplier quality", ["inspection", "defect", "audit_finding", "scorecard", "capa", "certificate", "sample", "claim"]),
    "tax": ("Tax", ["vat_return", "tax_code", "withholding", "nexus", "exemption", "filing_period", "tax_line", "remittance"]),
    "bi": ("BI", ["dashboard", "report_run", "dataset", "extract", "subscription", "alert_rule", "metric_def", "usage"]),
    "sec": ("Security", ["login_attempt", "mfa_event", "api_key", "role_grant", "vuln", "scan", "firewall_rule", "token"]),
    "edu": ("Training", ["course", "enrollment", "lesson", "quiz", "certification", "trainer", "room", "feedback"]),
    "cs": ("客服", ["call", "chat_session", "callback", "agent_shift", "ivr_path", "wait_time", "script", "survey"]),
}
_SUFFIXES = ["daily", "monthly", "hist", "snapshot", "stg", "agg", "dim", "fact", "log", "archive"]
_STATUSES = ["active", "inactive", "pending", "closed"]


@dataclass(frozen=True)
class Table:
    name: str
    comment: str | None
    columns: list[tuple[str, str, str | None]]  # name, SQL type, comment
    rows: list[tuple] = field(default_factory=list)


# The tables the questions are about.
TARGETS: list[Table] = [
    Table(
        "mkt_campaign_daily_performance",
        "Daily performance per ad campaign: impressions, clicks, spend and conversions",
        [("campaign_id", "bigint", None), ("campaign_name", "text", None),
         ("channel", "text", "search, social, display or email"), ("impressions", "bigint", None),
         ("clicks", "bigint", None), ("ctr", "numeric(6,4)", "click-through rate: clicks / impressions"),
         ("spend", "numeric(12,2)", None), ("stat_date", "date", None)],
        [(i, f"campaign {i}", ["search", "social", "display", "email"][i % 4], 1000 * i, 10 * i, 0.01, 5.0 * i, "2026-11-01")
         for i in range(1, 41)],
    ),
    Table(
        "support_tickets",
        "Customer support tickets with their escalation status and assigned agent",
        [("ticket_id", "bigint", None), ("agent_id", "bigint", None), ("escalated", "boolean", None),
         ("priority", "text", None), ("opened_at", "timestamptz", None), ("closed_at", "timestamptz", None)],
        [(i, i % 7, i % 5 == 0, ["low", "medium", "high", "urgent"][i % 4], "2026-11-01", None) for i in range(1, 61)],
    ),
    Table(
        "inv_warehouse_stock_snapshot",
        "各仓库每日库存快照",
        [("warehouse_code", "text", "仓库编码"), ("sku", "text", "商品SKU"), ("on_hand_qty", "integer", "在库数量"),
         ("days_of_supply", "numeric(8,1)", "库存周转天数"), ("snapshot_date", "date", "快照日期")],
        [(f"WH{i % 6}", f"SKU{i}", i * 3, 12.5, "2026-11-01") for i in range(1, 51)],
    ),
    Table(
        "logi_shipments",
        "Outbound shipments: carrier, promised and actual delivery dates",
        [("shipment_id", "bigint", None), ("order_id", "bigint", None), ("carrier_name", "text", None),
         ("promised_delivery_date", "date", None), ("delivered_at", "timestamptz", None),
         ("delay_days", "integer", "days delivered after the promised date")],
        [(i, i, ["SF Express", "JD Logistics", "ZTO", "YTO"][i % 4], "2026-11-01", "2026-11-02", i % 3) for i in range(1, 81)],
    ),
    Table(
        "ret_refund_requests",
        "退货退款申请记录",
        [("request_id", "bigint", None), ("order_id", "bigint", None), ("product_category", "text", "商品类别"),
         ("refund_amount", "numeric(12,2)", "退款金额"), ("reason", "text", "退货原因"),
         ("requested_at", "timestamptz", "申请时间")],
        [(i, i, ["服装", "家电", "美妆"][i % 3], 9.9 * i, ["质量问题", "尺码不合适", "不想要了"][i % 3], "2026-11-01")
         for i in range(1, 31)],
    ),
    Table(
        "pay_transactions",
        "Payment transactions of orders",
        [("txn_id", "bigint", None), ("order_id", "bigint", None), ("payment_method", "text", None),
         ("amount", "numeric(12,2)", None), ("paid_at", "timestamptz", None), ("status", "text", None)],
        [(i, i, ["alipay", "wechat_pay", "credit_card", "bank_transfer"][i % 4], 10.0 * i, "2026-11-01",
          ["succeeded", "failed", "refunded"][i % 3]) for i in range(1, 101)],
    ),
    Table(
        "customerLifetimeValue",
        None,
        [("customerId", "bigint", None), ("segmentName", "text", None), ("lifetimeValue", "numeric(14,2)", None),
         ("firstOrderDate", "date", None)],
        [(i, ["vip", "regular", "new"][i % 3], 100.0 * i, "2025-01-01") for i in range(1, 31)],
    ),
    Table(
        "hr_employee_attrition_monthly",
        "员工离职率月度统计 (monthly attrition)",
        [("month", "date", "月份"), ("department", "text", "部门"), ("headcount", "integer", "在职人数"),
         ("leavers", "integer", "离职人数"), ("attrition_rate", "numeric(6,4)", "离职率")],
        [("2026-10-01", d, 100, 3, 0.03) for d in ["研发", "销售", "财务"]],
    ),
]

# (question, the table that answers it)
QUESTIONS: list[tuple[str, str]] = [
    ("Which marketing campaigns had the highest click-through rate last week?", "mkt_campaign_daily_performance"),
    ("How many support tickets were escalated per agent last month?", "support_tickets"),
    ("上个月各仓库的库存周转天数是多少？", "inv_warehouse_stock_snapshot"),
    ("What is the average shipping delay by carrier?", "logi_shipments"),
    ("退货最多的商品类别是哪些？", "ret_refund_requests"),
    ("How much was paid with Alipay yesterday?", "pay_transactions"),
    ("customer lifetime value by segment", "customerLifetimeValue"),
    ("各部门员工离职率的月度趋势", "hr_employee_attrition_monthly"),
]


def generated_tables(filler: int = 500, seed: int = 17) -> list[Table]:
    """``filler`` look-alike tables across the domains, then the targets."""
    rng = random.Random(seed)
    tables: dict[str, Table] = {}
    while len(tables) < filler:
        prefix = rng.choice(list(_DOMAINS))
        label, entities = _DOMAINS[prefix]
        entity = rng.choice(entities)
        name = f"{prefix}_{entity}_{rng.choice(_SUFFIXES)}"
        if name in tables:
            continue
        words = entity.replace("_", " ")
        columns = [
            (f"{entity}_id", "bigint", None),
            ("status", "text", None),
            ("amount", "numeric(12,2)", None),
            ("created_at", "timestamptz", None),
            (f"{rng.choice(entities)}_ref", "text", None),
            (f"{rng.choice(['region', 'channel', 'owner', 'source_system'])}", "text", None),
        ]
        rows = [(i, rng.choice(_STATUSES), rng.random() * 100, "2026-11-01", f"R{i}", f"v{i % 3}") for i in range(5)]
        tables[name] = Table(name, f"{label}: {words} records", columns, rows)
    return [*tables.values(), *TARGETS]


@dataclass(frozen=True)
class Warehouse:
    schema: str
    role: str
    url: str  # the read-only role's URL


@contextmanager
def warehouse(
    tables: list[Table], *, analyze: bool = True, admin_url: str = ADMIN_URL, constraints: Sequence[str] = ()
) -> Iterator[Warehouse]:
    """Create the tables in a new schema with a read-only login role; drop both afterwards.
    ``constraints``: ALTER TABLE statements run after creation, ``{schema}`` standing for the
    schema (declared keys)."""
    suffix = uuid.uuid4().hex[:8]
    schema, role = f"catalog_wh_{suffix}", f"catalog_ro_{suffix}"
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
        create_tables(conn, schema, tables)
        for statement in constraints:
            conn.execute(statement.format(schema=f'"{schema}"'))
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
        conn.execute(f'GRANT USAGE ON SCHEMA "{schema}" TO "{role}"')
        conn.execute(f'GRANT SELECT ON ALL TABLES IN SCHEMA "{schema}" TO "{role}"')
        conn.execute(f'ALTER DEFAULT PRIVILEGES IN SCHEMA "{schema}" GRANT SELECT ON TABLES TO "{role}"')
        if analyze:  # what autovacuum does to a real warehouse
            for table in tables:
                conn.execute(sql.SQL("ANALYZE {}").format(sql.Identifier(schema, table.name)))
    try:
        yield Warehouse(schema, role, f"postgresql://{role}@127.0.0.1:5432/test")
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA "{schema}" CASCADE')
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


def create_tables(conn: psycopg.Connection, schema: str, tables: list[Table]) -> None:
    with conn.transaction(), conn.cursor() as cursor:
        for table in tables:
            relation = sql.Identifier(schema, table.name)
            columns = sql.SQL(", ").join(
                sql.SQL("{} {}").format(sql.Identifier(name), sql.SQL(type_name)) for name, type_name, _ in table.columns
            )
            cursor.execute(sql.SQL("CREATE TABLE {} ({})").format(relation, columns))
            if table.comment:
                cursor.execute(sql.SQL("COMMENT ON TABLE {} IS {}").format(relation, sql.Literal(table.comment)))
            for name, _, comment in table.columns:
                if comment:
                    target = sql.Identifier(schema, table.name, name)
                    cursor.execute(sql.SQL("COMMENT ON COLUMN {} IS {}").format(target, sql.Literal(comment)))
            if table.rows:
                marks = sql.SQL(", ").join([sql.Placeholder()] * len(table.columns))
                cursor.executemany(sql.SQL("INSERT INTO {} VALUES ({})").format(relation, marks), table.rows)
