"""URLs in text and query strings, redacted: no userinfo, no secret values.

Every URL of a text (what follows a ``://``) loses its userinfo (to its last
``@``), the values of its secret-like query keys and path parameters and its
fragment; a URL inside another one is redacted inside, 3 levels deep. URLs
are found with ``str.find``: linear in the text.
"""

from __future__ import annotations

import re
from urllib.parse import quote, unquote, unquote_plus

from ._secret_words import REDACTED, _key_pattern, _secret_name

__all__ = ["redact_query"]

# What ends a URL in text: a space, a quote or an angle bracket. URLs are found by
# their "://" (str.find), whatever precedes it: "3http://", "a-http://" and a
# scheme of any length are URLs too, and no pattern can backtrack over a long run.
_URL_END = re.compile(r"[\s'\"<>`]")
_LINE_END = re.compile(r"[\r\n]")
# A URL written JSON's way ("https:\/\/h\/x"), and one percent-encoded whole in text
# ("http%3A%2F%2Fu%3Ap%40h"): what follows its "://" as written, up to what ends a
# URL (the characters of a percent-encoded one).
_ESCAPED_SLASHES = ":\\/\\/"
_TWICE_ESCAPED_SLASHES = ":\\\\/\\\\/"  # JSON inside a JSON string: "postgres:\\\\/\\\\/..."
# (its slashes as quote() leaves them by default: "https%3A//u%3Ap%40h/x%3Ftoken%3D...")
_ENCODED_URL = re.compile(r"%3A(?:%2F%2F|//)([\w%.~+\-!*]+(?:/[\w%.~+\-!*]*)*)", re.IGNORECASE)
_NEST_DEPTH = 3  # URLs inside query values inside URLs...: deeper ones are replaced whole


def redact_query(query: str) -> str:
    """A query string (``a=1&token=abc``) with the values of its secret-like keys redacted.

    Example:
        >>> redact_query("n=1&access_token=abc")
        'n=1&access_token=REDACTED'
    """
    try:
        return _redact_query(query)
    except Exception:  # pragma: no cover - string operations on a str
        return REDACTED


def _redact_urls(text: str, depth: int) -> str:
    """Every URL of *text* (what follows each ``://`` up to a space or quote) redacted.

    A URL cut inside its userinfo by a quote or a space (``postgres://u:p'ss@h``,
    ``u:pa ss@h``) runs to the next ``@`` of its line, if no other URL starts
    first. The next ``@``, line end and ``://`` are looked for once per position
    reached, so a text of many such URLs costs linear time.
    """
    out: list[str] = []
    pos = 0
    find = text.find
    size = len(text)
    next_at = next_line = next_url = -2  # not looked for yet
    while True:
        at = find("://", pos)
        if at == -1:
            break
        start = at + 3
        stop = _URL_END.search(text, start)
        end = stop.start() if stop is not None else size
        if start < end < size and text[end] not in "\r\n" and _cut_in_userinfo(text[start:end]):
            if -1 != next_at < end:
                next_at = find("@", end)
            if next_line < end:
                line = _LINE_END.search(text, end)
                next_line = size if line is None else line.start()
            if -1 != next_url < end:
                next_url = find("://", end)
            if next_at != -1 and next_at < next_line and (next_url == -1 or next_at < next_url):
                stop = _URL_END.search(text, next_at + 1)
                end = stop.start() if stop is not None else size
        out.append(text[pos:start])
        if end > start:  # (nothing to redact in "a:// ")
            out.append(_redact_url_rest(text[start:end], depth))
        pos = end
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def _redact_escaped_urls(text: str, slash: str = "\\/") -> str:
    """Every URL written with JSON's escaped slashes (``postgres:\\/\\/u:p@h\\/x``;
    *slash* ``\\\\/`` for JSON inside a JSON string) redacted as :func:`_redact_urls`
    redacts one, its slashes escaped again."""
    out: list[str] = []
    pos = 0
    marker = ":" + slash + slash
    size = len(marker)
    at = text.find(marker)
    while at != -1:
        start = at + size
        stop = _URL_END.search(text, start)
        end = stop.start() if stop is not None else len(text)
        rest = text[start:end].replace(slash, "/")
        redacted = _redact_url_rest(rest, 0)
        if redacted != rest:
            out.append(text[pos:start])
            out.append(redacted.replace("/", slash))
            pos = end
        at = text.find(marker, max(end, start))
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def _redact_encoded_urls(text: str) -> str:
    """Every URL percent-encoded whole in *text* (``http%3A%2F%2Fu%3Ap%40h%2F``) redacted
    as :func:`_redact_urls` redacts one, encoded again (only if something changed)."""

    def redact(match: re.Match[str]) -> str:
        rest = unquote(match.group(1))
        redacted = _redact_url_rest(rest, 1)
        if redacted == rest:
            return match.group()
        safe = "/" if "/" in match.group(1) else ""  # as it was encoded
        return match.group()[: match.start(1) - match.start()] + quote(redacted, safe=safe)

    return _ENCODED_URL.sub(redact, text)


