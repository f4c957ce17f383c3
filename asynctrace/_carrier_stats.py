"""What carriers refused to read or to send, counted per process: :func:`carrier_stats`.

Counted, never raised and never logged per request: a carrier is untrusted
input, and a bad one may come with every request.
"""

from __future__ import annotations

import threading

from ._forksafe import reinit_at_fork

__all__ = ["carrier_stats"]

_counts_lock = threading.Lock()
reinit_at_fork(_counts_lock)  # a lock held at fork() is made new in the child
_counts = {
    "baggage_headers_dropped": 0,
    "baggage_entries_skipped": 0,
    "scope_values_skipped": 0,
    "baggage_entries_not_sent": 0,
    "traceparent_invalid": 0,
    "tracestate_dropped": 0,
    "carrier_values_not_str": 0,
    "carrier_not_read": 0,
}


def _count(name: str, n: int = 1) -> None:
    with _counts_lock:
        _counts[name] += n


def carrier_stats() -> dict[str, int]:
    """What carriers refused to read, and to send, since the process started.

    Received: ``baggage_headers_dropped``: whole ``baggage`` headers over
    8,192 bytes; ``baggage_entries_skipped``: entries past the 180th, over
    4,096 bytes, or not W3C Baggage syntax (non-ASCII text included);
    ``scope_values_skipped``: ``asynctrace.*`` entries whose value is not one
    a scope takes (an integer outside int64 included); ``traceparent_invalid``:
    carriers whose ``traceparent`` is not valid W3C, or repeated;
    ``tracestate_dropped``: carriers whose non-empty ``tracestate`` was
    discarded (not W3C, or its ``traceparent`` invalid or repeated);
    ``carrier_values_not_str``: values of
    ``traceparent``, ``tracestate`` or ``baggage`` that are not ``str``
    (bytes, say), which are not read; ``carrier_not_read``: carriers of a
    shape that is not read (text, bytes, a list of ``(name, value)`` pairs
    such as ASGI's ``scope["headers"]`` or gRPC metadata, an object without
    ``get``, one whose reading raised) and ``bytes`` keys naming one of the
    three headers, which are not read either (``None`` and an empty carrier
    are not counted).

    Sent: ``baggage_entries_not_sent``: entries left out of a carrier's
    ``baggage`` because they would break a W3C Baggage limit (4,096 bytes an
    entry, 180 entries, 8,192 bytes the header), or because their key or
    value cannot be encoded (its ``str()`` raises, or it holds a lone
    surrogate), counted each time the header is made (a scope entry once per
    scope state). The other entries, and ``traceparent``, are sent.

    Example:
        >>> sorted(carrier_stats())  # doctest: +NORMALIZE_WHITESPACE
        ['baggage_entries_not_sent', 'baggage_entries_skipped', 'baggage_headers_dropped',
         'carrier_not_read', 'carrier_values_not_str', 'scope_values_skipped',
         'traceparent_invalid', 'tracestate_dropped']
    """
    with _counts_lock:
        return dict(_counts)
