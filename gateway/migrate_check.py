"""Whether a database is already at the latest migration, without importing Alembic.

A one-shot command (`ba-agent catalog search`, `ba-agent tool run`) on a migrated database
would otherwise spend a third of a second importing Alembic to find nothing to do. The head is
read from the revision files themselves; anything unusual (several heads, no version table, an
unreadable file) answers False, and the caller runs the real upgrade.
"""

from __future__ import annotations

import re
from pathlib import Path

from sqlalchemy import create_engine, pool, text
from sqlalchemy.exc import SQLAlchemyError

from agent_core.store.db import sync_url

VERSIONS_DIR = Path(__file__).parent / "migrations" / "versions"
_REVISION = re.compile(r"^revision\s*=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)
_DOWN_REVISION = re.compile(r"^down_revision\s*=\s*(.+)$", re.MULTILINE)


def head_revision(versions: Path = VERSIONS_DIR) -> str | None:
    """The single head revision of the migration files (None when there is not exactly one)."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in versions.glob("*.py"):
        source = path.read_text(encoding="utf-8")
        revision = _REVISION.search(source)
        down = _DOWN_REVISION.search(source)
        if revision is None or down is None:
            return None
        revisions.add(revision.group(1))
        parents.update(re.findall(r"['\"]([^'\"]+)['\"]", down.group(1)))
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def is_current(database_url: str) -> bool:
    """True when the database's Alembic version is the files' single head."""
    head = head_revision()
    if head is None:
        return False
    engine = create_engine(sync_url(database_url), poolclass=pool.NullPool)
    try:
        with engine.connect() as conn:
            versions = [row[0] for row in conn.execute(text("SELECT version_num FROM alembic_version"))]
    except SQLAlchemyError:
        return False
    finally:
        engine.dispose()
    return versions == [head]
