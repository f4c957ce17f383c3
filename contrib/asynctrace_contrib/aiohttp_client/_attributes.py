"""A request's span attributes: method, redacted URL, server, and the headers asked for."""

from __future__ import annotations

from typing import Any

from asynctrace_contrib._http import (
    header_attribute,
    may_hold_encoded_url,
    recorded_header_values,
    redact_url,
)
from asynctrace_contrib._http_values import method_attributes

__all__ = ["add_request_headers", "server_attributes", "url_attributes"]


def url_attributes(method: str, url: Any, secret_keys: Any) -> dict[str, Any]:
    """The request's method (``_OTHER`` if unknown), redacted ``url.full``,
    ``server.address`` and ``server.port``."""
    attrs = method_attributes(method)[1]
    attrs.update(server_attributes(url, secret_keys))
    return attrs


def server_attributes(url: Any, secret_keys: Any) -> dict[str, Any]:
    """The request's redacted ``url.full``, ``server.address`` and ``server.port``.

    Handed to the span as its ``lazy_attributes`` (``functools.partial``):
    an export thread computes them (see ``asynctrace.start_span``).
    """
    full = str(url)
    # redact_url's fast path: a URL in the path as sent (a second :/), or written
    # percent-encoded (%3A%2F%2F)
    if (
        "?" in full
        or "@" in full
        or "#" in full
        or ";" in full
        or full.count(":/") > 1
        or ("%" in full and may_hold_encoded_url(full))
    ):
        full = redact_url(full, secret_keys)
    attrs: dict[str, Any] = {"url.full": full}
    host, port = url.host, url.port
    if host:
        attrs["server.address"] = host
    if port:
        attrs["server.port"] = port
    return attrs


def add_request_headers(attrs: dict[str, Any], headers: Any, names: tuple[str, ...]) -> None:
    """Add ``http.request.header.<name>`` for the request headers asked for."""
    if not hasattr(headers, "getall"):
        return
    for header in names:
        values = headers.getall(header, ())
        if values:
            attrs[header_attribute("http.request.header", header)] = recorded_header_values(
                header, list(values)
            )
