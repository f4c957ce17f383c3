"""OpenTelemetry's OTLP/HTTP exporter, which also posts requests encoded by asynctrace.

:class:`HttpSpanExporter` is OpenTelemetry's ``OTLPSpanExporter``
(``opentelemetry-exporter-otlp-proto-http``), configured by the same
arguments and ``OTEL_EXPORTER_OTLP_*`` variables. Given the SDK's spans it
works as OpenTelemetry's does. Given :class:`~._otlp_wire.EncodedSpan`
items (the fast provider's spans, encoded on the export thread), it puts them
into one request and posts the bytes through the exporter's own HTTP client:
endpoint, headers, timeout, compression, certificates and the retries inside
one attempt stay OpenTelemetry's.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from ._otlp_wire import EncodedSpan, request_bytes

__all__ = ["HttpSpanExporter"]

_logger = logging.getLogger("opentelemetry.exporter.otlp.proto.http.trace_exporter")
# Client errors another attempt may get past: the request timed out, too many requests.
_TRANSIENT = frozenset((408, 429))


class HttpSpanExporter(OTLPSpanExporter):
    """``OTLPSpanExporter`` over http/protobuf that also takes encoded spans.

    Example:
        >>> exporter = HttpSpanExporter(endpoint="http://127.0.0.1:4318/v1/traces")
        >>> exporter.sends_encoded
        True
        >>> exporter.shutdown()
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _read_environment_once(self)
        # Why the backend refused the last batch for good (an HTTP status that another
        # attempt would meet again), else None: read by the retry buffer.
        self.refused: str | None = None
        self._status: int | None = None  # the last response's, whichever path sent it
        client = getattr(self, "_client", None)
        send = getattr(client, "export", None)
        if callable(send):

            def export_noting_the_status(data: bytes) -> Any:
                outcome = send(data)
                status = getattr(outcome, "status_code", None)
                self._status = status if isinstance(status, int) else None
                return outcome

            client.export = export_noting_the_status  # type: ignore[union-attr]

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        """Export SDK spans (OpenTelemetry encodes them) or :class:`EncodedSpan` items."""
        self._status = None
        result = self._export_either(spans)
        status = self.last_status()
        self.refused = (
            f"HTTP {status}"
            if result is SpanExportResult.FAILURE
            and status is not None
            and 400 <= status < 500
            and status not in _TRANSIENT
            else None
        )
        return result

    @property
    def sends_encoded(self) -> bool:
        """Whether the installed exporter has the client this posts encoded requests with."""
        return callable(getattr(getattr(self, "_client", None), "export", None))

    def last_status(self) -> int | None:
        """The HTTP status of the last response (``None``: no response, or not sent)."""
        return self._status

    def _export_either(self, spans: Sequence[Any]) -> SpanExportResult:
        if not spans or spans[0].__class__ is not EncodedSpan:
            return super().export(spans)
        if self._shutdown:
            _logger.warning("Exporter already shutdown, ignoring batch")
            return SpanExportResult.FAILURE
        data = request_bytes(spans)
        metrics = getattr(self, "_metrics", None)
        operation = metrics.export_operation(len(spans)) if metrics is not None else None
        with operation or contextlib.nullcontext() as result:
            limit = getattr(self, "_max_request_size", 0) or 0
            if 0 < limit < len(data):
                _logger.warning(
                    "Dropping span batch: serialized size %d bytes exceeds max_request_size "
                    "%d bytes.",
                    len(data),
                    limit,
                )
                return SpanExportResult.FAILURE
            outcome = self._client.export(data)
            if not outcome.success:
                if result is not None:
                    result.error = outcome.error
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS


def _read_environment_once(exporter: Any) -> None:
    """Read the proxy and CA-bundle variables now, not on every request.

    ``requests`` looks them up for every request of a session that trusts the
    environment: ``getproxies()`` scans all of ``os.environ`` (about 150 µs a
    request here). The session gets what they say now (``HTTP(S)_PROXY`` and
    ``NO_PROXY`` for the endpoint, ``REQUESTS_CA_BUNDLE`` or
    ``CURL_CA_BUNDLE`` when certificates are verified by default) and stops
    reading them; ``.netrc`` is not consulted (OTLP authenticates with
    headers). A session of an unexpected shape is left as it is.
    """
    client = getattr(exporter, "_client", None)
    session = getattr(getattr(client, "_transport", None), "_session", None)
    endpoint = getattr(exporter, "_endpoint", None)
    try:
        import requests
        from requests.utils import get_environ_proxies

        if not isinstance(session, requests.Session) or not isinstance(endpoint, str):
            return
        if not session.trust_env:
            return
        proxies = get_environ_proxies(endpoint)
        if session.verify is True:
            bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
            if bundle:
                session.verify = bundle
        session.proxies.update(proxies)
        session.trust_env = False
    except Exception:  # requests changed: it keeps reading the environment itself
        return
