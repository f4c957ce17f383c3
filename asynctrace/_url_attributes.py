"""The semantic-convention attributes that hold a URL, redacted as URLs.

For spans another instrumentation records through asynctrace's provider
(FastAPI's built-in telemetry records ``url.query`` as sent, say): a query
is redacted as a query, a full URL or path as text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from ._redact import redact_text
from ._redact_urls import redact_query

__all__ = [
    "URL_ATTRIBUTES",
    "plain_url",
    "redact_url_attribute",
    "redact_url_attributes",
    "redact_url_value",
]

URL_ATTRIBUTES: Final = frozenset(
    {"url.full", "url.query", "url.path", "url.original", "http.url", "http.target"}
)
"""The semantic-convention attributes that hold a URL or a part of one."""


# What no redaction rule can change: an HTTP or websocket URL's scheme, host name (no
# userinfo, no IPv6) and port, then a path; none of the characters a rule needs
# (query, fragment, parameters, pairs, encoded or escaped URLs, quoted or spaced text),
# no other ":" and no "-p" (a tool's password flag).
# The host ends at its port, its path or the end (the lookahead): a failed match cannot
# retry a shorter host with the rest of it read as path, so any text costs one pass.
_HOST: Final = r"[\w.]+(?:-(?!p)[\w.]*)*(?=[:/]|\Z)"
_REST: Final = r"[^@?#;=%\\\s(\"'`:\-]*(?:-(?!p)[^@?#;=%\\\s(\"'`:\-]*)*"
_PLAIN: Final = re.compile(rf"(?:(?:https?|wss?)://{_HOST}(?::[0-9]+)?(?=/|\Z))?{_REST}")


def plain_url(text: str) -> bool:
    """Whether no redaction rule can change *text*: an HTTP or websocket URL, or a path,
    with nothing but a port after a ``:``, and no character a rule needs.

    The common URL of a request (``http://10.0.0.7:8000/generate``) costs one
    regex match, not the text rules.

    Example:
        >>> plain_url("http://10.0.0.7:8000/v1/items/3"), plain_url("http://h/a?token=x")
        (True, False)
    """
    return _PLAIN.fullmatch(text) is not None


def redact_url_attribute(key: str, value: str) -> str:
    """The value of the URL attribute *key* redacted: a query as a query, the rest as text.

    Example:
        >>> redact_url_attribute("url.full", "http://u:p@h/?token=abc")
        'http://h/?token=REDACTED'
    """
    if _PLAIN.fullmatch(value) is not None:
        return value
    return redact_query(value) if key == "url.query" else redact_text(value)


def redact_url_value(key: str, value: Any) -> Any:
    """Any value of the URL attribute *key*, redacted; never raises.

    A string (a ``str`` subclass such as pydantic's ``AnyUrl`` included) is
    redacted as :func:`redact_url_attribute` redacts it; a list or tuple
    becomes a tuple of its items redacted; a number, a bool and ``None`` stay;
    anything else (``yarl.URL``, ``httpx.URL``, bytes) becomes its text,
    redacted, since the exporters would otherwise write its ``str()`` as is.

    Example:
        >>> redact_url_value("url.full", ["http://u:p@h/", 1])
        ('http://h/', 1)
    """
    cls = value.__class__
    if cls is str:
        return redact_url_attribute(key, value)
    if cls is int or cls is float or cls is bool or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return tuple(
            redact_url_attribute(key, _url_text(item))
            if not isinstance(item, (int, float)) and item is not None  # (bool is an int)
            else item
            for item in value
        )
    return redact_url_attribute(key, _url_text(value))


def _url_text(value: Any) -> str:
    """The text of a URL-like value (a plain ``str``), or a placeholder if it has none."""
    try:
        if isinstance(value, str):
            return str.__str__(value)  # the text itself, not a subclass's __str__
        if isinstance(value, (bytes, bytearray)):
            return bytes(value).decode("utf-8", "replace")
        return str(value)
    except Exception:
        return f"<unprintable {type(value).__name__}>"


def redact_url_attributes(attributes: Mapping[str, Any]) -> Mapping[str, Any]:
    """*attributes* with the URL ones (:data:`URL_ATTRIBUTES`) redacted; a copy if any changed.

    For spans another instrumentation records through asynctrace's provider
    (FastAPI's built-in telemetry records ``url.query`` as sent, say). Values
    of any type are redacted (:func:`redact_url_value`).

    Example:
        >>> redact_url_attributes({"url.query": "token=abc&n=1", "n": 1})
        {'url.query': 'token=REDACTED&n=1', 'n': 1}
    """
    if not attributes:
        return attributes
    # The few URL keys looked up in the mapping, not the mapping's keys walked: a span
    # given 10,000 attributes pays a handful of lookups.
    present = [key for key in URL_ATTRIBUTES if key in attributes]
    if not present:
        return attributes
    changed: dict[str, Any] | None = None
    for key in present:
        value = attributes[key]
        text = redact_url_value(key, value)
        if text is not value and (text.__class__ is not value.__class__ or text != value):
            if changed is None:
                changed = dict(attributes)
            changed[key] = text
    return attributes if changed is None else changed
