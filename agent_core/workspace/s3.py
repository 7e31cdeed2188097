"""Workspace backend on S3-compatible object storage (AWS S3, MinIO, Ceph, R2…), with boto3.

One conversation's files are the objects under ``<prefix>/<encoded thread id>/<area>/…``;
folders are key prefixes, as S3 has none of its own. The virtual-path rules, limits, results
and errors are those of `agent_core.workspace.backend`, exactly as `LocalWorkspace` applies
them, so the same test suite runs on both. S3 has no symbolic links, and a PUT replaces an
object whole, so every write is atomic.

`real_path` (for trusted callers that hand a file to a library: DuckDB, a chat upload) gives
a copy in a local cache directory, downloaded when the object changed; a caller that wrote a
file there keeps it with `commit`.

boto3 is an optional dependency (``pip install "ba-agent-gateway[s3]"``), imported by
`s3_client`. Credentials come from boto3's own chain (``AWS_ACCESS_KEY_ID`` /
``AWS_SECRET_ACCESS_KEY``, a profile, an instance or pod role).
"""

from __future__ import annotations

import io
import os
import tempfile
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

from agent_core.workspace.backend import (
    DEFAULT_AREAS,
    EditResult,
    FileAlreadyExists,
    FileInfo,
    FileNotFound,
    FileTooLarge,
    GrepMatch,
    InvalidArgument,
    NotAFile,
    ReadResult,
    WorkspaceError,
    WorkspaceLimits,
    split_virtual_path,
)
from agent_core.workspace.blocking import BlockingWorkspace
from agent_core.workspace.textfiles import (
    BINARY_SNIFF_BYTES,
    check_edit,
    child_path,
    data_to_write,
    edit_too_large,
    edited,
    glob_filter,
    grep_data,
    page_lines,
    read_page,
)

_T = TypeVar("_T")
_NO_TIME = datetime(1970, 1, 1, tzinfo=UTC)  # S3 folders are prefixes: they have no time of their own


