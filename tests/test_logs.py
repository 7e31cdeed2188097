"""The log writer: every line reaches the sink, in order, even when the process exits at once."""

from __future__ import annotations

import subprocess
import sys

from tests.waiting import scaled

SCRIPT = """
import logging
from gateway.logs import configure_logging

configure_logging("INFO", "text", "svc", "test")
log = logging.getLogger("burst")
for i in range(3000):
    log.info("line %d", i)
try:
    1 / 0
except ZeroDivisionError:
    log.exception("last")
"""


def test_a_burst_logged_just_before_exit_is_written_whole_and_in_order() -> None:
    result = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=scaled(60), check=True)
    lines = result.stderr.splitlines()
    numbered = [line.rsplit(" ", 1)[1] for line in lines if "burst: line" in line]
    assert numbered == [str(i) for i in range(3000)]
    assert "[svc/test] burst: last" in result.stderr and lines[-1] == "ZeroDivisionError: division by zero"
