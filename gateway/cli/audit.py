"""`ba-agent audit`: the data-access audit trail (who tried to query which source, with what
outcome, the SQL as it ran, rows, duration, approval, conversation and tool call), newest last.

The database layer is imported inside the command, so registering it costs the others nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from gateway.config import load_settings

if TYPE_CHECKING:
    from agent_core.governance.audit import AuditEntry

_RELATIVE = re.compile(r"(\d+)\s*([mhd])")
_UNITS = {"m": "minutes", "h": "hours", "d": "days"}


def register(commands: Any) -> None:
    """Add the `audit` command to the CLI's subparsers."""
    audit = commands.add_parser("audit", help="the data-access audit trail, newest last")
    audit.add_argument(
        "--since", help="from this UTC date or time (2026-11-01, 2026-11-01T09:00) or this long ago (30m, 24h, 7d)"
    )
    audit.add_argument("--user", help="only this user id (or platform:user, e.g. slack:U01EAST)")
    audit.add_argument("--source", help="only this data source")
    audit.add_argument(
        "--outcome", choices=("succeeded", "failed", "timed_out", "refused"), help="only attempts with this outcome"
    )
    audit.add_argument("--limit", type=int, default=100, help="the latest N records (default 100)")
    audit.set_defaults(func=_audit)


def parse_since(text: str, now: datetime) -> datetime:
    """``--since`` as a UTC time: an ISO date or time (UTC unless it says otherwise), or a
    duration before ``now``. Raises ValueError naming the accepted forms."""
    relative = _RELATIVE.fullmatch(text.strip())
    if relative:
        amount, unit = relative.groups()
        return now - timedelta(**{_UNITS[unit]: int(amount)})
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ValueError(
            f"--since {text!r}: give a date or time (2026-11-01, 2026-11-01T09:00) or a duration (30m, 24h, 7d)"
        ) from None
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def _audit(args: argparse.Namespace) -> int:
    settings = load_settings()
    if args.limit < 1:
        print("ba-agent: --limit must be at least 1", file=sys.stderr)
        return 2
    try:
        since = parse_since(args.since, datetime.now(UTC)) if args.since else None
    except ValueError as exc:
        print(f"ba-agent: {exc}", file=sys.stderr)
        return 2
    from sqlalchemy.exc import DBAPIError

    try:
        entries = asyncio.run(
            _read(settings.effective_database_url, since, args.user, args.source, args.outcome, args.limit)
        )
    except DBAPIError as exc:
        print(f"ba-agent: cannot read the audit trail ({exc.orig}); is the database migrated? (ba-agent db upgrade)",
              file=sys.stderr)  # fmt: skip
        return 1
    for entry in entries:
        print(format_entry(entry))
    if not entries:
        filtered = since or args.user or args.source or args.outcome
        print("(no data access recorded" + (" matching these filters)" if filtered else ")"))
    return 0


async def _read(
    database_url: str, since: datetime | None, user: str | None, source: str | None, outcome: Any, limit: int
) -> list[AuditEntry]:
    from agent_core.governance.audit import read_audit
    from agent_core.store.db import create_engine, session_factory

    engine = create_engine(database_url)
    try:
        return await read_audit(
            session_factory(engine), since=since, user=user, source=source, outcome=outcome, limit=limit
        )
    finally:
        await engine.dispose()


def format_entry(entry: AuditEntry) -> str:
    """One record: a line of the outcome, who, where, what and how much, then the SQL as it ran."""
    who = f"{entry.platform}:{entry.user_id}" if entry.platform else entry.user_id
    where = f" in {entry.channel}" if entry.channel else ""
    approval = f"  approval {entry.approval_id}" if entry.approval_id else ""
    outcome = f"{entry.outcome} ({entry.error})" if entry.error else entry.outcome
    head = (
        f"{entry.accessed_at:%Y-%m-%d %H:%M:%S}Z  {outcome:<9}  {who}{where}  {entry.source}  {entry.tool}  "
        f"{entry.row_count} rows  {entry.duration_ms:.0f} ms{approval}  "
        f"thread {entry.thread_id}  call {entry.tool_call_id}"
    )
    sql = "\n    ".join(entry.sql.splitlines())
    return f"{head}\n    {sql}"
