"""Refreshing the catalog: read each source's tables and columns, store them.

:func:`refresh_catalog` is what every trigger calls: `ba-agent catalog refresh`, the answering
process at start-up (:func:`refresh_at_start_up`), `search_schema` for a source never read yet,
and the scheduler (an hourly job with ``stale_after=BA_CATALOG_REFRESH_HOURS`` refreshes each
source once that period). Sources are read one after another in a worker thread (the drivers
block), each through its own read-only connection; a source that cannot be read keeps its last
good catalog and records why.
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import Iterable, Mapping
from datetime import timedelta

from pydantic import BaseModel
from sqlalchemy.ext.asyncio import async_sessionmaker
from sqlmodel.ext.asyncio.session import AsyncSession

from agent_core.catalog.models import CatalogTable, SourceCatalog
from agent_core.catalog.store import CatalogStore
from agent_core.data.errors import DataError
from agent_core.data.source_config import DataSourceConfig
from agent_core.messages import utcnow

log = logging.getLogger(__name__)

DEFAULT_STATEMENT_TIMEOUT_S = 30.0
# One refresh of a source at a time per event loop; a second caller waits, then finds it fresh.
_SOURCE_LOCKS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Lock]] = (
    weakref.WeakKeyDictionary()
)


class CatalogReadError(DataError):
    """A source's catalog could not be read; the message is safe to show (no secrets)."""


class RefreshOutcome(BaseModel):
    source: str
    refreshed: bool  # False: skipped because fresh enough, or failed (then `error` says why)
    table_count: int = 0
    duration_ms: float = 0.0
    error: str | None = None


async def refresh_catalog(
    datasources: Mapping[str, DataSourceConfig],
    sessions: async_sessionmaker[AsyncSession],
    *,
    sources: Iterable[str] | None = None,
    stale_after: timedelta | None = None,
) -> list[RefreshOutcome]:
    """Refresh the catalog of ``sources`` (default: every configured source).

    With ``stale_after``, a source whose last successful refresh is more recent than that is
    skipped. Never raises for a source that cannot be read: its outcome carries the error.
    """
    store = CatalogStore(sessions)
    names = list(datasources) if sources is None else [name for name in sources if name in datasources]
    locks = _SOURCE_LOCKS.setdefault(asyncio.get_running_loop(), {})
    outcomes = []
    for name in names:
        async with locks.setdefault(name, asyncio.Lock()):
            if stale_after is not None and await _is_fresh(store, name, stale_after):
                outcomes.append(RefreshOutcome(source=name, refreshed=False))
                continue
            outcomes.append(await _refresh_one(store, datasources[name]))
    return outcomes


def refresh_at_start_up(
    datasources: Mapping[str, DataSourceConfig],
    sessions: async_sessionmaker[AsyncSession],
    refresh_hours: float,
) -> asyncio.Task[list[RefreshOutcome]]:
    """Start refreshing, in the background, the sources not refreshed within ``refresh_hours``
    (so workers restarting together read each source once). Cancel the task at shutdown."""
    task = asyncio.create_task(
        refresh_catalog(datasources, sessions, stale_after=timedelta(hours=refresh_hours)), name="catalog-refresh"
    )
    task.add_done_callback(_log_failure)
    return task


def read_source_catalog(cfg: DataSourceConfig) -> SourceCatalog:
    """Read one source's catalog (blocking: run it in a thread). Raises CatalogReadError."""
    started = time.monotonic()
    timeout_s = cfg.statement_timeout_s or DEFAULT_STATEMENT_TIMEOUT_S
    try:
        tables: list[CatalogTable]
        if cfg.kind == "postgresql":
            from agent_core.catalog.postgres import read_postgres_catalog

            tables = read_postgres_catalog(cfg, timeout_s)
        elif cfg.kind == "mysql":
            from agent_core.catalog.mysql import read_mysql_catalog

            tables = read_mysql_catalog(cfg, timeout_s)
        else:
            from agent_core.catalog.duckdb_catalog import read_duckdb_catalog

            tables = read_duckdb_catalog(cfg)
    except DataError as error:  # QueryFailed from connecting: already a readable message
        raise CatalogReadError(str(error)) from error
    except Exception as error:  # any driver's error: psycopg, PyMySQL, DuckDB
        first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
        raise CatalogReadError(f"Could not read the catalog of {cfg.name!r}: {first_line}") from error
    return SourceCatalog(
        source=cfg.name, kind=cfg.kind, tables=tables, duration_ms=round((time.monotonic() - started) * 1000, 1)
    )


async def _refresh_one(store: CatalogStore, cfg: DataSourceConfig) -> RefreshOutcome:
    try:
        catalog = await asyncio.to_thread(read_source_catalog, cfg)
    except CatalogReadError as error:
        log.warning("catalog of data source %r not refreshed: %s", cfg.name, error)
        await store.record_failure(cfg.name, cfg.kind, str(error))
        return RefreshOutcome(source=cfg.name, refreshed=False, error=str(error))
    await store.save(catalog)
    log.info("catalog of data source %r: %d tables read in %.0f ms", cfg.name, len(catalog.tables), catalog.duration_ms)
    return RefreshOutcome(
        source=cfg.name, refreshed=True, table_count=len(catalog.tables), duration_ms=catalog.duration_ms
    )


async def _is_fresh(store: CatalogStore, source: str, stale_after: timedelta) -> bool:
    states = await store.states([source])
    refreshed = states[0].refreshed_at if states else None
    return refreshed is not None and utcnow() - refreshed < stale_after


def _log_failure(task: asyncio.Task[list[RefreshOutcome]]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("catalog refresh at start-up failed", exc_info=task.exception())
