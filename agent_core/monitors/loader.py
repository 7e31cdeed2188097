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

The file is read by `agent_core.yaml_lines` (scalars as written: YAML 1.1 would read ``no`` as
false); duplicate keys and repeated monitor names are refused.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from agent_core.monitors.model import Monitor, MonitorSpec
from agent_core.yaml_lines import Where, YamlFileError, read_lined_yaml


class MonitorFileError(YamlFileError):
    """The monitors file cannot be used; each problem names its line."""


def load_monitors(path: Path) -> list[Monitor]:
    """The monitors of ``path``; raises `MonitorFileError` listing every problem."""
    read = read_lined_yaml(path, MonitorFileError)
    data, lines, problems = read.data, read.lines, read.problems
    if not isinstance(data, dict) or not isinstance(data.get("monitors", []), list):
        raise MonitorFileError(path, [(lines.get(()), "expected `monitors:` with a list of monitors")])
    unknown = sorted(set(data) - {"monitors"})
    problems += [(lines.get((key,)), f"{key!r} is not a setting of the monitors file") for key in unknown]
    monitors: list[Monitor] = []
    seen: set[str] = set()
    for index, item in enumerate(data.get("monitors") or []):
        at: Where = ("monitors", index)
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

