"""`GET /metrics`: this replica's counters and histograms, in Prometheus text format.

Every process of a replica — `serve` and the worker processes it starts — counts in
prometheus-client's multiprocess mode: `serve` makes a directory of its own for the run under
``BA_DATA_DIR/metrics`` and passes it to its workers in ``PROMETHEUS_MULTIPROC_DIR``; a scrape
sums the files there. So `/metrics` reports this replica only, and summing replicas is right.
Directories left by runs whose `serve` is gone (a SIGKILL, a crash) are removed at the next
start on the same host. A `ba-agent worker` started on its own has no `/metrics`.

The one figure read from the database at scrape time is the inbox's pending events: it is the
same for every replica on one database (its HELP says so; take the max, not the sum).
"""

from __future__ import annotations

import functools
import os
from collections.abc import Iterator

from aiohttp import web
from aiohttp.abc import AbstractAccessLogger
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import REGISTRY

from gateway.service.metrics_dir import MULTIPROC_ENV

HTTP_REQUESTS = Counter(
    "ba_agent_http_requests", "HTTP requests served by this replica, by method, route and status", ["method", "route", "status"]
)
HTTP_DURATION = Histogram(
    "ba_agent_http_request_duration_seconds", "HTTP request handling time, by method and route", ["method", "route"]
)
ACK_LATENCY = Histogram(
    "ba_agent_ack_latency_seconds",
    "Time to acknowledge a platform event delivery over HTTP (stored in the inbox first), by platform",
    ["platform"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 3, 5),
)
TURN_DURATION = Histogram(
    "ba_agent_turn_duration_seconds",
    "Time the agent took for a turn (model calls and tools), by how it ended",
    ["outcome"],
    buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600),
)
WORKER_RESTARTS = Counter("ba_agent_worker_restarts", "Worker processes that died and were restarted by serve")


class _ScrapeGauges:
    """Figures read at scrape time by this process alone: the inbox and the worker pool."""

    def __init__(self, pending_events: int, workers: tuple[int, int], feedback: dict[str, int]) -> None:
        self._pending = pending_events
        self._workers = workers
        self._feedback = feedback

    def collect(self) -> Iterator[Metric]:
        pending = GaugeMetricFamily(
            "ba_agent_inbox_pending_events",
            "Accepted events not yet answered, in the whole database: every replica on one "
            "database reports the same value (take max, not sum)",
        )
        pending.add_metric([], self._pending)
        yield pending
        ready, configured = self._workers
        workers = GaugeMetricFamily(
            "ba_agent_workers", "This replica's worker processes (0 configured: serve answers itself)", labels=["state"]
        )
        workers.add_metric(["ready"], ready)
        workers.add_metric(["configured"], configured)
        yield workers
        feedback = GaugeMetricFamily(
            "ba_agent_answer_feedback",
            "Current 👍 (helpful) and 👎 (not_helpful) ratings of answers, in the whole database "
            "(take max, not sum)",
            labels=["rating"],
        )
        for rating, count in sorted(self._feedback.items()):
            feedback.add_metric([rating], count)
        yield feedback


def render_metrics(pending_events: int, workers: tuple[int, int], feedback: dict[str, int] | None = None) -> bytes:
    """The replica's metrics: every process's files in multiprocess mode, else this one's."""
    registry = CollectorRegistry(auto_describe=False)
    if (path := os.environ.get(MULTIPROC_ENV)) is not None:
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry, path=path)
        body = generate_latest(registry)
    else:
        body = generate_latest(REGISTRY)
    scrape = CollectorRegistry(auto_describe=False)
    scrape.register(_ScrapeGauges(pending_events, workers, feedback or {}))
    return body + generate_latest(scrape)


_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})

# Path → platform of the routes that take platform event deliveries (set by `create_app`).
EVENT_ROUTES = web.AppKey("event_routes", dict)
# Where `label_request` leaves a routed request's labels: (route, platform or None).
_LABELS = web.RequestKey("metric_labels", tuple)


async def label_request(request: web.Request, _response: web.StreamResponse) -> None:
    """`on_response_prepare` hook: the labels a request is counted under. Only a request the
    application routed gets here; one refused before routing (a malformed request line) is
    counted as "unmatched"."""
    resource = request.match_info.route.resource
    route = resource.canonical if resource is not None else "unmatched"
    request[_LABELS] = (route, request.app[EVENT_ROUTES].get(route) if request.method == "POST" else None)


class HttpMetrics(AbstractAccessLogger):
    """Counts each request and its duration once its response has been sent: aiohttp's
    access-log hook (see `gateway.service.app.RUNNER_OPTIONS`), so this bookkeeping is not on
    the acknowledgement's path. A platform event delivery's duration — read to written — is
    also its acknowledgement latency."""

    def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
        route, platform = request.get(_LABELS) or ("unmatched", None)
        method = request.method if request.method in _METHODS else "other"  # bounded labels
        requests, duration = _http_series(method, route, response.status)
        requests.inc()
        duration.observe(time)
        if platform is not None:
            _ack_series(platform).observe(time)


# A series is looked up once per label values, not per request: `labels()` takes a lock and
# checks its arguments every time. The label values are bounded (methods, routes, statuses).
@functools.cache
def _http_series(method: str, route: str, status: int) -> tuple[Counter, Histogram]:
    return HTTP_REQUESTS.labels(method, route, str(status)), HTTP_DURATION.labels(method, route)


@functools.cache
def _ack_series(platform: str) -> Histogram:
    return ACK_LATENCY.labels(platform)
