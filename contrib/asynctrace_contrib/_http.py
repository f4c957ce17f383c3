"""Shared HTTP helpers: URL redaction, a request's secrets, header attribute names."""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final
from urllib.parse import quote, unquote, unquote_plus, urlsplit, urlunsplit

import asynctrace

__all__ = [
    "DEFAULT_SECRET_KEYS",
    "REDACTED",
    "SecretKeys",
    "callable_option",
    "header_attribute",
    "header_secrets",
    "may_hold_encoded_url",
    "names_option",
    "recorded_header_values",
    "redact_url",
    "url_secrets",
]

# A query key holding any of these (case-insensitive) has its value redacted: the words
# the exception-text redaction calls secret, every name asynctrace.is_credential_key
# treats as a credential (pwd, jwt, passphrase: the others hold a word above), and
# the session cookies servers put in URLs (;jsessionid=, PHPSESSID=).
DEFAULT_SECRET_KEYS: Final = (
    "token",
    "key",
    "secret",
    "password",
    "passwd",
    "pwd",
    "passphrase",
    "jwt",
    "sig",
    "signature",
    "auth",
    "cookie",
    "credential",
    "jsessionid",
    "sessid",
)
REDACTED: Final = "REDACTED"


def names_option(option: str, value: Any, accepted: str) -> tuple[str, ...]:
    """*value* as a tuple of non-empty strings, or :class:`asynctrace.ConfigurationError`.

    A bare string is refused rather than read as its characters.

    Example:
        >>> names_option("record_request_headers", ["x-request-id"], "header names")
        ('x-request-id',)
    """
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise asynctrace.ConfigurationError(
            f"{option}: expected a list of {accepted} (non-empty str), got {value!r}"
            + (f"; write [{value!r}] for one" if isinstance(value, str) else "")
        )
    names = tuple(value)
    for name in names:
        if not isinstance(name, str) or not name:
            raise asynctrace.ConfigurationError(
                f"{option}: expected a list of {accepted} (non-empty str), got {name!r} "
                f"in {value!r}"
            )
    return names


