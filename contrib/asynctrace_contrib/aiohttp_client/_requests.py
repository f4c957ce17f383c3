"""The per-request work of both forms: inject the context, start and end the CLIENT span."""

from __future__ import annotations

import logging
from typing import Any

import aiohttp
from opentelemetry.context import _SUPPRESS_HTTP_INSTRUMENTATION_KEY as _SUPPRESS_HTTP
from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY as _SUPPRESS
from opentelemetry.trace import Span, SpanKind, Status, StatusCode

import asynctrace
from asynctrace_contrib._http import (
    header_attribute,
    header_secrets,
    recorded_header_values,
    url_secrets,
)
from asynctrace_contrib._http_values import KNOWN_METHODS, method_attributes

from ._attributes import ServerAttributes, add_request_headers, url_attributes
from ._body import BodyWatch
from ._options import Options, custom_name, run_hook
from ._propagation import HANDLED, get_current, inject
from ._resends import attempted

__all__ = ["GATE_GROUP", "Requests"]

logger = logging.getLogger("asynctrace")

GATE_GROUP = "per_prompt"
# The public names each request calls, looked up once.
_is_enabled = asynctrace.is_span_group_enabled
_start_span = asynctrace.start_span
_span_carrier = asynctrace.span_carrier
_current_carrier = asynctrace.current_trace_carrier
_end_span = asynctrace.end_span
_CLIENT = SpanKind.CLIENT


def _start_custom(
    options: Options, name: str, attrs: dict[str, Any], method: str, headers: Any, params: Any
) -> Span:
    """Start a span with a custom name or recorded request headers."""
    if options.span_name is not None:
        name = custom_name(options, options.span_name, name, method, params)
    if options.record_request_headers:
        attrs = attrs.copy()  # the URL's are kept for the next request
        add_request_headers(attrs, headers, options.record_request_headers)
    return _start_span(GATE_GROUP, name, kind=_CLIENT, attributes=attrs, urls_redacted=True)


