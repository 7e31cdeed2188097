"""Reading the access policy file: YAML with line numbers in, a checked `AccessPolicy` out.

Every problem is reported with the line it is on, so an operator can fix the file from the
start-up error alone (the file is read by `agent_core.yaml_lines`: scalars as written,
duplicate keys refused).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent_core.governance.errors import PolicyFileError
from agent_core.governance.policy import DEFAULT_GROUP, AccessPolicy, TablePolicy
from agent_core.governance.row_filter import RowFilterError, parse_row_filter
from agent_core.yaml_lines import Problems, Where, line_of, read_lined_yaml


def load_policy(path: Path, source_dialects: Mapping[str, str] | None = None) -> AccessPolicy:
    """The policy in ``path``, checked; raises :class:`PolicyFileError` listing every problem.

    ``source_dialects`` maps each configured data source to its SQL dialect (duckdb, postgres,
    mysql): row filters are checked in their source's dialect, and a policy for a source that
    is not configured is refused (a misspelt name would otherwise leave the real one open).
    Without it, filters are checked in sqlglot's generic dialect and source names are not.
    """
    read = read_lined_yaml(path, PolicyFileError)
    if read.problems:
        raise PolicyFileError(path, read.problems)
    lines = read.lines
    try:
        policy = AccessPolicy.model_validate(read.data)
    except ValidationError as exc:
        raise PolicyFileError(path, _validation_problems(exc, lines)) from None
    problems = _reference_problems(policy, lines, source_dialects)
    if problems:
        raise PolicyFileError(path, sorted(problems, key=lambda p: (p[0] is None, p[0] or 0)))
    return policy


# --- problems, with their lines ---------------------------------------------------------------


def _validation_problems(exc: ValidationError, lines: Mapping[Where, int]) -> Problems:
    problems: Problems = []
    for err in exc.errors():
        loc = tuple(part for part in err["loc"] if part != "[key]")
        name = ".".join(str(part) for part in loc) or "the file"
        message = err["msg"]
        if err["type"] == "string_pattern_mismatch":
            message = _pattern_help(loc, err["input"])
        elif err["type"] == "extra_forbidden":
            message = "is not a setting of the policy file (check the spelling)"
        problems.append((line_of(lines, loc), f"{name}: {message}"))
    return problems


def _pattern_help(loc: tuple[str | int, ...], value: Any) -> str:
    if loc and loc[0] == "channels" and len(loc) == 2:
        return f"{value!r} is not a channel as platform:channel_id (the platform's name, a colon, its channel id)"
    if loc and loc[0] == "groups" and len(loc) == 3:
        return f"{value!r} is not a member as platform:user_id (the platform's name, a colon, the user's id)"
    if len(loc) >= 4 and loc[2] == "tables" and len(loc) == 4:
        return f"{value!r} is not a table name (table or schema.table)"
    return f"{value!r} is not a valid name (letters, digits, '_', '.', '-')"


# --- cross-references -------------------------------------------------------------------------


def _reference_problems(
    policy: AccessPolicy, lines: Mapping[Where, int], source_dialects: Mapping[str, str] | None
) -> Problems:
    """Names that must refer to something: groups, sources, granted columns; row filters."""
    problems: Problems = []
    if DEFAULT_GROUP in policy.groups:
        problems.append(
            (line_of(lines, ("groups", DEFAULT_GROUP)), "groups.default: everyone is in the "
             "default group; it cannot list members")
        )
    known = set(policy.groups) | {DEFAULT_GROUP}

    def check_group(group: str, where: Where) -> None:
        if group not in known:
            listed = ", ".join(sorted(known))
            problems.append(
                (line_of(lines, where), f"{_dotted(where)}: unknown group {group!r} (groups: {listed})")
            )

    for channel, group in policy.channels.items():
        check_group(group, ("channels", channel))
    for name, metric in policy.metrics.items():
        if metric.approvers is not None:
            check_group(metric.approvers, ("metrics", name, "approvers"))
    for name, source in policy.sources.items():
        at = ("sources", name)
        if source_dialects is not None and name not in source_dialects:
            configured = ", ".join(sorted(source_dialects)) or "none"
            problems.append(
                (line_of(lines, at), f"sources.{name}: no data source of that name is configured "
                 f"in BA_DATASOURCES (configured: {configured})")
            )
        dialect = (source_dialects or {}).get(name, "")
        for i, group in enumerate(source.groups):
            check_group(group, (*at, "groups", i))
        if source.approvers is not None:
            check_group(source.approvers, (*at, "approvers"))
        names_seen: dict[str, str] = {}
        for table_name, table in source.tables.items():
            where = (*at, "tables", table_name)
            folded = table_name.casefold()
            bare = folded.rpartition(".")[2]
            for other_folded, other in names_seen.items():
                same_bare = other_folded.rpartition(".")[2] == bare
                if same_bare and ("." not in other_folded or "." not in folded or other_folded == folded):
                    problems.append(
                        (line_of(lines, where), f"{_dotted(where)}: {table_name!r} and {other!r} "
                         "can name the same table; keep one (qualify both with their schemas to "
                         "protect same-named tables of different schemas)")
                    )
            names_seen[folded] = table_name
            problems += _table_problems(table, where, lines, dialect, check_group)
    return problems


def _table_problems(
    table: TablePolicy,
    where: Where,
    lines: Mapping[Where, int],
    dialect: str,
    check_group: Callable[[str, Where], None],
) -> Problems:
    problems: Problems = []
    for group, condition in (table.row_filters or {}).items():
        at = (*where, "row_filters", group)
        check_group(group, at)
        try:
            parse_row_filter(condition, dialect)
        except RowFilterError as exc:
            problems.append((line_of(lines, at), f"{_dotted(at)}: the row filter {exc}"))
    hidden = {column.casefold() for column in table.hidden_columns}
    for group, columns in table.column_grants.items():
        at = (*where, "column_grants", group)
        check_group(group, at)
        for i, column in enumerate(columns):
            if column.casefold() not in hidden:
                problems.append(
                    (line_of(lines, (*at, i)), f"{_dotted(at)}: {column!r} is not in hidden_columns, "
                     "so there is nothing to grant")
                )
    return problems


def _dotted(where: Where) -> str:
    return ".".join(str(part) for part in where)