def callable_option(option: str, value: Any, accepted: str) -> None:
    """Raise :class:`asynctrace.ConfigurationError` unless *value* is ``None`` or callable.

    Example:
        >>> callable_option("request_hook", None, "(span, params) -> None")
    """
    if value is not None and not callable(value):
        raise asynctrace.ConfigurationError(
            f"{option}: expected None or a callable {accepted}, got {value!r}"
        )


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
    So is a path parameter's (``/x;token=abc``). A query value that is a URL
    or a query (as sent or percent-encoded: ``next=/cb?token=...``) is redacted
    the same way, userinfo and all, and written percent-encoded once. The rest
    stays as sent: keys as written (``%74oken=REDACTED``), separators (``;``),
    pieces without ``=``, encodings.

    Example:
        >>> redact_url("https://u:p@h.example/run?api_key=abc&n=1")
        'https://h.example/run?api_key=REDACTED&n=1'
        >>> redact_url("http://h/cb?next=http://u:pw@h2/")
        'http://h/cb?next=http%3A%2F%2Fh2%2F'
    """
    keys = secret_keys if isinstance(secret_keys, SecretKeys) else SecretKeys(secret_keys)
    _, question, query = url.partition("?")
    secret_like = question and ("%" in query or keys.pattern.search(query))  # %74oken too
    if (
        "@" not in url
        and "#" not in url
        and ";" not in url
        and not secret_like
        and url.count(":/") < 2  # a URL in the path, as sent
        and ("%" not in url or not may_hold_encoded_url(url))
    ):
        return url  # nothing to strip: the common case, no parsing
    try:
        return _redact_slowly(url, keys, 0)
    except Exception:  # hostile input (a bad IPv6 host, a lone surrogate): nothing of it
        return REDACTED


_NEST_DEPTH: Final = 3  # URLs in query values in URLs...: a deeper one is replaced whole


def may_hold_encoded_url(url: str) -> bool:
    """Whether the absolute *url* may hold a URL in its path once that is percent-decoded
    (``/proxy/http%3A%2F%2Fu%3Ap%40h``, ``http:%2F%2F``, ``http%253A%252F%252F``); not
    ``/files/my%20doc.txt``: a ``%3`` (a colon percent-encoded, ``%3A``, and its
    neighbours), a ``%25`` (one encoded twice), a colon before an encoded slash, or a
    ``:/`` besides the scheme's.

    The test by which a URL holding ``%`` takes :func:`redact_url`'s slow path: a few
    substring searches, where the slow path parses and decodes.

    Example:
        >>> may_hold_encoded_url("http://h:8080/files/my%20doc.txt")
        False
        >>> may_hold_encoded_url("http://h/proxy/http%3A%2F%2Fu%3Apw%40internal")
        True
    """
    return "%3" in url or "%25" in url or ":%2" in url or url.count(":/") > 1


def _redact_slowly(url: str, keys: SecretKeys, depth: int) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    query = parts.query
    path = parts.path
    if ";" in path:
        path = _redact_path_parameters(path, keys)
    if "://" in path or "%" in path:
        path = _redact_path_url(path)
    if query:
        query = _redact_query(query, keys, depth)
    return urlunsplit((parts.scheme, netloc, path, query, parts.fragment and REDACTED))


def _decoded_path(path: str) -> str:
    """*path* percent-decoded until no ``%`` is left (at most three times: ``%253A``)."""
    for _ in range(_NEST_DEPTH):
        if "%" not in path:
            break
        path = unquote(path)
    return path


def _redact_path_url(path: str) -> str:
    """A path holding a URL (``/proxy/http://u:p@h/x``, or percent-encoded
    ``/proxy/http%3A%2F%2Fu%3Ap%40h``) redacted as exception text is: without the
    userinfo and secret-like values; written decoded, ``?``, ``#`` and ``%``
    encoded, when something was taken out of a percent-encoded one."""
    decoded = _decoded_path(path)
    if "://" not in decoded:
        return path
    redacted = asynctrace.redact_text(decoded)
    if redacted == decoded:
        return path
    return redacted if decoded == path else quote(redacted, safe="/:@!$&'()*+,;=~")


def _redact_query(query: str, keys: SecretKeys, depth: int) -> str:
    """*query* as sent but for the values of its secret-like keys (matched
    percent-decoded), and a value that is a URL or a query holding a secret, redacted
    inside and percent-encoded once. ``;`` separates pairs as ``&`` does: no value
    hides behind it; a piece without ``=`` stays as it is."""
    query.encode()  # one no exporter can encode (a lone surrogate) raises: REDACTED whole
    pieces = re.split("([&;])", query)  # the separators kept
    for i in range(0, len(pieces), 2):
        key, equals, value = pieces[i].partition("=")
        if not equals:
            continue
        if keys.pattern.search(key) or keys.pattern.search(unquote_plus(key)):
            pieces[i] = f"{key}={REDACTED}"
            continue
        decoded = unquote_plus(value)
        nested = _nested(decoded, keys, depth)
        if nested != decoded:
            pieces[i] = f"{key}={quote(nested, safe='')}"
    return "".join(pieces)


def _redact_path_parameters(path: str, keys: SecretKeys) -> str:
    """``/x;token=abc/y`` -> ``/x;token=REDACTED/y`` (path, or matrix, parameters)."""
    pieces = path.split(";")
    for i in range(1, len(pieces)):
        key, equals, value = pieces[i].partition("=")
        if equals and (keys.pattern.search(key) or keys.pattern.search(unquote(key))):
            _, slash, after = value.partition("/")
            pieces[i] = f"{key}={REDACTED}{slash}{after}"
    return ";".join(pieces)


def _nested(value: str, keys: SecretKeys, depth: int) -> str:
    """A query value (percent-decoded) that is itself a URL or a query (``upload_url=...``,
    ``next=/cb?token=...``), redacted inside; *value* itself when nothing secret is in it."""
    if "://" in value:
        if depth >= _NEST_DEPTH:
            return REDACTED
        redacted = _redact_slowly(value, keys, depth + 1)
        return value if redacted == value else redacted
    if "=" not in value or not keys.pattern.search(value):
        return value
    if depth >= _NEST_DEPTH:
        return REDACTED
    path, question, query = value.partition("?")
    if not question:  # a bare query: "a&token=x"
        path, query = "", value
    return f"{path}{question}{_redact_query(query, keys, depth + 1)}"


def header_attribute(prefix: str, name: str) -> str:
    """``http.request.header.<name>`` with the semantic-convention normalisation.

    Example:
        >>> header_attribute("http.request.header", "X-Request-ID")
        'http.request.header.x-request-id'
    """
    return f"{prefix}.{name.lower()}"


# Header values that say nothing secret (and appear in exception messages as
# themselves: "Cannot connect to host 127.0.0.1:8000"); every other header's
# value is treated as a secret.
_PLAIN_HEADERS: Final = frozenset(
    {
        "accept",
        "accept-encoding",
        "accept-language",
        "cache-control",
        "connection",
        "content-encoding",
        "content-language",
        "content-length",
        "content-type",
        "date",
        "dnt",
        "expect",
        "host",
        "if-modified-since",
        "if-none-match",
        "keep-alive",
        "pragma",
        "priority",
        "server",
        "te",
        "traceparent",
        "tracestate",
        "transfer-encoding",
        "upgrade",
        "upgrade-insecure-requests",
        "user-agent",
        "vary",
    }
)
# Header families that say nothing secret: Sec-Fetch-*, Sec-CH-UA-*, Accept-*...
_PLAIN_PREFIXES: Final = ("sec-", "accept-", "access-control-")
_MAX_HEADER_SECRETS: Final = 512  # a request with thousands of headers: the first ones


def recorded_header_values(name: str, values: list[str]) -> list[str]:
    """*values* of the header *name* as an attribute records them: REDACTED for a credential
    (:func:`asynctrace.is_credential_header`'s rule for a recorded header: ``X-Pin`` too).

    Example:
        >>> recorded_header_values("Authorization", ["Bearer abc"])
        ['REDACTED']
        >>> recorded_header_values("X-Client-Cert", ["MIIB..."])
        ['REDACTED']
    """
    credential = asynctrace.is_credential_header(name, recorded=True)
    return [REDACTED] * len(values) if credential else values


def url_secrets(url: str, secret_keys: SecretKeys) -> set[str]:
    """What of *url* must never be recorded: userinfo, secret-like query values, the fragment.

    Each as sent and percent-decoded, for :func:`asynctrace.end_span`'s
    ``secrets``. Never raises.

    Example:
        >>> sorted(url_secrets("http://u:pw@h/x?token=a%2Bb&n=1", SecretKeys(["token"])))
        ['a%2Bb', 'a+b', 'pw', 'u']
    """
    found = _url_secrets(url, secret_keys, 0)
    found.discard("")
    return found


def _url_secrets(url: str, secret_keys: SecretKeys, depth: int) -> set[str]:
    found: set[str] = set()
    try:
        parts = urlsplit(url)
        userinfo, at, _ = parts.netloc.rpartition("@")
        if at:
            found.update(userinfo.split(":", 1))
        if ";" in parts.path:
            for pair in parts.path.split(";")[1:]:
                key, equals, value = pair.partition("=")
                value = value.partition("/")[0]
                if equals and value and _keys_match(secret_keys, unquote(key)):
                    found.add(value)
        if depth < _NEST_DEPTH and ("://" in parts.path or "%" in parts.path):
            found.update(_path_url_secrets(parts.path, secret_keys, depth))
        if parts.query:
            for pair in re.split("[&;]", parts.query):
                key, equals, value = pair.partition("=")
                if (
                    equals
                    and value
                    and (
                        _keys_match(secret_keys, key)
                        or _keys_match(secret_keys, unquote_plus(key))
                    )
                ):
                    found.add(value)
                elif value and depth < _NEST_DEPTH:
                    decoded = unquote_plus(value)
                    if "=" in decoded or "://" in decoded:  # a URL or a query as a value
                        found.update(_url_secrets(_as_url(decoded), secret_keys, depth + 1))
        if parts.fragment:
            found.add(parts.fragment)
        found.update({unquote_plus(value) for value in found} | {unquote(v) for v in found})
    except Exception:  # hostile input: what was found so far
        pass
    return found


_URL_IN_TEXT: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://\S*")


def _path_url_secrets(path: str, secret_keys: SecretKeys, depth: int) -> set[str]:
    """The secrets of the URLs in *path* (``/proxy/http://u:p@h/x``, or percent-encoded),
    each also as the path writes it: percent-encoded once or twice."""
    found: set[str] = set()
    for nested in _URL_IN_TEXT.findall(_decoded_path(path)):
        found.update(_url_secrets(nested, secret_keys, depth + 1))
    found.discard("")
    encoded = {quote(value, safe="") for value in found}
    return found | encoded | {quote(value, safe="") for value in encoded}


def _as_url(value: str) -> str:
    """*value* (a URL, or a bare query) as something :func:`urlsplit` reads a query from."""
    return value if "://" in value else "x://h/?" + value.lstrip("?")


def _keys_match(secret_keys: SecretKeys, key: str) -> bool:
    """Whether *key* is secret-like for *secret_keys*."""
    return secret_keys.pattern.search(key) is not None


_PART_MIN = 6  # a shorter part alone ("dark", "en") is not worth redacting everywhere


def _value_parts(value: str) -> set[str]:
    """The pieces of a header value a message may quote on their own.

    ``Basic dTpwZA==`` -> its credential; ``sid=abc123; theme=dark`` (a cookie)
    -> each value; ``a-key, b-key`` (a list) -> each item. Pieces shorter
    than six characters are left out.
    """
    parts: set[str] = set()
    for item in re.split("[,;]", value):
        item = item.strip()
        _, equals, rest = item.partition("=")
        for part in (item, rest.strip() if equals else "", item.rpartition(" ")[2]):
            part = part.strip('"')
            if len(part) >= _PART_MIN:
                parts.add(part)
    parts.discard(value)
    return parts


def header_secrets(*headers: Any) -> set[str]:
    """The values of every header in *headers* (mappings, or ``(name, value)`` pairs).

    Except those of :data:`_PLAIN_HEADERS` (``Host``, ``Content-Type``, ...)
    and of the ``Sec-*`` and ``Accept-*`` families; at most 512 strings.
    Each value's pieces count too: a scheme's credential (``Basic <c>``), a
    cookie's values, a list's items. Bytes are read as latin-1, as HTTP sends
    them. Never raises.

    Example:
        >>> sorted(header_secrets({"Authorization": "Basic dTpwZA==", "Host": "h"}))
        ['Basic dTpwZA==', 'dTpwZA==']
        >>> sorted(header_secrets({"Cookie": "sid=abc123; theme=dark"}))
        ['abc123', 'sid=abc123', 'sid=abc123; theme=dark', 'theme=dark']
    """
    found: set[str] = set()
    for group in headers:
        try:
            pairs = group.items() if hasattr(group, "items") else group
            for name, value in pairs or ():
                if isinstance(name, bytes):
                    name = name.decode("latin-1")
                if isinstance(value, bytes):
                    value = value.decode("latin-1")
                if not (isinstance(name, str) and isinstance(value, str) and value.strip()):
                    continue
                lowered = name.lower()
                if lowered in _PLAIN_HEADERS or lowered.startswith(_PLAIN_PREFIXES):
                    continue
                found.add(value)
                found.update(_value_parts(value))
                if len(found) >= _MAX_HEADER_SECRETS:
                    return found
        except Exception:  # hostile input: what was found so far
            continue
    return found
