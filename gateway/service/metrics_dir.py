"""The per-run directory of prometheus-client's multiprocess mode (see `gateway.service.metrics`).

Apart from `gateway.service.metrics` because it runs before prometheus-client is imported, which
decides at import time whether it counts in files.
"""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from pathlib import Path

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"


def start_multiprocess(data_dir: Path) -> Path:
    """Make this run's metrics directory and put it in the environment, before anything
    imports prometheus-client's values (call first thing in `serve`); clear the directories of
    dead runs on this host."""
    parent = data_dir / "metrics"
    parent.mkdir(parents=True, exist_ok=True)
    host = socket.gethostname()
    for stale in parent.glob(f"{host}-*-*"):
        pid = stale.name.split("-")[-2]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(stale, ignore_errors=True)
    run_dir = Path(tempfile.mkdtemp(prefix=f"{host}-{os.getpid()}-", dir=parent))
    os.environ[MULTIPROC_ENV] = str(run_dir)
    return run_dir


def stop_multiprocess(run_dir: Path) -> None:
    shutil.rmtree(run_dir, ignore_errors=True)


def forget_process(pid: int) -> None:
    """A worker is gone: drop its live-gauge files (its counters stay counted)."""
    if (path := os.environ.get(MULTIPROC_ENV)) is not None:
        from prometheus_client import multiprocess

        multiprocess.mark_process_dead(pid, path)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
