"""OpenTelemetry's OTLP/HTTP exporter, which also posts requests encoded by asynctrace.

:class:`HttpSpanExporter` is OpenTelemetry's ``OTLPSpanExporter``
(``opentelemetry-exporter-otlp-proto-http``), configured by the same
arguments and ``OTEL_EXPORTER_OTLP_*`` variables. Given the SDK's spans it
works as OpenTelemetry's does, except that a batch holding spans
OpenTelemetry cannot encode is sent without them. Given
:class:`~._otlp_wire.EncodedSpan` items (the fast provider's spans, encoded
on the export thread), it puts them into one request and posts the bytes
through the exporter's own HTTP client: endpoint, headers, timeout,
compression, certificates and the retries inside one attempt stay
OpenTelemetry's.

OTLP/HTTP lets a client retry 429, 502, 503 and 504 only; every other
status of 400 or more refuses the batch for good. OpenTelemetry's client
does not follow redirects but counts a 3xx delivered: here it refuses the
batch too. So does a request that could not even be made here (an invalid
header or URL, a certificate file that is missing): it would fail the same
way every time, whereas no answer at all (refused, reset, timed out) is
worth another attempt.

The reply of a delivered batch is read as an ``ExportTraceServiceResponse``:
its ``partial_success`` says how many spans the collector rejected. A
retryable status's ``Retry-After`` (seconds or an HTTP date) is kept for the
retry buffer, which waits that long before the next attempt.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from collections.abc import Sequence
from datetime import timezone
from email.utils import parsedate_to_datetime
from typing import Any

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace.export import SpanExportResult

from ._otlp_wire import EncodedSpan, request_bytes

__all__ = ["HttpSpanExporter"]

_logger = logging.getLogger("opentelemetry.exporter.otlp.proto.http.trace_exporter")

# The statuses OTLP/HTTP says to retry; any other failure status must not be retried.
_RETRYABLE = frozenset((429, 502, 503, 504))


class HttpSpanExporter(OTLPSpanExporter):
    """``OTLPSpanExporter`` over http/protobuf that also takes encoded spans.

    After each :meth:`export` it says how the batch failed, for the retry
    buffer: :attr:`refused` (for good: a status other than 429, 502, 503 and
    504, a redirect, a batch that cannot be sent at all), :attr:`transient`
    (a status the collector asks to be retried) with :attr:`retry_after`,
    :attr:`left_out` (spans of a delivered batch that could not be encoded
    and were not sent), and :attr:`rejected` with :attr:`rejection` (spans
    of a delivered batch the collector rejected, and its message).

    Example:
        >>> exporter = HttpSpanExporter(endpoint="http://127.0.0.1:4318/v1/traces")
        >>> exporter.sends_encoded
        True
        >>> exporter.shutdown()
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _read_environment_once(self)
        self.refused: str | None = None
        """Why the last batch failed for good (another attempt would fail again), else None."""
        self.transient: str | None = None
        """The status of the last batch's failure when it is one to retry (``HTTP 503``)."""
        self.left_out = 0
        """Spans of the last batch, delivered, that were left out: they cannot be encoded."""
        self.rejected = 0
        """Spans of the last batch, delivered, that the collector rejected (partial success)."""
        self.rejection: str | None = None
        """The collector's ``partial_success.error_message`` for the last batch, if any."""
        self.retry_after: float | None = None
        """Seconds the collector asked to wait (``Retry-After``) after the last failure."""
        self._status: int | None = None  # the last response's, whichever path sent it
        self._error: Any = None  # the last request's error, when it got no response
        self._reply: Any = None  # the transport's last result (a response, or an error)
        self._requested = False  # whether the last export made a request at all
        self._unsent = "not sent"  # why not, when it made none
        client = getattr(self, "_client", None)
        send = getattr(client, "export", None)
        self._notes_requests = callable(send)
        if callable(send):

            def export_noting_the_status(data: bytes) -> Any:
                self._requested = True
                outcome = send(data)
                status = getattr(outcome, "status_code", None)
                self._status = status if isinstance(status, int) else None
                self._error = getattr(outcome, "error", None)
                return outcome

            client.export = export_noting_the_status  # type: ignore[union-attr]
        transport = getattr(client, "_transport", None)
        request = getattr(transport, "request", None)
        if callable(request):

            def request_noting_the_reply(*args: Any, **kwargs: Any) -> Any:
                reply = request(*args, **kwargs)
                self._reply = reply  # its body and headers are read after the export
                return reply

            with contextlib.suppress(Exception):  # a transport with slots: no reply is read
                transport.request = request_noting_the_reply  # type: ignore[union-attr]

    def export(self, spans: Sequence[Any]) -> SpanExportResult:
        """Export SDK spans (OpenTelemetry encodes them) or :class:`EncodedSpan` items."""
        self._status = None
        self._reply = self._error = None
        self._requested = False
        self._unsent = "not sent"
        self.left_out = self.rejected = 0
        self.rejection = self.retry_after = None
        result = self._export_either(spans)
        status = self.last_status()  # set by the client's export, when it made a request
        if status is not None and 300 <= status < 400:
            # OpenTelemetry's client does not follow redirects and counts them delivered.
            result = SpanExportResult.FAILURE
        self.refused = self.transient = None
        if result is SpanExportResult.FAILURE:
            self.left_out = 0
            if status is None:
                if self._notes_requests and not self._requested and not self._shutdown:
                    self.refused = self._unsent
                elif self._requested and not self._shutdown and _made_here(self._error):
                    self.refused = f"the request could not be made: {type(self._error).__name__}"
            elif status in _RETRYABLE:
                self.transient = f"HTTP {status}"
                self.retry_after = _retry_after(self._reply)
            elif status < 400:
                self.refused = f"HTTP {status}: redirect not followed"
            else:
                self.refused = f"HTTP {status}"
        elif status is not None:
            self._read_partial_success()
        return result

    def _read_partial_success(self) -> None:
        """:attr:`rejected` and :attr:`rejection` from the reply of a delivered batch."""
        reply = self._reply
        if reply is None or getattr(reply, "status_code", None) != self._status:
            return
        try:
            body = reply.content()
            if not body:
                return
            partial = ExportTraceServiceResponse.FromString(body).partial_success
        except Exception:  # not OTLP protobuf (a proxy's page, say): nothing said
            return
        self.rejected = max(0, int(partial.rejected_spans))
        self.rejection = partial.error_message or None

    @property
    def sends_encoded(self) -> bool:
        """Whether the installed exporter has the client this posts encoded requests with."""
        return self._notes_requests

    def last_status(self) -> int | None:
        """The HTTP status of the last response (``None``: no response, or not sent)."""
        return self._status

    def _export_either(self, spans: Sequence[Any]) -> SpanExportResult:
        if not spans or spans[0].__class__ is not EncodedSpan:
            return self._export_spans(spans)
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
                self._unsent = f"too large: {len(data)} bytes, over max_request_size {limit}"
                return SpanExportResult.FAILURE
            outcome = self._client.export(data)
            if not outcome.success:
                if result is not None:
                    result.error = outcome.error
                return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def _export_spans(self, spans: Sequence[Any]) -> SpanExportResult:
        """OpenTelemetry's export of SDK spans; a batch it cannot encode loses its bad spans only.

        Without a request, OpenTelemetry's exporter failed to encode the batch
        or found it too large; each span is then encoded alone to tell which,
        and the ones that encode are sent without the others.
        """
        result = super().export(spans)
        if result is SpanExportResult.SUCCESS or self._requested or self._shutdown:
            return result
        if not self._notes_requests:  # whether a request went out is not known
            return result
        bad = [index for index, span in enumerate(spans) if not _encodes(span)]
        if bad and len(bad) < len(spans):
            left_out = set(bad)
            result = super().export([s for i, s in enumerate(spans) if i not in left_out])
            if result is SpanExportResult.SUCCESS:
                self.left_out = len(bad)
        if not self._requested:
            limit = getattr(self, "_max_request_size", 0)
            self._unsent = (
                "could not be encoded" if bad else f"too large for max_request_size {limit}"
            )
        return result


