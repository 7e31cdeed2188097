"""Verified example queries: question → SQL pairs an operator checked, from ``BA_EXAMPLES_FILE``.

The file is YAML::

    examples:
      - question: Weekly GMV by region over the last quarter
        source: dwh                      # a BA_DATASOURCES name; omit for demo/uploaded data
        sql: |
          SELECT date_trunc('week', order_date) AS week, region, SUM(amount) AS gmv
          FROM sales.orders GROUP BY 1, 2 ORDER BY 1, 2

`search_schema` returns the examples closest to a question beside the tables, and only those
whose source the conversation may use. An invalid file stops start-up with its path, the line
of the offending example and the reason.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent_core.data.errors import DataSourceConfigError


class ExamplesFileError(DataSourceConfigError):
    """``BA_EXAMPLES_FILE`` cannot be used; the message names the file, line and reason."""


class VerifiedExample(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    question: str = Field(min_length=3, max_length=2000)
    sql: str = Field(min_length=6, max_length=20_000)
    source: str | None = None


class _ExamplesFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    examples: list[VerifiedExample]


def load_examples(path: Path, sources: Collection[str]) -> list[VerifiedExample]:
    """The examples of ``path``; ``sources`` are the configured source names an example may name.

    Raises :class:`ExamplesFileError`.
    """
    import yaml  # only when an examples file is configured

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ExamplesFileError(f"BA_EXAMPLES_FILE {path}: cannot be read ({error})") from None
    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        reason = getattr(error, "problem", None) or str(error)
        raise ExamplesFileError(f"BA_EXAMPLES_FILE {path}{where}: not valid YAML ({reason})") from None
    try:
        parsed = _ExamplesFile.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        line = _line_of(node, first["loc"])
        field = ".".join(str(part) for part in first["loc"]) or "file"
        raise ExamplesFileError(f"BA_EXAMPLES_FILE {path}:{line}: {field}: {first['msg']}") from None
    for number, example in enumerate(parsed.examples):
        if example.source is not None and example.source not in sources:
            known = ", ".join(sorted(sources)) or "none configured"
            line = _line_of(node, ("examples", number, "source"))
            raise ExamplesFileError(
                f"BA_EXAMPLES_FILE {path}:{line}: examples.{number}.source: no data source "
                f"{example.source!r} in BA_DATASOURCES (sources: {known})"
            )
    return parsed.examples


def _line_of(node: Any, loc: tuple[int | str, ...]) -> int:
    """The 1-based line of the deepest YAML node ``loc`` reaches (pydantic's error location)."""
    import yaml

    line = node.start_mark.line if node is not None else 0
    for part in loc:
        if isinstance(node, yaml.MappingNode):
            node = next((value for key, value in node.value if key.value == part), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
        else:
            break
        if node is None:
            break
        line = node.start_mark.line
    return line + 1


def tables_read(sql: str) -> set[tuple[str | None, str]]:
    """The (schema, table) pairs an example's SQL reads, lower-cased (nothing when it does not
    parse): the example's question then also describes those tables."""
    import sqlglot
    from sqlglot import exp

    try:
        trees = sqlglot.parse(sql)
    except sqlglot.errors.SqlglotError:
        return set()
    return {
        ((table.db or None) and table.db.lower(), table.name.lower())
        for tree in trees
        if tree is not None
        for table in tree.find_all(exp.Table)
        if table.name
    }
