"""`ba-agent tool run NAME --json '{...}'`: one tool, outside any conversation, raw JSON out.

Only the agent core's tools are loaded (no platform SDK, no model client), so it starts fast.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from pydantic import BaseModel, ValidationError

from agent_core.tools.base import ToolContext, ToolError
from agent_core.tools.catalog import default_tools
from gateway.config import Settings


def _jsonable(raw: Any) -> Any:
    if isinstance(raw, BaseModel):
        return raw.model_dump(mode="json")
    if isinstance(raw, list):
        return [_jsonable(item) for item in raw]
    if isinstance(raw, dict):
        return {key: _jsonable(value) for key, value in raw.items()}
    return raw


async def run_tool(settings: Settings, name: str, raw_input: str, thread_id: str) -> int:
    """Run tool `name`; exit code 0 on success, 1 for a tool error, 2 for bad input."""
    tools = {tool.name: tool for tool in default_tools(settings)}
    tool = tools.get(name)
    if tool is None:
        print(f"ba-agent: unknown tool {name!r} (tools: {', '.join(sorted(tools))})", file=sys.stderr)
        return 2
    try:
        args = tool.Input.model_validate(json.loads(raw_input))
    except (json.JSONDecodeError, ValidationError) as exc:
        print(f"ba-agent: invalid input for {name}: {exc}", file=sys.stderr)
        return 2
    ctx = ToolContext(thread_id=thread_id, data_dir=settings.data_dir, channel="cli", user="operator")
    try:
        raw = await tool.run(args, ctx)
    except ToolError as exc:
        print(json.dumps({"error": {"type": exc.error_type.value, "message": str(exc)}}, ensure_ascii=False))
        return 1
    print(json.dumps(_jsonable(raw), ensure_ascii=False, default=str, indent=2))
    return 0