def _made_here(error: Any) -> bool:
    """Whether *error* failed the request before it left (the same every time), not the network.

    ``requests``' invalid header, URL and schema errors, and what it does
    not wrap: a certificate file that is missing (``OSError``), a header
    that cannot be encoded. Connection errors, timeouts and TLS failures
    say nothing of the next attempt.
    """
    if error is None:
        return False
    try:
        from requests import exceptions
    except ImportError:  # another transport: whether the next attempt fails is not known
        return False
    if isinstance(error, exceptions.RequestException):  # an OSError too: checked first
        local = (
            exceptions.InvalidHeader,
            exceptions.InvalidURL,
            exceptions.MissingSchema,
            exceptions.InvalidSchema,
            exceptions.URLRequired,
        )
        return isinstance(error, local) and not isinstance(error, exceptions.ConnectionError)
    return isinstance(error, (OSError, UnicodeError, TypeError))


def _retry_after(reply: Any) -> float | None:
    """The seconds a reply's ``Retry-After`` asks to wait (RFC 9110: seconds or a date)."""
    try:
        value = reply.headers().get("retry-after")
        if not isinstance(value, str):
            return None
        value = value.strip()
        try:
            seconds = float(value)
        except ValueError:
            when = parsedate_to_datetime(value)
            if when.tzinfo is None:  # an HTTP date is in GMT
                when = when.replace(tzinfo=timezone.utc)
            return max(0.0, when.timestamp() - time.time())
        return max(0.0, seconds) if math.isfinite(seconds) else None
    except Exception:  # no reply, no headers, a malformed date
        return None


def _encodes(span: Any) -> bool:
    """Whether OpenTelemetry's encoder takes *span* alone."""
    try:
        encode_spans([span]).SerializePartialToString()
    except Exception:  # a lone surrogate in its name, say
        return False
    return True


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
