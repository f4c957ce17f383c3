"""Payloads attached to sessions and executions: copied as plain JSON values at the call."""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from typing import Any

from ._errors import ConfigurationError
from ._redact import redact_text, secrets_of

__all__ = ["check_payload", "plain_payload"]


def check_payload(payload: object, where: str) -> dict[str, Any] | None:
    """A JSON-ready copy of a payload mapping with string keys (``None`` when empty), or raise."""
    if payload is None:
        return None
    if not isinstance(payload, Mapping) or not all(isinstance(k, str) for k in payload):
        raise ConfigurationError(
            f"{where}: expected a mapping with str keys (or None), got {payload!r}"
        )
    return plain_payload(payload) or None


_PAYLOAD_DEPTH = 16


def plain_payload(payload: Mapping[str, Any]) -> dict[str, Any]:
    """A copy made of JSON values only, taken when the payload is given.

    Copying now means a caller may change its objects afterwards without
    changing the record; converting now means the record reads the same
    whichever JSON encoder writes it: non-finite floats become ``"nan"``,
    ``"inf"``, ``"-inf"``; keys become strings; tuples and sets become lists;
    an int of more than 4096 bits a note of its size (``"<int of N bits>"``);
    anything else (and anything nested deeper than 16 levels) its ``str()``.
    Strings, and those ``str()`` texts, are redacted as exception text is
    (:func:`asynctrace._redact.redact_text`: no URL userinfo, no secret-like
    values; an exception's remembered secrets too), as a session's ``reason`` is.
    A value that cannot be read (its ``str()`` raises, say) is written as
    ``"<unreadable TYPE>"``: a payload never breaks the caller.
    """
    out: dict[str, Any] = {}
    for key, value in payload.items():
        try:
            out[key] = _plain(value, _PAYLOAD_DEPTH)
        except Exception:
            out[key] = f"<unreadable {type(value).__name__}>"
    return out


_BIG = 1 << 4096  # past this, an int is written as a note of its size (see _plain)


def _plain(value: Any, depth: int) -> Any:
    kind = type(value)
    if kind is str:
        return redact_text(value)
    if kind is bool or value is None:
        return value
    if kind is int:
        # JSON holds any int, but writing one with more than sys.get_int_max_str_digits()
        # digits (4300 by default) raises, which would cost the whole record.
        return value if -_BIG < value < _BIG else f"<int of {value.bit_length()} bits>"
    if kind is float:
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, BaseException):  # with the secrets remembered for it
        return redact_text(str(value), secrets_of(value))
    if depth <= 0:
        return redact_text(str(value))
    if isinstance(value, Mapping):
        return {(k if type(k) is str else str(k)): _plain(v, depth - 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v, depth - 1) for v in value]
    if isinstance(value, numbers.Real):  # int and float subclasses (enums), numpy's numbers
        return _plain(int(value) if isinstance(value, numbers.Integral) else float(value), depth)
    return redact_text(str(value))
