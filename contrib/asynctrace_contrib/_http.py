"""Shared HTTP helpers: URL redaction and header attribute names."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

__all__ = ["DEFAULT_SECRET_KEYS", "REDACTED", "SecretKeys", "header_attribute", "redact_url"]

DEFAULT_SECRET_KEYS: Final = ("token", "key", "secret", "password", "sig", "signature", "auth")
REDACTED: Final = "REDACTED"


class SecretKeys(tuple[str, ...]):
    """Secret-like query keys, with their case-insensitive matcher compiled once."""

    pattern: re.Pattern[str]

    def __new__(cls, keys: Iterable[str]) -> SecretKeys:
        self = super().__new__(cls, tuple(k.lower() for k in keys))
        self.pattern = re.compile("|".join(map(re.escape, self)) or "(?!)", re.IGNORECASE)
        return self


def redact_url(url: str, secret_keys: Iterable[str] = DEFAULT_SECRET_KEYS) -> str:
    """*url* without userinfo, with the values of secret-like query keys replaced.

    A query key is secret-like when one of *secret_keys* is a case-insensitive
    substring of it (``api_key``, ``X-Amz-Signature``, ``access_token``...).

    Example:
        >>> redact_url("https://u:p@h.example/run?api_key=abc&n=1")
        'https://h.example/run?api_key=REDACTED&n=1'
    """
    keys = secret_keys if isinstance(secret_keys, SecretKeys) else SecretKeys(secret_keys)
    _, question, query = url.partition("?")
    secret_like = question and ("%" in query or keys.pattern.search(query))  # %74oken too
    if "@" not in url and "#" not in url and not secret_like:
        return url  # nothing to strip: the common case, no parsing
    try:
        return _redact_slowly(url, keys)
    except Exception:  # hostile input (a bad IPv6 host, a lone surrogate): nothing of it
        return REDACTED


def _redact_slowly(url: str, keys: SecretKeys) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    query = parts.query
    if query:
        # ";" separates pairs for some servers: treat it as "&" so no value hides behind it
        pairs = parse_qsl(query.replace(";", "&"), keep_blank_values=True)
        if any(keys.pattern.search(k) for k, _ in pairs):  # else the query stays as sent
            query = urlencode(
                [(k, REDACTED if keys.pattern.search(k) else v) for k, v in pairs], safe=""
            )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment and REDACTED))


def header_attribute(prefix: str, name: str) -> str:
    """``http.request.header.<name>`` with the semantic-convention normalisation.

    Example:
        >>> header_attribute("http.request.header", "X-Request-ID")
        'http.request.header.x-request-id'
    """
    return f"{prefix}.{name.lower()}"
