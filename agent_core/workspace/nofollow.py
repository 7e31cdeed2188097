"""Opening and writing files below a root directory without ever following a symbolic link.

Paths arrive here as validated virtual paths (see backend.normalize_virtual_path) and are
resolved *one segment at a time* with directory file descriptors: every directory is opened
with ``O_NOFOLLOW | O_DIRECTORY`` relative to its parent's descriptor and the final file with
``O_NOFOLLOW``. Symbolic links are therefore never followed anywhere below the root -- not just
"not outside the root" -- and there is no window between a check and the open in which a path
component could be swapped for a link. Only the root itself may be (or sit under) a symlink: it
comes from operator configuration, not from the model.

Writes go to a temporary file in the target directory (named with :data:`TEMP_PREFIX`, which
listings hide), are fsynced, then renamed into place (or hard-linked, which fails atomically if
the name is taken, when overwriting is not allowed). Requires a POSIX system (``dir_fd``).
"""

from __future__ import annotations

import errno
import io
import os
import secrets
import stat as stat_mod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from pathlib import Path

from agent_core.workspace.backend import (
    FileAlreadyExists,
    FileNotFound,
    NotAFile,
    PathNotAllowed,
    WorkspaceError,
    split_virtual_path,
)

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: opening a FIFO planted in the workspace must not hang a worker thread.
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
TEMP_PREFIX = ".ba-tmp-"


@contextmanager
def os_errors(vpath: str, action: str) -> Iterator[None]:
    """Translate OSError into model-safe WorkspaceErrors.

    Uses `strerror` only: `str(OSError)` embeds the real filesystem path.
    """
    try:
        yield
    except WorkspaceError:
        raise
    except FileNotFoundError as e:
        raise FileNotFound(f"no such file or directory: {vpath}", vpath) from e
    except NotADirectoryError as e:
        raise FileNotFound(f"a parent of {vpath} is not a directory", vpath) from e
    except IsADirectoryError as e:
        raise NotAFile(f"{vpath} is a directory", vpath) from e
    except PermissionError as e:
        raise PathNotAllowed(f"permission denied: {vpath}", vpath) from e
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise PathNotAllowed(f"symbolic links are not allowed: {vpath}", vpath) from e
        if e.errno == errno.ENAMETOOLONG:
            raise PathNotAllowed(f"path is too long: {vpath}", vpath) from e
        raise WorkspaceError(f"could not {action} {vpath}: {e.strerror}", vpath) from e


def lstat_at(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


class NoFollowRoot:
    """A root directory whose files are reached by descriptor, never through a symlink."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def _open_root(self, create: bool) -> int:
        if create:
            self.root.mkdir(parents=True, exist_ok=True)
        # The root may be reached through operator-configured symlinks: follow them here only.
        return os.open(self.root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)

    def _open_child_dir(self, parent_fd: int, name: str, create: bool, vpath: str) -> int:
        try:
            return os.open(name, DIR_FLAGS, dir_fd=parent_fd)
        except FileNotFoundError:
            if not create:
                raise
            with suppress(FileExistsError):  # created concurrently: the open re-checks it
                os.mkdir(name, 0o700, dir_fd=parent_fd)
            return os.open(name, DIR_FLAGS, dir_fd=parent_fd)
        except OSError:
            # O_NOFOLLOW|O_DIRECTORY reports a symlink as ENOTDIR on Linux; tell the two apart.
            st = lstat_at(parent_fd, name)
            if st is not None and stat_mod.S_ISLNK(st.st_mode):
                raise PathNotAllowed(f"symbolic links are not allowed: {vpath}", vpath) from None
            raise

    @contextmanager
    def open_dir(self, segments: Sequence[str], vpath: str, *, create: bool) -> Iterator[int]:
        """Descriptor of root/segments, walked without following any symlink."""
        with os_errors(vpath, "open"):
            fd = self._open_root(create)
            try:
                for i, name in enumerate(segments):
                    shown = "/" + "/".join(segments[: i + 1])
                    child = self._open_child_dir(fd, name, create, shown)
                    os.close(fd)
                    fd = child
            except BaseException:
                os.close(fd)
                raise
        try:
            yield fd
        finally:
            os.close(fd)

    @contextmanager
    def open_file(
        self, vpath: str
    ) -> Iterator[tuple[io.BufferedReader[io.FileIO], os.stat_result]]:
        """An open regular file at a normalized virtual path, plus its stat."""
        segments = split_virtual_path(vpath)
        if len(segments) < 2:
            raise NotAFile(f"{vpath} is a directory", vpath)
        with self.open_dir(segments[:-1], vpath, create=False) as dir_fd:
            with os_errors(vpath, "open"):  # ELOOP here means the final segment is a symlink
                fd = os.open(segments[-1], FILE_FLAGS, dir_fd=dir_fd)
                f = io.BufferedReader(io.FileIO(fd, "rb"))
            with f:
                st = os.fstat(f.fileno())
                if stat_mod.S_ISDIR(st.st_mode):
                    raise NotAFile(f"{vpath} is a directory", vpath)
                if not stat_mod.S_ISREG(st.st_mode):
                    raise NotAFile(f"{vpath} is not a regular file", vpath)
                os.set_blocking(f.fileno(), True)
                yield f, st


def write_atomically(dir_fd: int, name: str, data: bytes, vpath: str, *, overwrite: bool) -> None:
    """Write `data` to a temp file beside `name`, fsync, then move it into place."""
    existing = lstat_at(dir_fd, name)
    if existing is not None:
        if stat_mod.S_ISLNK(existing.st_mode):
            raise PathNotAllowed(f"symbolic links are not allowed: {vpath}", vpath)
        if stat_mod.S_ISDIR(existing.st_mode):
            raise NotAFile(f"{vpath} is a directory", vpath)
        if not overwrite:
            raise FileAlreadyExists(
                f"{vpath} already exists; pass overwrite=true to replace it "
                "or choose another name",
                vpath,
            )
    tmp = f"{TEMP_PREFIX}{secrets.token_hex(8)}"
    with os_errors(vpath, "write"):
        fd = os.open(
            tmp,
            os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
            0o600,
            dir_fd=dir_fd,
        )
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if overwrite:
                # rename() replaces a symlink planted meanwhile instead of following it.
                os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
            else:
                # link() refuses an existing name atomically: no check-then-write race.
                try:
                    os.link(
                        tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False
                    )
                except FileExistsError:
                    raise FileAlreadyExists(f"{vpath} already exists", vpath) from None
                os.unlink(tmp, dir_fd=dir_fd)
        except BaseException:
            with suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dir_fd)
            raise
