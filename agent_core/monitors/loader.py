"""The operators' monitors file (``BA_MONITORS_FILE``): YAML in, checked monitors out.

Read once at start-up; every problem is reported with its line, so the start-up error alone
says what to fix::

    monitors:
      - name: gmv-by-region
        metric: gmv
        dimensions: [region, channel, category]
        cron: "0 9 * * *"
        timezone: Asia/Shanghai
        platform: slack
        workspace: T0123
        channel: C0SALESOPS
        creator: U0OPS        # whose data permissions apply

Scalars are read as written (YAML 1.1 would read ``no`` as false); duplicate keys and repeated
monitor names are refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from agent_core.monitors.model import Monitor, MonitorSpec

_NULL_TAG = "tag:yaml.org,2002:null"
_Lines = dict[tuple[str | int, ...], int]


class MonitorFileError(ValueError):
    """The monitors file cannot be used; each problem names its line. A ValueError, so a
    settings validator reports it like any other invalid setting."""

    def __init__(self, path: Path, problems: list[tuple[int | None, str]]) -> None:
        self.problems = problems
        where = "; ".join(f"line {line}: {text}" if line else text for line, text in problems)
        super().__init__(f"{path}: {where}")


def load_monitors(path: Path) -> list[Monitor]:
    """The monitors of ``path``; raises `MonitorFileError` listing every problem."""
    try:
        root = yaml.compose(path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, UnicodeDecodeError) as exc:
        raise MonitorFileError(path, [(None, f"cannot be read ({exc})")]) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        raise MonitorFileError(path, [(mark.line + 1 if mark else None, f"is not valid YAML: {exc.problem}")]) from None
    lines: _Lines = {}
    problems: list[tuple[int | None, str]] = []
    data = _plain(root, (), lines, problems) if root is not None else {}
    if not isinstance(data, dict) or not isinstance(data.get("monitors", []), list):
        raise MonitorFileError(path, [(lines.get(()), "expected `monitors:` with a list of monitors")])
    unknown = sorted(set(data) - {"monitors"})
    problems += [(lines.get((key,)), f"{key!r} is not a setting of the monitors file") for key in unknown]
    monitors: list[Monitor] = []
    seen: set[str] = set()
    for index, item in enumerate(data.get("monitors") or []):
        at: tuple[str | int, ...] = ("monitors", index)
        try:
            spec = MonitorSpec.model_validate(item)
            spec.trigger_check()
        except ValidationError as exc:
            for err in exc.errors():
                field = ".".join(str(part) for part in err["loc"])
                line = lines.get((*at, *err["loc"][:1]), lines.get(at))
                message = "is not a monitor setting (check the spelling)" if err["type"] == "extra_forbidden" else err["msg"]
                problems.append((line, f"monitors[{index}].{field}: {message}" if field else f"monitors[{index}]: {message}"))
            continue
        except ValueError as exc:  # the cron expression or the time zone
            problems.append((lines.get((*at, "cron"), lines.get(at)), f"monitors[{index}]: {exc}"))
            continue
        if spec.name in seen:
            problems.append((lines.get((*at, "name")), f"monitors[{index}]: the name {spec.name!r} is used twice"))
            continue
        seen.add(spec.name)
        monitors.append(Monitor(**spec.model_dump(), origin="file"))
    if problems:
        raise MonitorFileError(path, problems)
    return monitors


def _plain(node: yaml.Node, where: tuple[str | int, ...], lines: _Lines, problems: list[tuple[int | None, str]]) -> Any:
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
            elif key_node.value in result:
                problems.append((line, f"{key_node.value!r} is given twice"))
            else:
                lines[(*where, key_node.value)] = line
                result[key_node.value] = _plain(value_node, (*where, key_node.value), lines, problems)
        return result
    problems.append((node.start_mark.line + 1, "YAML aliases and tags are not supported here"))
    return None
