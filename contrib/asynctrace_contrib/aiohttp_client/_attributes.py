"""A request's span attributes: method, redacted URL, server, and the headers asked for."""

from __future__ import annotations

import functools
from typing import Any

from asynctrace_contrib._http import (
    header_attribute,
    may_hold_encoded_url,
    recorded_header_values,
    redact_url,
)
from asynctrace_contrib._http_values import method_attributes

__all__ = ["ServerAttributes", "add_request_headers", "server_attributes", "url_attributes"]


def url_attributes(method: str, url: Any, secret_keys: Any) -> dict[str, Any]:
    """The request's method (``_OTHER`` if unknown), redacted ``url.full``,
    ``server.address`` and ``server.port``."""
    attrs = method_attributes(method)[1]
    attrs.update(server_attributes(url, secret_keys))
    return attrs


@functools.lru_cache(maxsize=256)
def server_attributes(url: Any, secret_keys: Any) -> dict[str, Any]:
    """The request's redacted ``url.full``, ``server.address`` and ``server.port``
    (a dict shared by the calls for one URL: read it, do not change it).

    Handed to the span as its ``lazy_attributes`` (:class:`ServerAttributes`):
    an export thread computes them (see ``asynctrace.start_span``), once per
    URL object among the last 256 (yarl hands back the same object for the same
    URL text, so a pump calling a few endpoints in turn computes them once each).
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


class ServerAttributes:
    """A request's ``lazy_attributes``: :func:`server_attributes` of its URL, computed
    once (on an export thread), then kept in :attr:`done` for the next requests to it."""

    __slots__ = ("done", "keys", "url")

    def __init__(self, url: Any, secret_keys: Any) -> None:
        self.url = url
        self.keys = secret_keys
        self.done: dict[str, Any] | None = None

    def __call__(self) -> dict[str, Any]:
        done = self.done
        if done is None:
            done = self.done = server_attributes(self.url, self.keys)
        return done


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
