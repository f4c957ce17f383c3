"""What the middleware reads of a request's scope, decoded without ever failing.

The trace headers as one carrier (with the headers that name the server and
the client), and the path and query as recorded: secret-like values redacted.
:func:`request_secrets` is what an error message must not quote.
"""

from __future__ import annotations

from typing import Any

import asynctrace
from asynctrace_contrib._http import (
    DEFAULT_SECRET_KEYS,
    REDACTED,
    SecretKeys,
    header_secrets,
    redact_url,
    url_secrets,
)

from ._asgi import Scope

__all__ = ["request_headers", "request_path", "request_query", "request_secrets"]

_SECRET_KEYS = SecretKeys(DEFAULT_SECRET_KEYS)


# The trace headers (0-2), the ones that name the server (3-5: see _http_values), and
# the client's name (6).
_TRACE_HEADERS = {"traceparent": 0, "tracestate": 1, "baggage": 2}
_ALL_HEADERS = {
    **_TRACE_HEADERS,
    "forwarded": 3,
    "x-forwarded-host": 4,
    "host": 5,
    "user-agent": 6,
}
_RAW_TRACE_HEADERS = {name.encode(): index for name, index in _TRACE_HEADERS.items()}
_RAW_ALL_HEADERS = {name.encode(): index for name, index in _ALL_HEADERS.items()}
_LONGEST = max(map(len, _ALL_HEADERS))


def request_headers(
    scope: Scope, *, trust: bool = True, named: list[str | None] | None = None
) -> dict[str, str]:
    """The request's trace headers as one carrier, decoded without ever failing.

    Header names are matched case-insensitively. Repeated ``tracestate`` and
    ``baggage`` headers are combined in order, as HTTP combines repeated
    headers; a repeated ``traceparent`` is invalid (W3C: start a new trace):
    both go in, under two spellings of the name, so the carrier reader
    refuses it (and the ``tracestate`` that came with it) and counts it.
    Without *trust*, no ``baggage`` is read. Given *named* (four ``None``),
    the first ``Forwarded``, ``X-Forwarded-Host``, ``Host`` and ``User-Agent``
    values are stored in it.
    """
    raw_names, names = (
        (_RAW_TRACE_HEADERS, _TRACE_HEADERS) if named is None else (_RAW_ALL_HEADERS, _ALL_HEADERS)
    )
    found: tuple[list[str], list[str], list[str]] = ([], [], [])
    for raw_name, raw_value in scope.get("headers") or ():
        try:
            if raw_name.__class__ is bytes:  # servers give lower-case bytes (ASGI)
                index = raw_names.get(raw_name)
                if index is None:
                    if len(raw_name) > _LONGEST or raw_name.islower():
                        continue  # not ours; a name with capitals (or no letters) is lowered here
                    index = names.get(raw_name.decode("latin-1").lower())
            else:
                if len(raw_name) > _LONGEST:
                    continue
                index = names.get(bytes(raw_name).decode("latin-1").lower())
            if index is None:
                continue
            if index < 3:
                found[index].append(bytes(raw_value).decode("latin-1"))
            elif named is not None and named[index - 3] is None:  # the first one counts
                named[index - 3] = bytes(raw_value).decode("latin-1")
        except Exception:
            continue
    parents, states, bags = found
    carrier: dict[str, str] = {}
    if parents:
        carrier["traceparent"] = parents[0]
        if len(parents) > 1:  # invalid (W3C: a new trace): passed on as the repeat it is,
            carrier["Traceparent"] = parents[1]  # for the reader to refuse and count
        if states:
            carrier["tracestate"] = ",".join(states)
    if bags and trust:
        carrier["baggage"] = ",".join(bags)
    return carrier


def request_query(raw: Any) -> str:
    """``url.query``: the query string as sent, secret-like values redacted as in ``url.full``."""
    try:
        query = bytes(raw).decode("latin-1")
    except Exception:  # not bytes: nothing of it
        return REDACTED
    redacted = redact_url("?" + query, _SECRET_KEYS)
    return redacted[1:] if redacted.startswith("?") else redacted


def request_path(scope: Scope) -> str:
    """The request's path, redacted: an absolute-form target (``GET http://u:p@h/x``), or a
    URL inside the path (``/proxy/http://u:p@h/x``), without userinfo; secret-like path
    parameters (``;token=...``) without their values."""
    path = str(scope.get("path", ""))
    if "@" not in path and ";" not in path and "?" not in path:
        return path  # nothing to strip: the common case
    path = redact_url(path)
    return asynctrace.redact_text(path) if "://" in path else path


def request_secrets(scope: Scope) -> set[str]:
    """What of the request must not be recorded: secret-like query values, header values."""
    try:
        query = bytes(scope.get("query_string") or b"").decode("latin-1")
        found = url_secrets(f"http://h/?{query}", _SECRET_KEYS) if query else set()
        return found | header_secrets(scope.get("headers") or ())
    except Exception:  # a hostile scope: the default redaction still applies
        return set()
