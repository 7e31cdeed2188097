"""Operators' YAML files read with the line of every key: the shared reader of the access
policy and monitors files, so each problem can be reported with the line it is on.

Scalars are read as the text written (YAML 1.1 would turn a group called ``no`` into false, or
``slack:1:20`` into a number); duplicate keys are problems rather than silently keeping the last
one, since in a permission file that hides a mistake.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import yaml

# Where a value sits in the file: its keys and list indexes from the top.
Where = tuple[str | int, ...]
# What is wrong, each with its line when it has one.
Problems = list[tuple[int | None, str]]
_NULL_TAG = "tag:yaml.org,2002:null"


class YamlFileError(ValueError):
    """An operator's file cannot be used; each problem names its line.

    A ValueError so that a settings validator reports it like any other invalid setting.
    """

    def __init__(self, path: Path, problems: Problems) -> None:
        self.path = path
        self.problems = problems
        where = "; ".join(
            f"line {line}: {reason}" if line is not None else reason for line, reason in problems
        )
        super().__init__(f"{path}: {where}")


@dataclass
class LinedYaml:
    """A file's data (plain dicts, lists and strings), the line of every key and list item, and
    the problems met reading it (duplicate keys, aliases, tags): the caller decides when to stop."""

    data: Any
    lines: dict[Where, int] = field(default_factory=dict)
    problems: Problems = field(default_factory=list)


def read_lined_yaml(path: Path, error: type[YamlFileError]) -> LinedYaml:
    """The YAML in ``path`` with its lines; raises ``error`` when it cannot be read or parsed."""
    import yaml  # here: commands that read no operator file start without it

    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise error(path, [(None, f"cannot be read ({exc})")]) from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        raise error(path, [(line, f"is not valid YAML: {exc.problem or exc}")]) from None
    except yaml.YAMLError as exc:
        raise error(path, [(None, f"is not valid YAML: {exc}")]) from None
    read = LinedYaml(data={})
    if root is not None:
        read.data = _plain(root, (), read.lines, read.problems)
    return read


def line_of(lines: Mapping[Where, int], where: Where) -> int | None:
    """The line of ``where``, or of the nearest enclosing key that has one."""
    while where:
        if where in lines:
            return lines[where]
        where = where[:-1]
    return lines.get(())


def _plain(node: yaml.Node, where: Where, lines: dict[Where, int], problems: Problems) -> Any:
    """The data of ``node``; ``lines`` gets the line of every key and list item under it."""
    import yaml

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


def _under(where: Where) -> str:
    return f" under {'.'.join(str(part) for part in where)}" if where else ""
