"""The data-file cleanup job: generated workspace files expire, and their total size is capped.

Tools write data files, charts and reports into each conversation's workspace
(``<data_dir>/workspaces/<thread>/{data,charts,reports}``); nothing else ever deletes them. Each
run of `cleanup_data_files`:

1. scans those areas and brings the ``data_files`` index up to date (path, size, last access,
   conversation) -- the database, not the disk, is what the policy reads, so every gateway
   process sees the same picture;
2. removes files not accessed for the TTL (default 24 h);
3. if the total still exceeds the size cap (default 10 GB), removes the least recently used
   files until it is under 80 % of the cap.

Files of a live conversation that was active within the TTL are never removed: its recent
turns may refer to them, and the model would be told they exist. Uploads (and the tables loaded
from them) are the user's originals and are not touched.

The gateway's processes share the data directory (any process may resume any conversation),
so the job runs once for all of them.
"""

from __future__ import annotations

import asyncio
import logging
import os
import stat
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import delete, select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlmodel import col

from agent_core.store.tables import ThreadRow
from agent_core.workspace import thread_dir_name
from gateway.tables import DataFileRow

log = logging.getLogger(__name__)

CLEANED_AREAS = ("data", "charts", "reports")
_BATCH = 500  # rows per statement: well under SQLite's bound-parameter limit


class CleanupConfig(BaseModel):
    model_config = ConfigDict(frozen=True)

    ttl: timedelta = timedelta(hours=24)
    size_cap_bytes: int = Field(10 * 1024**3, ge=1)
    target_fill: float = Field(0.8, gt=0, le=1)  # over the cap, shrink to this share of it


class CleanupReport(BaseModel):
    files: int  # indexed files left
    total_bytes: int  # their size
    removed_expired: int
    removed_for_space: int
    freed_bytes: int
    kept_in_use: int  # expired files kept because their conversation is still active
    over_cap: bool  # still over the cap: the rest belongs to active conversations


# A conversation's (updated at, archived at).
_Thread = tuple[datetime, datetime | None]


@dataclass(frozen=True)
class _File:
    path: str  # relative to the data dir, "/"-separated
    workspace: str
    area: str
    size: int
    modified_at: datetime
    last_access_at: datetime


async def cleanup_data_files(
    engine: AsyncEngine, data_dir: Path, config: CleanupConfig, *, now: datetime
) -> CleanupReport:
    """Index the generated files under ``data_dir``, then remove expired and excess ones."""
    scanned = await asyncio.to_thread(_scan, data_dir)
    threads = await _threads(engine, {f.workspace for f in scanned})
    files = await _sync_index(engine, scanned, threads, now)
    active = {
        name
        for name, (updated_at, archived_at) in threads.items()
        if archived_at is None and updated_at >= now - config.ttl
    }

    cutoff = now - config.ttl
    by_age = sorted(files, key=lambda f: f.last_access_at)
    expired = [f for f in by_age if f.last_access_at < cutoff and f.workspace not in active]
    kept_in_use = sum(1 for f in by_age if f.last_access_at < cutoff and f.workspace in active)
    doomed = {f.path for f in expired}
    total = sum(f.size for f in files if f.path not in doomed)
    for_space: list[_File] = []
    if total > config.size_cap_bytes:
        target = config.size_cap_bytes * config.target_fill
        for f in by_age:
            if total <= target:
                break
            if f.path in doomed or f.workspace in active:
                continue
            for_space.append(f)
            doomed.add(f.path)
            total -= f.size

    removed = await asyncio.to_thread(_remove, data_dir, [*expired, *for_space])
    await _drop_rows(engine, removed)
    left = [f for f in files if f.path not in removed]
    left_bytes = sum(f.size for f in left)
    report = CleanupReport(
        files=len(left),
        total_bytes=left_bytes,
        removed_expired=sum(1 for f in expired if f.path in removed),
        removed_for_space=sum(1 for f in for_space if f.path in removed),
        freed_bytes=sum(f.size for f in files if f.path in removed),
        kept_in_use=kept_in_use,
        over_cap=left_bytes > config.size_cap_bytes,
    )
    if report.over_cap:
        log.warning("data files exceed the size cap; the rest belongs to active conversations: %s", report)
    elif removed:
        log.info("data-file cleanup: %s", report)
    return report


