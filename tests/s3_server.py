"""A local S3-compatible server for tests: moto's server mode on loopback, in this process."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

# Credentials and region for boto3's own chain: the local server accepts any.
S3_ENV = {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}


@contextmanager
def s3_server() -> Iterator[str]:
    """Start the server on a free loopback port; yields its endpoint URL."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


def new_bucket(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, str]:
    """A client of the server and a new, empty bucket on it."""
    from agent_core.workspace.s3 import s3_client

    for name, value in S3_ENV.items():
        monkeypatch.setenv(name, value)
    client = s3_client(endpoint)
    bucket = f"ws-{uuid.uuid4().hex[:12]}"
    client.create_bucket(Bucket=bucket)
    return client, bucket