def _cut_in_userinfo(url: str) -> bool:
    """Whether *url* (after its ``scheme://``, cut at a quote or a space) may end in a password.

    Its whole text is a netloc with a ``:`` that is no port (``u:p``, not
    ``host:8080``), and no ``@``.
    """
    colon = url.rfind(":")
    if colon == -1 or "@" in url or "/" in url or "?" in url or "#" in url:
        return False
    return not url[colon + 1 :].isdigit()


def _redact_url_rest(rest: str, depth: int) -> str:
    """A URL after its ``scheme://``: no userinfo, no secret query values or path parameters."""
    netloc, tail = _split_netloc(rest)
    if "@" in netloc or (":" in netloc and "@" in tail):
        # Userinfo, cut to the URL's last "@". A password may hold an unencoded
        # "@", "/", "?" or "#" (base64 has "/"; aiohttp's InvalidUrlClientError
        # quotes such a URL raw): "u:Zq9@RET/x@h/x" reads as password "Zq9" and
        # host "RET", or as password "Zq9@RET/x" and host "h", and "u:pa/ss@h" as
        # host "u", port "pa". Only the last "@" removes the whole secret in every
        # reading; an "@" later in the path or query (or after a port) loses the
        # host and path too (on the safe side).
        rest = rest[rest.rfind("@") + 1 :]
        netloc, tail = _split_netloc(rest)
    tail, hash_, _ = tail.partition("#")
    path, question, query = tail.partition("?")
    if ";" in path:
        path = _redact_path_parameters(path)
    if "://" in path:  # a URL in the path (a proxy's "/fetch/https://u:p@h/x")
        path = _redact_inner_urls(path, depth)
    if question:
        query = _redact_query(query, depth)
    return f"{netloc}{path}{question}{query}{hash_ and '#' + REDACTED}"


def _redact_inner_urls(part: str, depth: int) -> str:
    """The URLs inside *part* of a URL (its path, a query key) redacted.

    Past _NEST_DEPTH, everything after the first ``://`` in *part* is replaced.
    """
    if depth >= _NEST_DEPTH:
        return part[: part.find("://") + 3] + REDACTED
    return _redact_urls(part, depth + 1)


def _redact_path_parameters(path: str) -> str:
    """``/x;token=abc/y`` -> ``/x;token=REDACTED/y`` (matrix parameters)."""
    pieces = path.split(";")
    for i in range(1, len(pieces)):
        key, equals, value = pieces[i].partition("=")
        if equals and _secret_name(key, _key_pattern()):
            _, slash, after = value.partition("/")
            pieces[i] = f"{key}={REDACTED}{slash}{after}"
    return ";".join(pieces)


def _split_netloc(rest: str) -> tuple[str, str]:
    """*rest* (a URL after ``scheme://``) split before its first ``/``, ``?`` or ``#``."""
    end = len(rest)
    for stop in "/?#":
        at = rest.find(stop)
        if at != -1 and at < end:
            end = at
    return rest[:end], rest[end:]


def _redact_query(query: str, depth: int = 0) -> str:
    pairs = re.split("([&;])", query)  # the separators kept, so the query reads as sent
    keys = _key_pattern()
    for i in range(0, len(pairs), 2):
        key, equals, value = pairs[i].partition("=")
        if "://" in key:  # a URL as a bare piece or a key ("?http://u:p@h/x")
            key = _redact_inner_urls(key, depth)
            pairs[i] = f"{key}{equals}{value}"
        if not equals:
            continue
        if _secret_name(key, keys):
            pairs[i] = f"{key}={REDACTED}"
        elif "://" in value or "%3" in value:  # a URL as a value, as sent or encoded
            nested = _redact_nested(value, depth)
            if nested is not value:
                pairs[i] = f"{key}={nested}"
    return "".join(pairs)


def _redact_nested(value: str, depth: int) -> str:
    """A query value that is (or, percent-decoded, holds) a URL, redacted inside.

    *value* itself when nothing in it changes; replaced whole past _NEST_DEPTH.
    """
    if "://" in value:
        if depth >= _NEST_DEPTH:
            return REDACTED
        redacted = _redact_urls(value, depth + 1)
        return value if redacted == value else redacted
    try:
        decoded = unquote_plus(value)
    except Exception:  # cannot be decoded: on the safe side
        return REDACTED
    if "://" in decoded:
        if depth >= _NEST_DEPTH:
            return REDACTED
        redacted = _redact_urls(decoded, depth + 1)
    elif "=" in decoded:  # a query, or a path and its query ("/cb?access_token=...")
        if depth >= _NEST_DEPTH:
            return REDACTED
        path, question, query = decoded.rpartition("?")
        redacted = f"{path}{question}{_redact_query(query, depth + 1)}"
    else:
        return value
    return value if redacted == decoded else quote(redacted, safe="/:")
