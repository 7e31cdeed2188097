"""`ba-agent tool run NAME --json '{...}'`: one tool, outside any conversation, raw JSON out.

Only the agent core's tools are loaded (no platform SDK, no model client), so it starts fast.
With data sources configured, the service database is opened too: queries on the sources are
recorded in the data-access audit trail as the person the tool runs as (the operator, or
``--platform``/``--user``), and the daily row limit applies to them as in a chat.
"""

from __future__ import annotations

import asyncio
import gc
import json
import re
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ValidationError

from agent_core.messages import new_id
from agent_core.run_context import ChatOrigin, RunContext
from agent_core.toolkit.pipeline import validation_message
from agent_core.toolkit.protocol import ToolError
from agent_core.tools.deps import ToolDeps
from agent_core.tools.standard import STANDARD_TOOLS, build_tool, standard_tools
from agent_core.workspace.local import use_object_storage
from gateway.config import Settings

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import async_sessionmaker
    from sqlmodel.ext.asyncio.session import AsyncSession

    from agent_core.governance.access import SourceAccess
    from agent_core.governance.audit import AuditTrail

SEARCH_SCHEMA = "search_schema"  # built with the service database, beside the other tools


def _jsonable(raw: Any) -> Any:
    if isinstance(raw, BaseModel):
        return raw.model_dump(mode="json")
    if isinstance(raw, list):
        return [_jsonable(item) for item in raw]
    if isinstance(raw, dict):
        return {key: _jsonable(value) for key, value in raw.items()}
    return raw


RunAs = tuple[str | None, str | None, str | None]  # platform, user, channel as given


async def run_tool(
    settings: Settings, name: str, raw_input: str, thread_id: str, run_as: RunAs = (None, None, None)
) -> int:
    """Run tool `name`; exit code 0 on success, 1 for a tool error, 2 for bad input.

    ``run_as`` (platform, user, channel) runs it as that person in that place, so the access
    policy shows what they would see; without it, the operator runs it outside any chat (only
    what the policy opens to the ``default`` group).
    """
    try:
        ctx = _context(settings, thread_id, run_as)
    except ValueError as exc:
        print(f"ba-agent: {exc}", file=sys.stderr)
        return 2
    if name == SEARCH_SCHEMA and not settings.datasources:
        print(f"ba-agent: {SEARCH_SCHEMA} searches the data sources' catalog: set BA_DATASOURCES", file=sys.stderr)
        return 2
    if name not in STANDARD_TOOLS:
        print(f"ba-agent: unknown tool {name!r} (tools: {', '.join(sorted(STANDARD_TOOLS))})", file=sys.stderr)
        return 2
    use_object_storage(settings.workspace_url, settings.s3_endpoint_url)
    async with service_audit(settings) as audit, service_sessions(settings, name == SEARCH_SCHEMA) as sessions:
        tool = build_tool(ToolDeps(settings, sessions, _governed(settings, audit)), name)
        assert tool is not None
        with collecting_new_garbage():
            try:
                args = tool.Input.model_validate(json.loads(raw_input))
            except json.JSONDecodeError as exc:
                print(f"ba-agent: invalid input for {name}: not JSON ({exc})", file=sys.stderr)
                return 2
            except ValidationError as exc:
                print(f"ba-agent: invalid input for {name}: {validation_message(exc)}", file=sys.stderr)
                return 2
            try:
                raw = await tool.run(args, replace(ctx, tool_name=name))
            except ToolError as exc:
                print(json.dumps({"error": {"type": exc.error_type.value, "message": str(exc)}}, ensure_ascii=False))
                return 1
    print(json.dumps(_jsonable(raw), ensure_ascii=False, default=str, indent=2))
    return 0


def list_tools(settings: Settings, as_json: bool) -> int:
    """`ba-agent tool list`: each tool `tool run` knows (`search_schema` once data sources are
    configured): its name, what it does and its input fields (the JSON schema the model is
    given, with ``--json``)."""
    specs = asyncio.run(_tool_specs(settings))
    if as_json:
        print(json.dumps(specs, ensure_ascii=False, indent=2))
        return 0
    for spec in specs:
        schema = spec["input_schema"]
        required = set(schema.get("required", ()))
        summary = re.split(r"(?<=\.)\s", spec["description"].strip(), maxsplit=1)[0]
        print(f"{spec['name']}\n    {summary}")
        for field, details in schema.get("properties", {}).items():
            flag = "required" if field in required else "optional"
            print(f"    {field}: {_type_of(details)}, {flag}")
    return 0


