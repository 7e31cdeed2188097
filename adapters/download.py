"""Downloading a user's file from a platform URL: size-capped, redirect-safe, no login pages."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import aiohttp

MAX_REDIRECTS = 5


class AttachmentError(Exception):
    """The file could not be fetched; the message is safe to show the user."""


async def download(
    session: aiohttp.ClientSession,
    url: str,
    dest: Path,
    *,
    headers: dict[str, str],
    max_bytes: int,
    allowed_host_suffixes: tuple[str, ...],
) -> Path:
    """Fetch `url` into `dest` atomically.

    Credentials in `headers` go only to the original host. Redirects are followed (up to
    MAX_REDIRECTS) only with the same scheme and to the original host or an allowed host
    suffix, so a crafted redirect cannot send the token, or the request, elsewhere.
    """
    origin = urlsplit(url)
    current = url
    for _ in range(MAX_REDIRECTS + 1):
        target = urlsplit(current)
        same_host = target.hostname == origin.hostname
        async with session.get(
            current, headers=headers if same_host else {}, allow_redirects=False
        ) as resp:
            if resp.status in (301, 302, 303, 307, 308):
                location = urljoin(current, resp.headers.get("Location", ""))
                nxt = urlsplit(location)
                host_ok = nxt.hostname == origin.hostname or (
                    nxt.hostname or ""
                ).endswith(allowed_host_suffixes)
                if nxt.scheme != origin.scheme or not host_ok:
                    raise AttachmentError(f"refused to follow a redirect to {nxt.hostname}")
                current = location
                continue
            if resp.status != 200:
                raise AttachmentError(f"download failed with HTTP {resp.status}")
            if resp.content_type == "text/html":
                raise AttachmentError(
                    "the platform answered with a login page instead of the file "
                    "(the bot may lack permission to read files)"
                )
            if resp.content_length is not None and resp.content_length > max_bytes:
                raise AttachmentError(f"the file is larger than the {max_bytes // 1024**2} MB limit")
            return await _write_capped(resp, dest, max_bytes)
    raise AttachmentError("too many redirects")


async def _write_capped(resp: aiohttp.ClientResponse, dest: Path, max_bytes: int) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f".{uuid.uuid4().hex}.part")  # `dest` may be a maximal-length name
    size = 0
    try:
        with open(tmp, "wb") as out:
            async for chunk in resp.content.iter_chunked(256 * 1024):
                size += len(chunk)
                if size > max_bytes:
                    raise AttachmentError(f"the file is larger than the {max_bytes // 1024**2} MB limit")
                out.write(chunk)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)
    return dest
