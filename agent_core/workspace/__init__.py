"""Per-conversation workspaces: uploads, data files, charts and reports behind virtual paths.

The model works with virtual paths (``/uploads/sales.csv``); backends map them to storage and
enforce path safety. See :mod:`agent_core.workspace.backend` for the rules.
"""

from agent_core.workspace.backend import (
    DEFAULT_AREAS,
    EditConflict,
    EditResult,
    FileAlreadyExists,
    FileInfo,
    FileNotFound,
    FileTooLarge,
    GrepMatch,
    InvalidArgument,
    NotAFile,
    NotTextFile,
    PathNotAllowed,
    ReadResult,
    WorkspaceBackend,
    WorkspaceError,
    WorkspaceLimits,
    normalize_virtual_path,
    sanitize_filename,
)
from agent_core.workspace.local import LocalWorkspace, thread_dir_name, workspace_for

__all__ = [
    "DEFAULT_AREAS",
    "EditConflict",
    "EditResult",
    "FileAlreadyExists",
    "FileInfo",
    "FileNotFound",
    "FileTooLarge",
    "GrepMatch",
    "InvalidArgument",
    "LocalWorkspace",
    "NotAFile",
    "NotTextFile",
    "PathNotAllowed",
    "ReadResult",
    "WorkspaceBackend",
    "WorkspaceError",
    "WorkspaceLimits",
    "normalize_virtual_path",
    "sanitize_filename",
    "thread_dir_name",
    "workspace_for",
]
