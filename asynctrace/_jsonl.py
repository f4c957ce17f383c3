"""JSON lines for the writer threads: msgspec when installed, the standard library otherwise.

msgspec (installed by the ``sdk`` extra) encodes a whole batch in one call,
about ten times faster than the standard library. The core package does not
need it: without it, lines are written by the standard library's C encoder.
msgspec refuses a few values the standard library accepts (a string holding a
lone surrogate, which a non-UTF-8 path or exception message can produce): then
the batch is encoded item by item, and an item msgspec refuses is written by
the standard library as ASCII JSON, so nothing is lost for the sake of speed.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

__all__ = ["HAVE_MSGSPEC", "MAX_LINE_BYTES", "encode_lines"]

MAX_LINE_BYTES: Final = 64 << 20
"""The longest line (in bytes, its newline not counted) asynctrace's readers read.

The ``asynctrace`` commands and :func:`asynctrace.export.read_chrome_trace`
skip a longer line unread, so the writers never write one: the session
writer cuts a record's largest payloads, the chrome writer a span's largest
values (both counted).
"""

_SEPARATORS = (",", ":")
_ascii = json.JSONEncoder(
    separators=_SEPARATORS, default=str, allow_nan=False, ensure_ascii=True
).encode
_utf8 = json.JSONEncoder(
    separators=_SEPARATORS, default=str, allow_nan=False, ensure_ascii=False
).encode


def _stdlib_lines(items: Iterable[Any]) -> bytes:
    # Refuses NaN and infinities (allow_nan=False): the caller's sanitize then
    # writes them as strings. A lone surrogate fails at encode().
    return "".join([_utf8(item) + "\n" for item in items]).encode()


_fast: Callable[[Iterable[Any]], bytes]
try:
    import msgspec
except ImportError:  # the core package runs without it
    HAVE_MSGSPEC = False
    _fast = _stdlib_lines

    def _builtins(item: Any) -> Any:
        return item

else:
    HAVE_MSGSPEC = True
    _fast = msgspec.json.Encoder(enc_hook=str).encode_lines

    def _builtins(item: Any) -> Any:
        return msgspec.to_builtins(item, enc_hook=str)


def encode_lines(
    items: Sequence[Any], sanitize: Callable[[Any], Any] | None = None
) -> tuple[bytes, list[int]]:
    """*items* as JSON lines, and the indexes of those that could not be encoded at all.

    *sanitize* prepares an item for the standard library, which refuses NaN
    and infinities; with msgspec, ``msgspec.to_builtins`` then gives it what
    msgspec would have written (structs as objects, bytes as base64, ...),
    surrogates kept.

    Example:
        >>> encode_lines([{"a": 1}, {"b": "\\udcff"}])
        (b'{"a":1}\\n{"b":"\\\\udcff"}\\n', [])
    """
    try:
        return _fast(items), []
    except Exception:
        pass
    lines: list[bytes] = []
    skipped: list[int] = []
    for index, item in enumerate(items):
        try:
            lines.append(_fast((item,)))
            continue
        except Exception:
            pass
        try:
            ready = _builtins(sanitize(item) if sanitize is not None else item)
            lines.append((_ascii(ready) + "\n").encode("ascii"))
        except Exception:
            skipped.append(index)
    return b"".join(lines), skipped