def _type_of(details: dict[str, Any]) -> str:
    """A JSON schema property's type in a few words (``string``, ``array of string``, ``a | b``)."""
    if "enum" in details:
        return " | ".join(json.dumps(value) for value in details["enum"])
    if "anyOf" in details:
        return " or ".join(_type_of(option) for option in details["anyOf"] if option.get("type") != "null")
    if details.get("type") == "array":
        return f"array of {_type_of(details.get('items', {}))}"
    return str(details.get("type") or details.get("$ref", "any").rsplit("/", 1)[-1])


@contextmanager
def collecting_new_garbage() -> Iterator[None]:
    """The cyclic collector on for the tool's own garbage only (see `gateway.cli.main.main`).

    What loading built lives until exit: frozen, collections skip it instead of scanning it
    all on their first pass. It is thawed afterwards, so exit still releases it, as the DuckDB
    extension expects of its objects.
    """
    gc.freeze()
    gc.enable()
    try:
        yield
    finally:
        gc.disable()
        gc.unfreeze()


def _governed(settings: Settings, audit: AuditTrail | None) -> SourceAccess | None:
    """The governed path to the sources, audited in the service database (None without data
    sources: nothing to govern, and the policy machinery stays unloaded)."""
    if audit is None:
        return None
    from agent_core.governance.access import SourceAccess

    return SourceAccess(settings.datasources, settings.access_policy, audit)


async def _tool_specs(settings: Settings) -> list[dict[str, Any]]:
    async with service_sessions(settings, True) as sessions:  # built, never queried
        return [tool.spec() for tool in standard_tools(ToolDeps(settings, sessions))]


@asynccontextmanager
async def service_sessions(settings: Settings, needed: bool) -> AsyncIterator[async_sessionmaker[AsyncSession] | None]:
    """Sessions of the service database (where the schema catalog lives; `service_audit`
    migrated it) when ``needed`` and data sources are configured, else None."""
    if not needed or not settings.datasources:
        yield None
        return
    from agent_core.store.db import create_engine, session_factory

    engine = create_engine(settings.effective_database_url)
    try:
        yield session_factory(engine)
    finally:
        await engine.dispose()


@asynccontextmanager
async def service_audit(settings: Settings) -> AsyncIterator[AuditTrail | None]:
    """The audit trail in the service database (``DATABASE_URL`` or the SQLite default), when
    data sources are configured; None otherwise (nothing to audit, nothing opened).

    The database is migrated first, as `serve` does: a first `tool run` on a new install has
    the audit table to write to (and without one, every query on a source would be refused).
    """
    if not settings.datasources:
        yield None
        return
    from agent_core.governance.audit import audit_trail
    from agent_core.store.db import create_engine, session_factory
    from gateway.migrate_check import is_current

    if not await asyncio.to_thread(is_current, settings.effective_database_url):
        from gateway.migrate import upgrade

        await asyncio.to_thread(upgrade, settings.effective_database_url)
    engine = create_engine(settings.effective_database_url)
    try:
        yield audit_trail(session_factory(engine), settings.datasources, settings.user_daily_rows)
    finally:
        await engine.dispose()


def _context(settings: Settings, thread_id: str, run_as: RunAs) -> RunContext:
    platform, user, channel = run_as
    call_id = f"cli_{new_id()}"  # names this run in the audit trail, as a model's call id would
    if platform is None and user is None and channel is None:
        return RunContext(
            thread_id=thread_id, data_dir=settings.data_dir, channel="cli", user="operator", tool_call_id=call_id
        )
    if not platform or not user:
        raise ValueError("--platform and --user go together (and --channel needs both)")
    return RunContext(
        thread_id=thread_id,
        data_dir=settings.data_dir,
        channel=channel or "",
        user=user,
        is_dm=channel is None,
        chat=ChatOrigin(platform=platform, workspace=""),
        tool_call_id=call_id,
    )
