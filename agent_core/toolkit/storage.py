"""Large tool data goes to files in the conversation's workspace, not into the context.

Files are content-addressed -- ``<sha256 prefix>.<ext>`` in the workspace's ``data`` area -- so
the same data always lands in the same file and repeated calls cost no extra disk. They are
written through the conversation's workspace (`workspace_for`) (worker thread, atomic, no symlinks
followed), i.e. to ``<data_dir>/workspaces/<thread_dir_name(thread_id)>/data/<name>``, and the
model addresses them by their virtual path ``/data/<name>``.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from agent_core.workspace.backend import FileAlreadyExists, WorkspaceLimits
from agent_core.workspace.local import workspace_for

DATA_AREA = "/data"
HASH_PREFIX_CHARS = 16  # 64 bits: collisions are out of reach within one conversation

FILE_FORMATS = {"csv": "CSV", "json": "JSON", "txt": "text"}


class StoredFile(BaseModel):
    """A data file written for a tool result, as the model and the engineering side see it."""

    model_config = ConfigDict(frozen=True)

    path: str  # virtual path, e.g. /data/3f2a9c0b1d4e5f60.csv
    size_bytes: int
    sha256: str
    format: str  # "CSV", "JSON" or "text"


class DataFileStore:
    """Writes tool data into a conversation's ``/data`` area."""

    def __init__(self, max_file_bytes: int = 50 * 1024 * 1024) -> None:
        self._limits = WorkspaceLimits(write_max_bytes=max_file_bytes)

    async def save(self, data_dir: Path, thread_id: str, content: bytes, extension: str) -> StoredFile:
        """Store ``content`` (idempotent: the same bytes map to the same existing file).

        Raises `WorkspaceError` (e.g. FileTooLarge) when the file cannot be written.
        """
        if extension not in FILE_FORMATS:
            raise ValueError(f"unsupported data file extension {extension!r}")
        digest = hashlib.sha256(content).hexdigest()
        path = f"{DATA_AREA}/{digest[:HASH_PREFIX_CHARS]}.{extension}"
        workspace = workspace_for(data_dir, thread_id, self._limits)
        try:
            await workspace.write(path, content)
        except FileAlreadyExists:
            pass  # content-addressed: the existing file already holds these bytes
        return StoredFile(
            path=path,
            size_bytes=len(content),
            sha256=digest,
            format=FILE_FORMATS[extension],
        )

    async def real_path(self, data_dir: Path, thread_id: str, path: str) -> Path:
        """Where a stored file lives on disk (for code that hands files to users, and tests)."""
        return await workspace_for(data_dir, thread_id, self._limits).real_path(path)
