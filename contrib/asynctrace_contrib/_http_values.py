"""HTTP attribute values as OpenTelemetry's semantic conventions define them.

- The request method: ``http.request.method`` holds a *known* method or
  ``_OTHER`` (the method as sent then goes in ``http.request.method_original``,
  and a span name says ``HTTP`` in its place), so a client that sends made-up
  methods cannot make the method's values, or the span names, unbounded.
  Known are RFC 9110's methods, ``PATCH`` and ``QUERY``; the
  ``OTEL_INSTRUMENTATION_HTTP_KNOWN_METHODS`` environment variable (names,
  comma-separated, case-sensitive) replaces that list, read when this module
  is imported.
- A server's own name and port: from the request's ``Forwarded`` ``host``,
  else ``X-Forwarded-Host``, else ``Host`` (HTTP/2's ``:authority`` arrives as
  ``host`` in ASGI), the port defaulting to the scheme's; the socket's address
  only when the request names none.
"""

from __future__ import annotations

import os
from typing import Any, Final

__all__ = ["KNOWN_METHODS", "method_attributes", "request_authority"]


_DEFAULT_METHODS: Final = "CONNECT,DELETE,GET,HEAD,OPTIONS,PATCH,POST,PUT,QUERY,TRACE"


def _known_methods(setting: str | None) -> frozenset[str]:
    """The known methods: *setting*'s names, or the default list when it is unset or empty."""
    names = setting if setting is not None and setting.strip() else _DEFAULT_METHODS
    return frozenset(name.strip() for name in names.split(",") if name.strip())


KNOWN_METHODS: Final = _known_methods(os.environ.get("OTEL_INSTRUMENTATION_HTTP_KNOWN_METHODS"))


def method_attributes(method: str) -> tuple[str, dict[str, Any]]:
    """The method for a span name, and the method attributes of *method*.

    Example:
        >>> method_attributes("GET")
        ('GET', {'http.request.method': 'GET'})
        >>> method_attributes("BREW")
        ('HTTP', {'http.request.method': '_OTHER', 'http.request.method_original': 'BREW'})
    """
    if method in KNOWN_METHODS:
        return method, {"http.request.method": method}
    return "HTTP", {"http.request.method": "_OTHER", "http.request.method_original": method}


_DEFAULT_PORTS: Final = {"http": 80, "ws": 80, "https": 443, "wss": 443}
_MAX_CACHED: Final = 256
_cache: dict[tuple[str | None, str | None, str | None, str], tuple[str, int | None] | None] = {}


def request_authority(
    forwarded: str | None, forwarded_host: str | None, host: str | None, scheme: str
) -> tuple[str, int | None] | None:
    """``(server.address, server.port)`` from a request's ``Forwarded``,
    ``X-Forwarded-Host`` and ``Host`` values (``None``: absent), if any names one.

    A value that does not parse is passed over for the next. Results are
    cached: a server sees the same few values again and again. Never raises.

    Example:
        >>> request_authority(None, None, "api.example.com:8443", "http")
        ('api.example.com', 8443)
        >>> request_authority(None, "edge.example, inner", "[::1]", "https")
        ('edge.example', 443)
    """
    if forwarded is not None:  # it names the client too (for=): keyed by its host alone
        forwarded = _forwarded_host(forwarded)
    key = (forwarded, forwarded_host, host, scheme)
    try:
        return _cache[key]
    except KeyError:
        pass
    found = None
    default_port = _DEFAULT_PORTS.get(scheme)
    for candidate in (forwarded, _first(forwarded_host), host):
        found = _host_and_port(candidate, default_port)
        if found is not None:
            break
    if len(_cache) >= _MAX_CACHED:  # made-up values from many clients: stay bounded
        _cache.clear()
    _cache[key] = found
    return found


def _first(value: str | None) -> str | None:
    """The first element of a comma-separated header (the client-facing proxy's)."""
    return value.split(",", 1)[0] if value else None


def _forwarded_host(value: str | None) -> str | None:
    """The ``host`` parameter of a ``Forwarded`` header's first element (RFC 7239)."""
    if not value:
        return None
    for pair in _first(value).split(";"):  # type: ignore[union-attr]
        key, sep, item = pair.partition("=")
        if sep and key.strip().lower() == "host":
            item = item.strip()
            if len(item) >= 2 and item[0] == item[-1] == '"':
                item = item[1:-1]
            return item
    return None


def _host_and_port(value: str | None, default_port: int | None) -> tuple[str, int | None] | None:
    """``host[:port]`` (``[v6]`` bracketed) parsed, or ``None`` if it is not one."""
    if not value:
        return None
    value = value.strip()
    if value.startswith("["):  # an IPv6 literal
        end = value.find("]")
        if end < 2:
            return None
        host, rest = value[1:end], value[end + 1 :]
        if rest and not rest.startswith(":"):
            return None
        port_text = rest[1:] if rest else ""
    else:
        host, _, port_text = value.partition(":")
        if ":" in port_text:
            return None  # an IPv6 address needs its brackets
    if not host or any(c in host for c in " \t/?#@\\"):
        return None
    if not port_text:
        return host, default_port
    if len(port_text) > 5 or not port_text.isascii() or not port_text.isdigit():
        return None
    if not 0 < int(port_text) < 65536:
        return None
    return host, int(port_text)
