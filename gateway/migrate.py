"""Database migrations (Alembic), safe to run from several processes at once."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import create_engine, pool, text

from agent_core.store.db import sync_url

MIGRATIONS_DIR = Path(__file__).parent / "migrations"
_PG_LOCK_ID = 0x0BA_A6E17  # one advisory lock: concurrent upgrades wait for each other


def upgrade(database_url: str) -> str | None:
    """Bring the database schema to the latest revision; returns that revision."""
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    engine = create_engine(sync_url(database_url), poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            is_pg = conn.dialect.name == "postgresql"
            if is_pg:
                conn.execute(text("SELECT pg_advisory_lock(:id)"), {"id": _PG_LOCK_ID})
            try:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
                conn.commit()
                return conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
            finally:
                if is_pg:
                    conn.execute(text("SELECT pg_advisory_unlock(:id)"), {"id": _PG_LOCK_ID})
                    conn.commit()
    finally:
        engine.dispose()