def parse_workspace_url(url: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` → (bucket, prefix without slashes at either end)."""
    parts = urlsplit(url)
    if parts.scheme != "s3" or not parts.netloc or parts.query or parts.fragment:
        raise ValueError("must be s3://bucket[/prefix]")
    return parts.netloc, parts.path.strip("/")


def s3_client(endpoint_url: str | None = None) -> Any:
    """A boto3 S3 client; `endpoint_url` for S3-compatible servers (path-style addressing)."""
    import boto3
    from botocore.config import Config

    config = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3, "mode": "standard"})
    return boto3.client("s3", endpoint_url=endpoint_url, config=config)


class _BodyReader(io.RawIOBase):
    """A botocore streaming body as a raw stream, for the line reader `LocalWorkspace` uses."""

    def __init__(self, body: Any) -> None:
        self._body = body

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self._body.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        self._body.close()
        super().close()


class S3Workspace(BlockingWorkspace):
    """A conversation workspace stored as objects under ``s3://bucket/root/``.

    Implements :class:`~agent_core.workspace.backend.WorkspaceBackend`.
    """

    def __init__(
        self,
        client: Any,
        bucket: str,
        root: str,
        cache_dir: Path,
        limits: WorkspaceLimits | None = None,
        *,
        areas: Sequence[str] = DEFAULT_AREAS,
    ) -> None:
        self._s3 = client
        self._bucket = bucket
        self._root = root.strip("/")
        self._cache = Path(cache_dir)
        self.limits = limits or WorkspaceLimits()
        self._areas = tuple(areas)

    def __repr__(self) -> str:
        return f"S3Workspace('s3://{self._bucket}/{self._root}')"

    # ------------------------------------ what differs in kind (the rest: BlockingWorkspace)

    async def commit(self, path: str) -> FileInfo:
        """Store the file a trusted caller wrote at ``real_path(path, must_exist=False)``."""
        return await self._run(self._commit, path)

    async def pull_private(self, name: str) -> Path:
        return await self._run(self._pull_private, name)

    async def push_private(self, name: str) -> None:
        await self._run(self._push_private, name)

    # ---------------------------------------------------------------- keys and objects

    def _key(self, vpath: str) -> str:
        return f"{self._root}{vpath}" if vpath != "/" else f"{self._root}/"

    def _dir_prefix(self, vpath: str) -> str:
        return f"{self._root}/" if vpath == "/" else f"{self._root}{vpath}/"

    def _head(self, vpath: str) -> dict[str, Any] | None:
        from botocore.exceptions import ClientError

        try:
            return dict(self._s3.head_object(Bucket=self._bucket, Key=self._key(vpath)))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise self._failed(vpath, "read") from None

    def _is_dir(self, vpath: str) -> bool:
        answer = self._s3.list_objects_v2(Bucket=self._bucket, Prefix=self._dir_prefix(vpath), MaxKeys=1)
        return bool(answer.get("KeyCount"))

    def _objects(self, vdir: str) -> Iterator[tuple[str, int, datetime]]:
        """(virtual path, size, time) of every object below a folder, in key order."""
        prefix = self._dir_prefix(vdir)
        for page in self._s3.get_paginator("list_objects_v2").paginate(Bucket=self._bucket, Prefix=prefix):
            for item in page.get("Contents", ()):
                vpath = "/" + item["Key"].removeprefix(f"{self._root}/")
                if vdir == "/" and split_virtual_path(vpath)[0] not in self._areas:
                    continue  # server bookkeeping beside the areas is not the model's
                yield vpath, int(item["Size"]), item["LastModified"]

    def _get(self, vpath: str) -> Any:
        from botocore.exceptions import ClientError

        try:
            return self._s3.get_object(Bucket=self._bucket, Key=self._key(vpath))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                if self._is_dir(vpath):
                    raise NotAFile(f"{vpath} is a directory", vpath) from None
                raise FileNotFound(f"no such file or directory: {vpath}", vpath) from None
            raise self._failed(vpath, "read") from None

    def _put(self, vpath: str, data: bytes) -> FileInfo:
        self._s3.put_object(Bucket=self._bucket, Key=self._key(vpath), Body=data)
        head = self._head(vpath) or {}
        return FileInfo(path=vpath, size=len(data), modified_at=head.get("LastModified", _NO_TIME))

    @staticmethod
    def _failed(vpath: str, action: str) -> WorkspaceError:
        # The storage's own message may name the bucket: the model gets the virtual path only.
        return WorkspaceError(f"could not {action} {vpath}: the file store did not answer", vpath)

    def _file_parent_of(self, segments: list[str]) -> str | None:
        """The first folder of a path that is a file instead (a write below it must fail)."""
        for depth in range(2, len(segments)):
            vparent = "/" + "/".join(segments[:depth])
            if self._head(vparent) is not None:
                return vparent
        return None

    # ---------------------------------------------------------------- listing

    def _ls(self, path: str) -> list[FileInfo]:
        vpath = self._normalize(path)
        segments = split_virtual_path(vpath)
        prefix = self._dir_prefix(vpath)
        entries: dict[str, FileInfo] = {}
        paginator = self._s3.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self._bucket, Prefix=prefix, Delimiter="/"):
            for folder in page.get("CommonPrefixes", ()):
                name = folder["Prefix"].removeprefix(prefix).rstrip("/")
                entries[name] = FileInfo(path=child_path(vpath, name), size=0, modified_at=_NO_TIME, is_dir=True)
            for item in page.get("Contents", ()):
                name = item["Key"].removeprefix(prefix)
                entries[name] = FileInfo(path=child_path(vpath, name), size=int(item["Size"]), modified_at=item["LastModified"])
        if vpath == "/":
            entries = {name: info for name, info in entries.items() if name in self._areas and info.is_dir}
        if not entries:
            if len(segments) <= 1:
                return []  # the root or an area never written to: empty rather than missing
            return [self._stat(vpath)]  # `ls file` shows the file, as the shell does
        return [entries[name] for name in sorted(entries)][: self.limits.ls_max_entries]

    def _stat(self, path: str) -> FileInfo:
        vpath = self._normalize(path)
        if len(split_virtual_path(vpath)) >= 2 and (head := self._head(vpath)) is not None:
            return FileInfo(path=vpath, size=int(head["ContentLength"]), modified_at=head["LastModified"])
        if self._is_dir(vpath):
            return FileInfo(path=vpath, size=0, modified_at=_NO_TIME, is_dir=True)
        raise FileNotFound(f"no such file or directory: {vpath}", vpath)

    # ---------------------------------------------------------------- reading

    def _read(self, path: str, offset: int, limit: int | None) -> ReadResult:
        max_lines = page_lines(offset, limit, self.limits)
        vpath = self._normalize(path)
        if len(split_virtual_path(vpath)) < 2:
            raise NotAFile(f"{vpath} is a directory", vpath)
        with io.BufferedReader(_BodyReader(self._get(vpath)["Body"]), BINARY_SNIFF_BYTES) as f:
            return read_page(f, vpath, offset, max_lines, self.limits)

    def _read_bytes(self, path: str) -> bytes:
        vpath = self._normalize(path)
        if len(split_virtual_path(vpath)) < 2:
            raise NotAFile(f"{vpath} is a directory", vpath)
        cap = self.limits.read_bytes_max
        answer = self._get(vpath)
        if int(answer["ContentLength"]) > cap:
            answer["Body"].close()
            raise FileTooLarge(f"{vpath} is {answer['ContentLength']} bytes; the limit is {cap}", vpath)
        with answer["Body"] as body:
            data: bytes = body.read(cap + 1)
        if len(data) > cap:
            raise FileTooLarge(f"{vpath} is larger than the {cap} byte limit", vpath)
        return data

    # ---------------------------------------------------------------- writing

    def _write(self, path: str, content: str | bytes, overwrite: bool) -> FileInfo:
        vpath = self._normalize(path)
        segments, data = data_to_write(vpath, content, self.limits)
        if self._is_dir(vpath):
            raise NotAFile(f"{vpath} is a directory", vpath)
        if (parent := self._file_parent_of(segments)) is not None:
            raise FileNotFound(f"a parent of {vpath} is not a directory ({parent})", vpath)
        if not overwrite and self._head(vpath) is not None:
            raise FileAlreadyExists(f"{vpath} already exists; pass overwrite=true to replace it", vpath)
        return self._put(vpath, data)

    def _edit(self, path: str, old: str, new: str, replace_all: bool) -> EditResult:
        check_edit(old, new)
        vpath = self._normalize(path)
        if len(split_virtual_path(vpath)) < 2:
            raise NotAFile(f"{vpath} is a directory", vpath)
        cap = self.limits.edit_max_bytes
        answer = self._get(vpath)
        if int(answer["ContentLength"]) > cap:
            answer["Body"].close()
            raise edit_too_large(vpath, int(answer["ContentLength"]), cap)
        with answer["Body"] as body:
            raw = body.read(cap + 1)
        updated, replacements = edited(raw, vpath, old, new, replace_all, cap)
        info = self._put(vpath, updated.encode("utf-8"))
        return EditResult(file=info, replacements=replacements)

    # ---------------------------------------------------------------- searching

    def _search_base(self, path: str) -> tuple[str, list[tuple[str, int, datetime]]]:
        """The base of a grep/glob and the files under it (the base alone when it is a file)."""
        vpath = self._normalize(path)
        files = list(self._objects(vpath))
        if not files and len(split_virtual_path(vpath)) > 1:
            info = self._stat(vpath)  # raises unless the base is a file
            if not info.is_dir:
                return vpath, [(vpath, info.size, info.modified_at)]
        return vpath, files

    def _grep(self, pattern: str, path: str, glob: str | None, ignore_case: bool) -> list[GrepMatch]:
        if pattern == "":
            raise InvalidArgument("grep pattern must not be empty")
        file_filter = glob_filter(glob) if glob else None
        by_name = glob is not None and "/" not in glob
        needle = pattern.casefold() if ignore_case else pattern
        limits = self.limits
        base, files = self._search_base(path)
        prefix = base.rstrip("/") + "/"
        matches: list[GrepMatch] = []
        for scanned, (vpath, size, _time) in enumerate(files):
            if scanned >= limits.grep_max_files or len(matches) >= limits.grep_max_matches:
                break
            if file_filter is not None:
                target = vpath.rsplit("/", 1)[-1] if by_name else vpath.removeprefix(prefix)
                if not file_filter.fullmatch(target):
                    continue
            if size > limits.grep_max_file_bytes:
                continue
            with self._get(vpath)["Body"] as body:
                data = body.read(limits.grep_max_file_bytes + 1)
            matches += grep_data(data, vpath, needle, ignore_case, limits, limits.grep_max_matches - len(matches))
        return matches

    def _glob(self, pattern: str, path: str) -> list[FileInfo]:
        if pattern.startswith("/"):
            path, pattern = "/", pattern.lstrip("/")
        regex = glob_filter(pattern)
        vpath = self._normalize(path)
        prefix = vpath.rstrip("/") + "/"
        results: list[FileInfo] = []
        for file, size, modified in self._objects(vpath):
            if regex.fullmatch(file.removeprefix(prefix)):
                results.append(FileInfo(path=file, size=size, modified_at=modified))
                if len(results) >= self.limits.glob_max_results:
                    break
        return results

    # ---------------------------------------------------------------- trusted callers

    def _cached(self, vpath: str) -> Path:
        return self._cache.joinpath(*split_virtual_path(vpath))

    def _real_path(self, path: str, must_exist: bool) -> Path:
        vpath = self._normalize(path)
        local = self._cached(vpath)
        if not must_exist:
            local.parent.mkdir(parents=True, exist_ok=True)
            return local
        info = self._stat(vpath)
        if info.is_dir:
            local.mkdir(parents=True, exist_ok=True)
            return local
        fresh = local.is_file() and local.stat().st_size == info.size and local.stat().st_mtime >= info.modified_at.timestamp()
        if not fresh:
            local.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=local.parent, prefix=".ba-tmp-", delete=False) as tmp:
                self._s3.download_fileobj(self._bucket, self._key(vpath), tmp)
            os.replace(tmp.name, local)
        return local

    def _commit(self, path: str) -> FileInfo:
        vpath = self._normalize(path)
        local = self._cached(vpath)
        if not local.is_file():
            raise FileNotFound(f"no such file or directory: {vpath}", vpath)
        return self._write(vpath, local.read_bytes(), overwrite=True)


    # ---------------------------------------------------------------- server files beside the areas

    def _private_key(self, name: str) -> str:
        if name in self._areas or "/" in name or name.startswith("."):
            raise ValueError(f"not a private file name: {name!r}")
        return f"{self._root}/{name}"

    def _pull_private(self, name: str) -> Path:
        """Download the stored copy unless the local one is that version (its ETag is kept
        beside it); a conversation without one yet has none to fetch."""
        local = self._cache / name
        marker = self._cache / f".{name}.etag"
        head = self._head_key(self._private_key(name))
        if head is None:
            return local
        if local.is_file() and marker.is_file() and marker.read_text() == head["ETag"]:
            return local
        local.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=local.parent, prefix=".ba-tmp-", delete=False) as tmp:
            self._s3.download_fileobj(self._bucket, self._private_key(name), tmp)
        os.replace(tmp.name, local)
        marker.write_text(head["ETag"])
        return local

    def _push_private(self, name: str) -> None:
        local = self._cache / name
        if not local.is_file():
            return
        with local.open("rb") as f:
            answer = self._s3.put_object(Bucket=self._bucket, Key=self._private_key(name), Body=f)
        (self._cache / f".{name}.etag").write_text(answer["ETag"])

    def _head_key(self, key: str) -> dict[str, Any] | None:
        from botocore.exceptions import ClientError

        try:
            return dict(self._s3.head_object(Bucket=self._bucket, Key=key))
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("404", "NoSuchKey", "NotFound"):
                return None
            raise


def s3_workspace_for(
    client: Any, url: str, cache_dir: Path, name: str, limits: WorkspaceLimits | None = None
) -> S3Workspace:
    """The workspace of one conversation under ``url`` (``s3://bucket/prefix``): its own key
    prefix ``name`` (the conversation's encoded thread id, as `LocalWorkspace`'s folder), so
    conversations never name each other's files; `cache_dir` is the conversation's own local
    folder."""
    bucket, prefix = parse_workspace_url(url)
    root = f"{prefix}/{name}" if prefix else name
    return S3Workspace(client, bucket, root, Path(cache_dir), limits)
