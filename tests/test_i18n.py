"""The message catalog and the choice of language: every text the bot writes has its Simplified
Chinese translation, with the same placeholders, and a reply's language follows the user's
locale, else what they wrote."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest
from babel.messages.extract import extract_from_dir
from babel.messages.frontend import parse_keywords
from babel.messages.pofile import read_po

from agent_core.config import BudgetConfig
from agent_core.i18n import Language, catalog_path, language_of_locale, reply_language, t
from agent_core.messages import ToolUseBlock
from agent_core.provenance import DataAccess, Provenance, ProvenanceWords, TimeRange
from agent_core.state import ThreadUsage
from agent_core.tokens.budget import check_budget
from agent_core.toolkit.progress import step_title

ROOT = Path(__file__).resolve().parent.parent
_FIELD = re.compile(r"\{(\w*)[^{}]*\}")


def _msgids_in_code() -> set[str]:
    """Every msgid the code passes to the catalog, extracted as `pybabel extract` does with the
    keywords configured in pyproject's [tool.babel]."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["babel"]
    [mapping] = config["mappings"]
    keywords = parse_keywords(mapping["keywords"])
    found: set[str] = set()
    for package in ("agent_core", "gateway", "adapters"):
        for _file, _line, message, _comments, _context in extract_from_dir(
            ROOT / package, method_map=[(mapping["pattern"], mapping["method"])], keywords=keywords
        ):
            assert isinstance(message, str), f"{_file}:{_line}: a msgid must be one literal string"
            found.add(message)
    return found


def _chinese_catalog() -> dict[str, str]:
    with catalog_path(Language.ZH_HANS).open("rb") as po:
        catalog = read_po(po)
    return {str(m.id): str(m.string) for m in catalog if m.id and not m.fuzzy and m.string}


def test_every_text_in_the_code_has_a_chinese_translation_with_the_same_placeholders() -> None:
    in_code = _msgids_in_code()
    translated = _chinese_catalog()
    assert len(in_code) >= 25  # the extraction found the wrapped texts
    assert sorted(in_code - translated.keys()) == [], "untranslated: run pybabel extract/update (agent_core/i18n.py)"
    assert sorted(translated.keys() - in_code) == [], "translations of texts the code no longer has"
    for msgid, text in translated.items():
        assert set(_FIELD.findall(text)) == set(_FIELD.findall(msgid)), msgid


def test_texts_come_out_in_the_language_asked_for() -> None:
    assert t(Language.EN, "Running {tool}…", tool="sql_query") == "Running sql_query…"
    assert t(Language.ZH_HANS, "Running {tool}…", tool="sql_query") == "正在运行 sql_query…"
    # A text the catalog does not know yet shows in English rather than failing.
    assert t(Language.ZH_HANS, "A sentence nobody translated ({n})", n=1) == "A sentence nobody translated (1)"


@pytest.mark.parametrize(
    ("locale", "written", "expected"),
    [
        ("zh-CN", "how did GMV do?", Language.ZH_HANS),  # the platform's locale wins
        ("zh_TW", "hello", Language.ZH_HANS),
        ("en-US", "上周 GMV 怎么样？", Language.EN),
        (None, "上周华东区的 GMV 怎么样？", Language.ZH_HANS),  # no locale: what they wrote
        (None, "查询 dwh.orders 的 GMV", Language.ZH_HANS),  # table names do not make it English
        (None, "Show GMV for the 华东 region", Language.EN),
        ("fr-FR", "上周 GMV 怎么样？", Language.ZH_HANS),  # a locale without a catalog: what they wrote
        ("fr-FR", "Quel est le GMV ?", Language.EN),
        (None, "こんにちは", Language.EN),  # kana is not Chinese
        (None, "", Language.EN),
    ],
)
def test_the_reply_language_follows_the_locale_else_the_message(
    locale: str | None, written: str, expected: Language
) -> None:
    assert reply_language(locale, written) is expected


def test_locales_name_their_language() -> None:
    assert language_of_locale("zh-Hans-CN") is Language.ZH_HANS
    assert language_of_locale("EN_gb") is Language.EN
    assert language_of_locale("ja-JP") is None
    assert language_of_locale(None) is None


def test_the_provenance_line_reads_in_chinese() -> None:
    access = DataAccess(
        source="demo",
        tables=["sales"],
        metrics=["gmv"],
        time_range=TimeRange(start="2026-10-01", end="2026-10-31", grain="day"),
        freshness="2026-10-31",
        rows=31,
        truncated=True,
        sql="SELECT 1 FROM sales",
    )
    provenance = Provenance.of([access, access.model_copy(update={"sql": "SELECT 2 FROM sales"})])
    assert provenance is not None
    assert provenance.summary_line(ProvenanceWords.of(Language.ZH_HANS)) == (
        "来源: demo (sales) · 指标: gmv · 时间范围: 2026-10-01 至 2026-10-31 按日 · 数据截至 2026-10-31"
        " · 62+ 行 来自 2 次查询"
    )
    listing = provenance.sql_listing(ProvenanceWords.of(Language.ZH_HANS), max_chars=10)
    assert listing.endswith("-- （在此截断：还有 48 个字符）")


async def test_a_used_up_budget_is_told_in_chinese() -> None:
    usage = ThreadUsage(input_tokens=5_000, output_tokens=1_000)
    message = await check_budget(BudgetConfig(per_conversation_tokens=1_000), usage=usage, language=Language.ZH_HANS)
    assert message is not None
    assert message.startswith("本次对话已用完 token 预算（已用 ")
    assert "/ 1,000 tokens）" in message


def test_a_feishu_approval_card_reads_in_chinese_before_and_after_the_decision() -> None:
    from adapters.feishu.approval_card import approval_card
    from agent_core.governance.approval import ApprovalStatus, ApprovalView
    from agent_core.state import ApprovalRequest

    request = ApprovalRequest(
        tool_use_id="toolu_1", tool_name="sql_query", source="dwh", tables=["orders"], estimated_rows=12_000,
        sql="SELECT 1", reasons=["large scan"], approvers_group="finance",
    )  # fmt: skip
    view = ApprovalView(id="a1", request=request, asker="ou_alice")
    pending = json.dumps(approval_card(view, Language.ZH_HANS), ensure_ascii=False)
    assert "需要审批" in pending and "预计扫描：** 约 12,000 行" in pending
    assert "<at id=ou_alice></at> 或 `finance` 的成员" in pending
    decided = view.model_copy(update={"status": ApprovalStatus.APPROVED, "decided_by": "ou_fin"})
    shown = json.dumps(approval_card(decided, Language.ZH_HANS), ensure_ascii=False)
    assert "已批准" in shown and "已由 <at id=ou_fin></at> 批准" in shown


def test_progress_lines_say_what_a_step_does_in_the_users_language() -> None:
    def title(name: str, language: Language, **args: object) -> str:
        return step_title(ToolUseBlock(id="toolu_1", name=name, input=args), language)

    assert title("sql_query", Language.EN, sql="SELECT 1", source="dwh") == "Querying dwh…"
    assert title("sql_query", Language.ZH_HANS, sql="SELECT 1", source="dwh") == "正在查询 dwh…"
    assert title("query_metric", Language.EN, metrics=["gmv", "aov"]) == "Computing gmv, aov…"
    assert title("attribute_change", Language.ZH_HANS, metric="gmv") == "正在分析 gmv 变化的原因…"
    assert title("detect_anomalies", Language.EN) == "Looking for anomalies…"
    # A tool without a title of its own is named, never described wrongly.
    assert title("write_file", Language.ZH_HANS, path="/data/x.csv") == "正在运行 write_file…"
