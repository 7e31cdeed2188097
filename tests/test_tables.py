"""Markdown answers read into blocks and tables: GFM pipe tables found outside code blocks,
parsed with their alignment, shown within each platform's table limits, split cleanly."""

from __future__ import annotations

import csv
import io
import json

from adapters.feishu import render as feishu
from adapters.markdown_tables import answer_parts, parse_table, read_blocks, split_markdown
from adapters.slack.render import MAX_PART_CHARS, answer_messages
from tests.fakes.feishu_cards import card_problem
from tests.fakes.slack_blocks import check_blocks

SALES = """GMV by region this week:

| Region | GMV (¥) | Share |
|:-------|--------:|:-----:|
| **East China** | 1,204,000 | 41% |
| North \\| Northeast | 880,500 | 30% |
| `West` | 850,000 | |

East China leads."""


def wide_table(rows: int, columns: int) -> str:
    header = "| " + " | ".join(f"c{i}" for i in range(columns)) + " |"
    rule = "|" + "---|" * columns
    body = ["| " + " | ".join(f"r{r}c{c}" for c in range(columns)) + " |" for r in range(rows)]
    return "\n".join([header, rule, *body])


def test_a_gfm_table_is_found_and_parsed_with_its_alignment() -> None:
    kinds = [b.kind for b in read_blocks(SALES)]
    assert kinds == ["text", "table", "text"]
    table = parse_table(read_blocks(SALES)[1])
    assert table.header == ["Region", "GMV (¥)", "Share"]
    assert table.rows[1] == ["North \\| Northeast", "880,500", "30%"]
    assert [table.column_align(i) for i in range(3)] == ["left", "right", "center"]
    assert list(csv.reader(io.StringIO(table.csv()))) == [
        ["Region", "GMV (¥)", "Share"],
        ["East China", "1,204,000", "41%"],
        ["North | Northeast", "880,500", "30%"],
        ["West", "850,000", ""],
    ]


def test_numbers_align_right_without_an_alignment_row_and_code_holds_no_tables() -> None:
    [_, table_block] = read_blocks("Orders:\n\n| day | orders |\n|---|---|\n| Mon | 1,200 |\n| Tue | -3.5% |")
    table = parse_table(table_block)
    assert [table.column_align(i) for i in range(2)] == ["left", "right"]
    fenced = "```\n| a | b |\n|---|---|\n| 1 | 2 |\n```"
    assert [b.kind for b in read_blocks(fenced)] == ["code"]
    assert [p.table for p in answer_parts(fenced, budget=1000)] == [None]


def test_slack_shows_a_table_as_a_table_block_without_pipes() -> None:
    [first, last] = answer_messages(SALES)
    assert "markdown_text" not in first.fields and "|" not in first.fields["text"]
    check_blocks(first.fields["blocks"])  # what Slack would accept
    lead, table = first.fields["blocks"]
    assert lead == {"type": "markdown", "text": "GMV by region this week:"}
    assert [[c["text"] for c in row] for row in table["rows"]] == [
        ["Region", "GMV (¥)", "Share"],
        ["East China", "1,204,000", "41%"],
        ["North | Northeast", "880,500", "30%"],
        ["West", "850,000", "–"],
    ]
    assert [s["align"] for s in table["column_settings"]] == ["left", "right", "center"]
    assert last.fields == {"markdown_text": "East China leads."} and first.full_table is None


def test_slack_cuts_a_wide_table_to_twenty_columns_and_attaches_the_rest() -> None:
    [message] = answer_messages(wide_table(3, 25))
    check_blocks(message.fields["blocks"])
    note, table = message.fields["blocks"]
    assert len(table["rows"]) == 4 and {len(r) for r in table["rows"]} == {20}
    assert "the first 20 of 25 columns" in note["text"]
    assert message.full_table is not None and message.full_table.csv().count("\n") == 4


def test_long_text_splits_between_blocks_never_inside_code() -> None:
    paragraph = "Revenue moved for many reasons. " * 40
    code = "```sql\n" + "\n".join(f"SELECT {i} AS n;" for i in range(60)) + "\n```"
    answer = "\n\n".join([paragraph, paragraph, code, paragraph, paragraph])
    parts = split_markdown(answer, budget=MAX_PART_CHARS)
    assert len(parts) > 1 and all(len(p) <= MAX_PART_CHARS for p in parts)
    assert sum(code in p for p in parts) == 1
    assert all(p.count("```") % 2 == 0 for p in parts)


def test_a_code_block_bigger_than_a_part_is_closed_and_reopened() -> None:
    code = "```python\n" + "\n".join(f"x{i} = {i}  # " + "y" * 60 for i in range(200)) + "\n```"
    parts = split_markdown(code, budget=MAX_PART_CHARS)
    assert len(parts) > 1
    assert all(p.startswith("```python\n") and p.endswith("\n```") for p in parts)


def test_feishu_puts_each_table_in_a_card_of_its_own() -> None:
    two = f"{SALES}\n\nAnd by channel:\n\n| Channel | Orders |\n|---|---|\n| App | 12 |\n| Web | 7 |"
    parts = feishu.card_parts(two)
    assert [p.table is not None for p in parts] == [True, True]
    assert parts[1].markdown == "East China leads.\n\nAnd by channel:"  # the text before it leads
    for part in parts:
        card = feishu.answer_card(part.markdown, None, part.table, part.full_table)
        assert card_problem(card) is None
        markdown = [e["content"] for e in card["body"]["elements"] if e["tag"] == "markdown"]
        assert "|" not in "".join(markdown)
    [table] = [e for e in feishu.answer_card(parts[0].markdown, None, parts[0].table)["body"]["elements"] if e["tag"] == "table"]
    assert [c["display_name"] for c in table["columns"]] == ["Region", "GMV (¥)", "Share"]
    assert table["rows"][1]["c0"] == "North | Northeast"


def test_feishu_cuts_a_table_too_big_for_a_card_and_its_post_has_no_pipes() -> None:
    rows = "\n".join(f"| {i} | 客户{i} {'备注' * 60} | {i * 3} |" for i in range(400))
    [part] = feishu.card_parts(f"| id | customer | orders |\n|---|---|---|\n{rows}")
    assert part.table is not None and part.full_table is not None
    assert 0 < len(part.table.rows) < 400 and len(part.full_table.rows) == 400
    card = feishu.answer_card(part.markdown, None, part.table, part.full_table)
    assert len(json.dumps(card, ensure_ascii=False).encode()) <= feishu.MAX_CARD_BYTES
    assert f"of 400 rows; the full table follows as {part.full_table.csv_name()}" in json.dumps(card, ensure_ascii=False)
    post = feishu.part_markdown(feishu.card_parts(SALES)[0])
    assert "|" not in post.replace("North | Northeast", "") and "East China" in post
