"""Reading the access policy file: YAML with line numbers in, a checked `AccessPolicy` out.

Every problem is reported with the line it is on, so an operator can fix the file from the
start-up error alone. Scalars are read as the text written (YAML 1.1 would turn a group called
``no`` into false, or ``slack:1:20`` into a number); duplicate keys are refused rather than
silently keeping the last one, since in a permission file that hides a mistake.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from agent_core.governance.errors import PolicyFileError
from agent_core.governance.policy import DEFAULT_GROUP, AccessPolicy, TablePolicy
from agent_core.governance.row_filter import RowFilterError, parse_row_filter

_Path = tuple[str | int, ...]
_Problems = list[tuple[int | None, str]]
_NULL_TAG = "tag:yaml.org,2002:null"


def load_policy(path: Path, source_dialects: Mapping[str, str] | None = None) -> AccessPolicy:
    """The policy in ``path``, checked; raises :class:`PolicyFileError` listing every problem.

    ``source_dialects`` maps each configured data source to its SQL dialect (duckdb, postgres,
    mysql): row filters are checked in their source's dialect, and a policy for a source that
    is not configured is refused (a misspelt name would otherwise leave the real one open).
    Without it, filters are checked in sqlglot's generic dialect and source names are not.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise PolicyFileError(path, [(None, f"cannot be read ({exc})")]) from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise PolicyFileError(path, [(line, f"is not valid YAML: {exc.problem or exc}")]) from None
    except yaml.YAMLError as exc:
        raise PolicyFileError(path, [(None, f"is not valid YAML: {exc}")]) from None
    lines: dict[_Path, int] = {}
    problems: _Problems = []
    data = _plain(root, (), lines, problems) if root is not None else {}
    if problems:
        raise PolicyFileError(path, problems)
    try:
        policy = AccessPolicy.model_validate(data)
    except ValidationError as exc:
        raise PolicyFileError(path, _validation_problems(exc, lines)) from None
    problems = _reference_problems(policy, lines, source_dialects)
    if problems:
        raise PolicyFileError(path, sorted(problems, key=lambda p: (p[0] is None, p[0] or 0)))
    return policy


# --- YAML nodes to data, remembering lines ----------------------------------------------------


def _plain(node: yaml.Node, where: _Path, lines: dict[_Path, int], problems: _Problems) -> Any:
    """The data of ``node``; ``lines`` gets the line of every key and list item under it."""
    lines.setdefault(where, node.start_mark.line + 1)
    if isinstance(node, yaml.ScalarNode):
        return None if node.tag == _NULL_TAG else node.value
    if isinstance(node, yaml.SequenceNode):
        return [_plain(item, (*where, i), lines, problems) for i, item in enumerate(node.value)]
    if isinstance(node, yaml.MappingNode):
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == _NULL_TAG:
                problems.append((line, "a key must be a plain name"))
                continue
            key = key_node.value
            if key in result:
                problems.append((line, f"{key!r} is given twice{_under(where)}"))
                continue
            lines[(*where, key)] = line
            result[key] = _plain(value_node, (*where, key), lines, problems)
        return result
    problems.append((node.start_mark.line + 1, "YAML aliases and tags are not supported here"))
    return None


def _under(where: _Path) -> str:
    return f" under {'.'.join(str(part) for part in where)}" if where else ""


def _line(lines: Mapping[_Path, int], where: _Path) -> int | None:
    """The line of ``where``, or of the nearest enclosing key that has one."""
    while where:
        if where in lines:
            return lines[where]
        where = where[:-1]
    return lines.get(())


def _validation_problems(exc: ValidationError, lines: Mapping[_Path, int]) -> _Problems:
    problems: _Problems = []
    for err in exc.errors():
        loc = tuple(part for part in err["loc"] if part != "[key]")
        name = ".".join(str(part) for part in loc) or "the file"
        message = err["msg"]
        if err["type"] == "string_pattern_mismatch":
            message = _pattern_help(loc, err["input"])
        elif err["type"] == "extra_forbidden":
            message = "is not a setting of the policy file (check the spelling)"
        problems.append((_line(lines, loc), f"{name}: {message}"))
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
    policy: AccessPolicy, lines: Mapping[_Path, int], source_dialects: Mapping[str, str] | None
) -> _Problems:
    """Names that must refer to something: groups, sources, granted columns; row filters."""
    problems: _Problems = []
    if DEFAULT_GROUP in policy.groups:
        problems.append(
            (_line(lines, ("groups", DEFAULT_GROUP)), "groups.default: everyone is in the "
             "default group; it cannot list members")
        )
    known = set(policy.groups) | {DEFAULT_GROUP}

    def check_group(group: str, where: _Path) -> None:
        if group not in known:
            listed = ", ".join(sorted(known))
            problems.append(
                (_line(lines, where), f"{_dotted(where)}: unknown group {group!r} (groups: {listed})")
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
                (_line(lines, at), f"sources.{name}: no data source of that name is configured "
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
                        (_line(lines, where), f"{_dotted(where)}: {table_name!r} and {other!r} "
                         "can name the same table; keep one (qualify both with their schemas to "
                         "protect same-named tables of different schemas)")
                    )
            names_seen[folded] = table_name
            problems += _table_problems(table, where, lines, dialect, check_group)
    return problems


def _table_problems(
    table: TablePolicy,
    where: _Path,
    lines: Mapping[_Path, int],
    dialect: str,
    check_group: Callable[[str, _Path], None],
) -> _Problems:
    problems: _Problems = []
    for group, condition in (table.row_filters or {}).items():
        at = (*where, "row_filters", group)
        check_group(group, at)
        try:
            parse_row_filter(condition, dialect)
        except RowFilterError as exc:
            problems.append((_line(lines, at), f"{_dotted(at)}: the row filter {exc}"))
    hidden = {column.casefold() for column in table.hidden_columns}
    for group, columns in table.column_grants.items():
        at = (*where, "column_grants", group)
        check_group(group, at)
        for i, column in enumerate(columns):
            if column.casefold() not in hidden:
                problems.append(
                    (_line(lines, (*at, i)), f"{_dotted(at)}: {column!r} is not in hidden_columns, "
                     "so there is nothing to grant")
                )
    return problems


def _dotted(where: _Path) -> str:
    return ".".join(str(part) for part in where)