class Requests:
    """The per-request work shared by the middleware and the TraceConfig forms.

    Written flat on purpose: every Python call here shows in the per-request
    figure, so helpers are inlined on the recorded path.
    """

    __slots__ = ("_count_resends", "_last", "options")

    def __init__(self, options: Options, *, count_resends: bool = False) -> None:
        self.options = options
        # The middleware form sees each attempt of a request (a redirect hop, a retry):
        # one answered 3xx or more may be followed by a resend (see _resends).
        self._count_resends = count_resends
        # The last recorded request's URL object, method, attributes, default name
        # and (plain options) the function of its URL's attributes: yarl hands back
        # the same (immutable) URL object for the same URL string, so a pump that
        # calls one endpoint again and again builds none of them again.
        self._last: tuple[Any, str, dict[str, Any], str, Any] = (None, "", {}, "", None)

    def begin(
        self, method: str, url: Any, headers: Any, params: Any, injected: str | None = None
    ) -> Span | None:
        """Inject the context; start the CLIENT span when per_prompt is on.

        A request whose ``traceparent`` is already set (by the caller, or by
        another HTTP instrumentation that ran first) names its parent already:
        a span of ours would not be the one the server sees, so none is
        started. The exception is *injected*, the ``traceparent`` this layer
        set on the same request object for an earlier attempt (a retry
        middleware sends one request again): it is replaced, and the attempt
        gets a span of its own. Inside OpenTelemetry's
        ``suppress_http_instrumentation``, nothing is done at all.
        """
        current = get_current()
        http = current.get(_SUPPRESS_HTTP)
        if (http and http is not HANDLED) or current.get(_SUPPRESS):
            return None
        if "traceparent" in headers:
            if injected is None or headers.get("traceparent") != injected:
                inject(headers, _current_carrier())
                return None
            del headers["traceparent"]  # an earlier attempt's, ours: this one gets its own
        options = self.options
        last = self._last
        if last[0] is not url or last[1] != method:
            if not _is_enabled(GATE_GROUP):  # before any work for the URL, or a hook
                inject(headers, _current_carrier())
                return None
            name = method if method in KNOWN_METHODS else "HTTP"
            if options.plain:
                # The URL's attributes (str(url), its redaction, host and port: microseconds
                # on a cold cache) are computed by an export thread, not here.
                attrs = method_attributes(method)[1]
                lazy = ServerAttributes(url, options.secret_keys)
                self._last = (url, method, attrs, name, lazy)
                span = _start_span(
                    GATE_GROUP,
                    name,
                    kind=_CLIENT,
                    attributes=attrs,
                    urls_redacted=True,
                    lazy_attributes=lazy,
                )
            else:  # a hook or a custom name may read them: computed now
                attrs = url_attributes(method, url, options.secret_keys)
                self._last = (url, method, attrs, name, None)
                span = _start_custom(options, name, attrs, method, headers, params)
        elif options.plain:
            # The common case: the attributes, the name and the URL's function as last
            # time (start_span keeps a merged copy, never the dict given), and
            # start_span's own gate (a disabled group gives a span that is not recording).
            # Once an export thread has computed the URL's attributes, they are kept
            # with the others: the next requests to it give them at start.
            lazy = last[4]
            if lazy is not None and lazy.done is not None:
                last = (url, method, {**last[2], **lazy.done}, last[3], None)
                self._last = last
                lazy = None
            span = _start_span(
                GATE_GROUP,
                last[3],
                kind=_CLIENT,
                attributes=last[2],
                urls_redacted=True,
                lazy_attributes=lazy,
            )
        else:
            if not _is_enabled(GATE_GROUP):  # before a hook
                inject(headers, _current_carrier())
                return None
            span = _start_custom(options, last[3], last[2], method, headers, params)
        if not span.is_recording():
            inject(headers, _current_carrier())
            return None
        carrier = _span_carrier(span)
        if len(carrier) == 1:  # its traceparent alone, where none is set now (see above)
            headers["traceparent"] = carrier["traceparent"]
        else:
            inject(headers, carrier)
        if options.request_hook is not None:
            run_hook(options, "request_hook", options.request_hook, span, params)
        return span

    def response(self, span: Span, response: aiohttp.ClientResponse, params: Any) -> None:
        """Record the status; end the span when the response lets go of its connection.

        aiohttp releases the connection at the end of the body, on
        ``release()``, on ``close()`` and when an unreleased response is
        collected, and calls the connection's callbacks exactly once, so one
        callback covers every way a response ends but one: the connection lost
        (the session closed) while an abandoned response holds it, which
        :class:`BodyWatch` sees too. A response whose body arrived with its
        headers has released its connection already: the span ends here.
        """
        options = self.options
        status = response.status
        span.set_attribute("http.response.status_code", status)
        if options.record_response_headers:
            for header in options.record_response_headers:
                values = response.headers.getall(header, ())
                if values:
                    name = header_attribute("http.response.header", header)
                    span.set_attribute(name, recorded_header_values(header, list(values)))
        if status >= 300:  # a redirect, or an error a retry middleware may resend
            if status >= 400:
                span.set_attribute("error.type", str(status))
                span.set_status(Status(StatusCode.ERROR))
            if self._count_resends:
                attempted(params)
        if options.response_hook is not None:
            run_hook(options, "response_hook", options.response_hook, span, params)
        connection = response.connection
        if connection is None:
            _end_span(span)
            return
        try:
            # The body's stream, not the response: the response holds the connection,
            # and a callback holding the response would keep an abandoned one alive.
            BodyWatch(span, response.content, connection)
        except Exception:  # an aiohttp without connection callbacks: end at the headers
            logger.warning("asynctrace: cannot follow the response body", exc_info=True)
            asynctrace.end_span(span)

    def failed(self, span: Span, exc: BaseException, url: Any, headers: Any) -> None:
        """The request raised (or was cancelled) before a response arrived.

        aiohttp's messages name the URL (``Connection timeout to host
        http://...?token=...``): what is recorded of the exception is redacted
        with this request's secrets, its userinfo, secret-like query values and
        header values, the ones the exception carries included.
        """
        if not isinstance(exc, Exception):
            asynctrace.end_span(span, exc)
            return
        status = exc.status if isinstance(exc, aiohttp.ClientResponseError) else None
        if type(status) is int and status > 0:
            # raise_for_status: a response arrived; its status is the request's.
            span.set_attribute("http.response.status_code", status)
        if type(status) is int and status >= 400:
            span.set_attribute("error.type", str(status))
        else:
            span.set_attribute("error.type", type(exc).__qualname__)
        keys = self.options.secret_keys
        secrets: set[str] = set()
        try:
            secrets |= url_secrets(str(url), keys)
            info = getattr(exc, "request_info", None)
            carried = getattr(exc, "headers", None) or ()
            secrets |= header_secrets(headers, carried, getattr(info, "headers", None) or ())
            for known in (getattr(info, "url", None), getattr(info, "real_url", None)):
                if known is not None:
                    secrets |= url_secrets(str(known), keys)
        except Exception:  # an odd exception object: the default redaction still applies
            logger.debug("asynctrace: could not read the failed request", exc_info=True)
        asynctrace.end_span(span, exc, secrets=secrets)