def _scan(data_dir: Path) -> list[_File]:
    """Regular files in the cleaned areas of every workspace (symlinks are neither followed
    nor listed: workspaces never create them, and following one could leave the data dir)."""
    root = data_dir / "workspaces"
    try:
        workspaces = [entry for entry in os.scandir(root) if entry.is_dir(follow_symlinks=False)]
    except FileNotFoundError:
        return []
    files: list[_File] = []
    for workspace in workspaces:
        for area in CLEANED_AREAS:
            for dirpath, _dirnames, filenames in os.walk(Path(workspace.path) / area):
                for name in filenames:
                    path = Path(dirpath) / name
                    try:
                        st = os.lstat(path)
                    except FileNotFoundError:
                        continue  # removed meanwhile
                    if not stat.S_ISREG(st.st_mode):
                        continue
                    modified = datetime.fromtimestamp(st.st_mtime, UTC)
                    # Access times are only as good as the mount's atime policy (relatime
                    # updates them at most daily); a write is an access too.
                    accessed = max(datetime.fromtimestamp(st.st_atime, UTC), modified)
                    files.append(
                        _File(
                            path=path.relative_to(data_dir).as_posix(),
                            workspace=workspace.name,
                            area=area,
                            size=st.st_size,
                            modified_at=modified,
                            last_access_at=accessed,
                        )
                    )
    return files


async def _sync_index(
    engine: AsyncEngine, scanned: list[_File], threads: dict[str, _Thread], now: datetime
) -> list[_File]:
    """Upsert what the scan found, forget what is gone; returns the files with their indexed
    last access (the later of the index's and the disk's)."""
    async with engine.connect() as conn:
        known = dict((await conn.execute(select(col(DataFileRow.path), col(DataFileRow.last_access_at)))).all())
    files = [
        replace(f, last_access_at=max(f.last_access_at, known.get(f.path, f.last_access_at)))
        for f in scanned
    ]
    insert = postgresql.insert if engine.dialect.name == "postgresql" else sqlite.insert
    updated = ("thread_id", "size_bytes", "modified_at", "last_access_at", "seen_at")
    async with engine.begin() as conn:
        for start in range(0, len(files), _BATCH):
            stmt = insert(DataFileRow).values(
                [
                    {
                        "path": f.path,
                        "workspace": f.workspace,
                        "thread_id": f.workspace if f.workspace in threads else None,
                        "area": f.area,
                        "size_bytes": f.size,
                        "modified_at": f.modified_at,
                        "last_access_at": f.last_access_at,
                        "seen_at": now,
                    }
                    for f in files[start : start + _BATCH]
                ]
            )
            await conn.execute(
                stmt.on_conflict_do_update(
                    index_elements=["path"], set_={c: stmt.excluded[c] for c in updated}
                )
            )
        gone = sorted(set(known) - {f.path for f in files})
        for start in range(0, len(gone), _BATCH):
            batch = gone[start : start + _BATCH]
            await conn.execute(delete(DataFileRow).where(col(DataFileRow.path).in_(batch)))
    return files


async def _threads(engine: AsyncEngine, workspaces: set[str]) -> dict[str, _Thread]:
    """The known conversations among workspace directory names, by name.

    Thread ids are generated hex strings, so a conversation's workspace directory is named by
    its id itself (`thread_dir_name` is the identity on them); the check keeps other names out.
    """
    names = sorted(workspaces)
    found: dict[str, _Thread] = {}
    async with engine.connect() as conn:
        for start in range(0, len(names), _BATCH):
            rows = await conn.execute(
                select(col(ThreadRow.id), col(ThreadRow.updated_at), col(ThreadRow.archived_at)).where(
                    col(ThreadRow.id).in_(names[start : start + _BATCH])
                )
            )
            for thread_id, updated_at, archived_at in rows:
                if thread_dir_name(thread_id) == thread_id:
                    found[thread_id] = (updated_at, archived_at)
    return found


def _remove(data_dir: Path, files: list[_File]) -> set[str]:
    """Delete the files; returns the paths that are gone (already missing counts as gone)."""
    removed: set[str] = set()
    for f in files:
        try:
            (data_dir / f.path).unlink()
        except FileNotFoundError:
            pass
        except OSError as exc:
            log.warning("could not remove %s: %s", f.path, exc)
            continue
        removed.add(f.path)
    return removed


async def _drop_rows(engine: AsyncEngine, paths: set[str]) -> None:
    ordered = sorted(paths)
    async with engine.begin() as conn:
        for start in range(0, len(ordered), _BATCH):
            batch = ordered[start : start + _BATCH]
            await conn.execute(delete(DataFileRow).where(col(DataFileRow.path).in_(batch)))
