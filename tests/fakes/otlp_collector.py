"""A tiny OpenTelemetry collector: ``POST /v1/traces`` over OTLP/HTTP (protobuf), recorded.

Point an ``OTLPSpanExporter(endpoint=collector.traces_url)`` -- or ``BA_OTEL_ENDPOINT`` -- at it
and read what arrived from :attr:`FakeCollector.spans`. Requests are decoded with the OTLP
protobuf messages (``opentelemetry-proto``, installed with the OTLP/HTTP exporter), as a real
collector would; anything else is refused the way the OTLP/HTTP spec says (415 / 400).
"""

from __future__ import annotations

import gzip
import threading
from dataclasses import dataclass
from typing import Any

from aiohttp import web
from google.protobuf.message import DecodeError
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from . import FakeServer

__all__ = ["CollectedSpan", "FakeCollector"]

_PROTOBUF = "application/x-protobuf"


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return None if kind is None else getattr(value, kind)


@dataclass(frozen=True)
class CollectedSpan:
    """One exported span with its resource's attributes (e.g. ``service.name``)."""

    name: str
    trace_id: str
    attributes: dict[str, Any]
    resource: dict[str, Any]


class FakeCollector(FakeServer):
    """Accepts OTLP/HTTP trace exports and keeps the decoded spans."""

    def __init__(self) -> None:
        super().__init__()
        self.exports: list[ExportTraceServiceRequest] = []
        self._lock = threading.Lock()

    @property
    def traces_url(self) -> str:
        """The full OTLP/HTTP traces endpoint (what ``BA_OTEL_ENDPOINT`` takes)."""
        return f"{self.root_url}/v1/traces"

    @property
    def spans(self) -> list[CollectedSpan]:
        with self._lock:
            exports = list(self.exports)
        found = []
        for export in exports:
            for resource_spans in export.resource_spans:
                resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
                for scope_spans in resource_spans.scope_spans:
                    for span in scope_spans.spans:
                        found.append(
                            CollectedSpan(
                                name=span.name,
                                trace_id=span.trace_id.hex(),
                                attributes={a.key: _value(a.value) for a in span.attributes},
                                resource=resource,
                            )
                        )
        return found

    def wait_for_spans_sync(self, *names: str, timeout: float = 15) -> list[CollectedSpan]:
        """Block until a span of each name arrived; returns every span so far."""
        self._wait_until_sync(lambda: set(names) <= {s.name for s in self.spans}, timeout, f"spans {names}")
        return self.spans

    def _routes(self) -> list[web.RouteDef]:
        return [web.post("/v1/traces", self._traces)]

    async def _traces(self, request: web.Request) -> web.Response:
        if request.content_type != _PROTOBUF:
            return web.Response(status=415, text=f"expected {_PROTOBUF}")
        body = await request.read()
        if request.headers.get("Content-Encoding", "").lower() == "gzip":
            body = gzip.decompress(body)
        export = ExportTraceServiceRequest()
        try:
            export.ParseFromString(body)
        except DecodeError:
            return web.Response(status=400, text="not an ExportTraceServiceRequest")
        with self._lock:
            self.exports.append(export)
        return web.Response(body=ExportTraceServiceResponse().SerializeToString(), content_type=_PROTOBUF)
