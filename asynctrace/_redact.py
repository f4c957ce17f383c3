"""Secrets out of recorded exception text: URLs, credential pairs, known literals.

An exception raised by I/O code often names what it was doing: aiohttp's
``ConnectionTimeoutError`` and ``ClientResponseError`` embed the request URL,
query string and all; a handler's own ``ValueError`` may quote a header.
Whatever asynctrace records of an exception (``exception.message``,
``exception.stacktrace``, the status description) goes through
:func:`redact_text` first:

- every URL (``scheme://...``) loses its userinfo, the values of its
  secret-like query keys and its fragment, as ``url.full`` does;
- a secret-like name followed by ``=`` (``token=abc``, ``api_key = abc``), a
  quoted one followed by ``:`` (``'Authorization': 'Basic abc'``, JSON), and a
  credential header line (``Authorization: Bearer abc``, ``Cookie: a=b``) keep
  the name and lose the value;
- ``Bearer <credential>`` loses the credential;
- each string of *secrets* (what the caller knows to be secret: a request's
  header values, its query values) is replaced wherever it appears.

The secrets given for an exception go with it (:func:`remember`): a span that
records the same exception later, as it escapes the spans around the one that
knew them, or an exception raised ``from`` it, is redacted with them too.

A name is secret-like when it contains, case-insensitively, one of
:data:`SECRET_WORDS`. Matching errs on the safe side: ``monkey=1`` loses its
``1``. Every pattern runs in time linear in the text (no nested quantifier
can backtrack over a long run), and nothing here raises.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from collections.abc import Collection, Mapping
from typing import Any, Final
from urllib.parse import unquote_plus

from ._forksafe import reinit_at_fork

__all__ = [
    "REDACTED",
    "SECRET_WORDS",
    "URL_ATTRIBUTES",
    "exception_reason",
    "redact_query",
    "redact_text",
    "redact_url_attribute",
    "redact_url_attributes",
    "remember",
    "secrets_of",
]

REDACTED: Final = "REDACTED"
SECRET_WORDS: Final = (
    "token",
    "key",
    "secret",
    "password",
    "passwd",
    "sig",
    "auth",
    "cookie",
    "credential",
)

_SECRET_NAME = re.compile("|".join(SECRET_WORDS), re.IGNORECASE)
# A scheme not glued to a longer run of scheme characters (so a long dotted run
# is tried once, not once per dot), then everything up to a space, quote or bracket.
_URL = re.compile(r"(?<![A-Za-z0-9+.\-])[A-Za-z][A-Za-z0-9+.\-]{0,31}://[^\s'\"<>`]+")
# A name (starting where no name character precedes it) and its separator; the
# value is matched apart, so a name that is not secret-like consumes nothing more.
_NAME_SEP = re.compile(
    r"(?<![\w.\-%])(?P<name>[\w.\-%]{1,128})"
    r"(?P<sep>[ \t]*=[ \t]*|(?P<quote>['\"])[ \t]*:[ \t]*|:[ \t]*)"
)
_VALUE = re.compile(
    r"'[^'\n]*'|\"[^\"\n]*\"|"
    r"(?:(?:basic|bearer|digest|token|negotiate)[ \t]+)?[^\s'\"&;,)}\]>=#]+",
    re.IGNORECASE,
)
_HEADER_VALUE = re.compile(r"[^\r\n'\"<>]+")  # a credential header: the rest of its line
# Header names whose "Name: value" form is a credential (an unquoted colon after
# any secret-like word would also match "KeyError: ...", which is no credential).
_HEADER_NAME = re.compile(
    r"(?:proxy-)?authorization|(?:set-)?cookie|x-[\w\-]*(?:token|key|secret|auth)[\w\-]*",
    re.IGNORECASE,
)
_BEARER = re.compile(r"(?<![\w\-])(bearer[ \t]+)[\w\-.~+/]+=*", re.IGNORECASE)
_SHORT = 8  # secrets shorter than this are replaced only where they stand alone


def redact_text(text: str, secrets: Collection[str] = ()) -> str:
    """*text* with credentials and the given *secrets* replaced by ``REDACTED``.

    Never raises: text that cannot be examined is replaced whole.

    Example:
        >>> redact_text("Connection timeout to host http://u:p@h/x?token=abc&n=1")
        'Connection timeout to host http://h/x?token=REDACTED&n=1'
        >>> redact_text("bad value 'hunter22'", secrets=["hunter22"])
        "bad value 'REDACTED'"
    """
    try:
        if secrets:
            text = _replace_secrets(text, secrets)
        if "://" in text:
            text = _URL.sub(_redact_url, text)
        if "=" in text or ":" in text:
            text = _redact_pairs(text)
        return _BEARER.sub(r"\1" + REDACTED, text)
    except Exception:  # a pattern cannot fail on a str; a caller's odd "secrets" might
        return REDACTED


URL_ATTRIBUTES: Final = frozenset(
    {"url.full", "url.query", "url.path", "url.original", "http.url", "http.target"}
)
"""The semantic-convention attributes that hold a URL or a part of one."""


def redact_url_attribute(key: str, value: str) -> str:
    """The value of the URL attribute *key* redacted: a query as a query, the rest as text.

    Example:
        >>> redact_url_attribute("url.full", "http://u:p@h/?token=abc")
        'http://h/?token=REDACTED'
    """
    return redact_query(value) if key == "url.query" else redact_text(value)


def redact_url_attributes(attributes: Mapping[str, Any]) -> Mapping[str, Any]:
    """*attributes* with the URL ones (:data:`URL_ATTRIBUTES`) redacted; a copy if any changed.

    For spans another instrumentation records through asynctrace's provider
    (FastAPI's built-in telemetry records ``url.query`` as sent, say).

    Example:
        >>> redact_url_attributes({"url.query": "token=abc&n=1", "n": 1})
        {'url.query': 'token=REDACTED&n=1', 'n': 1}
    """
    if not attributes or URL_ATTRIBUTES.isdisjoint(attributes):
        return attributes
    changed: dict[str, Any] | None = None
    for key in URL_ATTRIBUTES.intersection(attributes):
        value = attributes[key]
        if value.__class__ is str:
            text = redact_url_attribute(key, value)
            if text != value:
                if changed is None:
                    changed = dict(attributes)
                changed[key] = text
    return attributes if changed is None else changed


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


def exception_reason(exc_type: type[BaseException], exc: BaseException | None) -> str:
    """``"ValueError: <message>"``, redacted (with *exc*'s remembered secrets); never raises.

    Example:
        >>> exception_reason(ValueError, ValueError("GET http://h/?token=abc"))
        'ValueError: GET http://h/?token=REDACTED'
    """
    try:
        message = str(exc)
    except Exception:
        message = f"<unprintable {exc_type.__name__}>"
    secrets = secrets_of(exc) if exc is not None else frozenset()
    return redact_text(f"{exc_type.__name__}: {message}", secrets)


# Exceptions cannot be weakly referenced: their secrets are kept by id, for the
# most recent few. An id reused by a later exception only redacts more.
_KNOWN: OrderedDict[int, frozenset[str]] = OrderedDict()
_KNOWN_MAX = 1024
_KNOWN_LOCK = threading.Lock()
reinit_at_fork(_KNOWN_LOCK)  # held by another thread at fork(): new in the child


def remember(exc: BaseException, secrets: Collection[str]) -> None:
    """Keep *secrets* with *exc*, for every later span that records it (or its successors)."""
    if not secrets:
        return
    key = id(exc)
    with _KNOWN_LOCK:
        _KNOWN[key] = _KNOWN.get(key, frozenset()).union(secrets)
        _KNOWN.move_to_end(key)
        while len(_KNOWN) > _KNOWN_MAX:
            _KNOWN.popitem(last=False)


def secrets_of(exc: BaseException) -> frozenset[str]:
    """The secrets remembered for *exc* and for the exceptions behind it.

    Those it was raised from or during and, for an exception group (a
    ``TaskGroup``'s), those it holds: at most 256 exceptions in all.
    """
    if not _KNOWN:
        return frozenset()
    found: set[str] = set()
    seen: set[int] = set()
    pending: list[BaseException | None] = [exc]
    with _KNOWN_LOCK:
        while pending and len(seen) < 256:
            current = pending.pop()
            if current is None or id(current) in seen:
                continue
            seen.add(id(current))
            found.update(_KNOWN.get(id(current), ()))
            pending.append(current.__cause__)
            pending.append(current.__context__)
            inner = getattr(current, "exceptions", None)  # an exception group's members
            if inner.__class__ is tuple:
                pending.extend(e for e in inner if isinstance(e, BaseException))
    return frozenset(found)


def _replace_secrets(text: str, secrets: Collection[str]) -> str:
    alternatives = []
    for secret in sorted({s for s in secrets if isinstance(s, str) and s.strip()}, key=len)[::-1]:
        escaped = re.escape(secret)
        if len(secret) < _SHORT:  # "42" must not eat the "42" of a port or a status
            if secret[0].isalnum():
                escaped = r"(?<![0-9A-Za-z])" + escaped
            if secret[-1].isalnum():
                escaped += r"(?![0-9A-Za-z])"
        alternatives.append(escaped)
    if not alternatives:
        return text
    return re.sub("|".join(alternatives), REDACTED, text)


def _redact_url(match: re.Match[str]) -> str:
    url = match.group()
    scheme, _, rest = url.partition("://")
    netloc, tail = _split_netloc(rest)
    if "@" in netloc:
        netloc = netloc.rpartition("@")[2]  # no userinfo
    elif ":" in netloc and "@" in tail:
        # A password with an unencoded "/", "?" or "#" (base64 has "/"), as in the
        # text of aiohttp's InvalidUrlClientError: "u:pa/ss@h" reads as host "u",
        # port "pa". Cut to the last "@"; a port and an "@" in the path or the
        # query lose the host and path too (on the safe side).
        rest = rest.rpartition("@")[2]
        netloc, tail = _split_netloc(rest)
    tail, hash_, _ = tail.partition("#")
    path, question, query = tail.partition("?")
    if question:
        query = _redact_query(query)
    return f"{scheme}://{netloc}{path}{question}{query}{hash_ and '#' + REDACTED}"


def _split_netloc(rest: str) -> tuple[str, str]:
    """*rest* (a URL after ``scheme://``) split before its first ``/``, ``?`` or ``#``."""
    end = len(rest)
    for stop in "/?#":
        at = rest.find(stop)
        if at != -1 and at < end:
            end = at
    return rest[:end], rest[end:]


def _redact_query(query: str) -> str:
    pairs = re.split("([&;])", query)  # the separators kept, so the query reads as sent
    for i in range(0, len(pairs), 2):
        key, equals, _ = pairs[i].partition("=")
        if equals and _secret_name(key):
            pairs[i] = f"{key}={REDACTED}"
    return "".join(pairs)


def _secret_name(name: str) -> bool:
    """Whether *name* (percent-decoded: ``%74oken`` is ``token``) is secret-like."""
    if _SECRET_NAME.search(name):
        return True
    if "%" in name or "+" in name:
        try:
            return bool(_SECRET_NAME.search(unquote_plus(name)))
        except Exception:  # cannot be decoded: treat it as secret
            return True
    return False


def _redact_pairs(text: str) -> str:
    out: list[str] = []
    pos = 0
    for match in _NAME_SEP.finditer(text):
        if match.start() < pos:
            continue  # inside a value already replaced
        name = match.group("name")
        value_pattern: re.Pattern[str] | None = None
        if match.group("quote") or "=" in match.group("sep"):
            if _secret_name(name):  # token=..., 'api_key': ..., "password": ...
                value_pattern = _VALUE
        elif _HEADER_NAME.fullmatch(name):  # Authorization: ..., but not KeyError: ...
            value_pattern = _HEADER_VALUE
        value = value_pattern.match(text, match.end()) if value_pattern is not None else None
        if value is None:
            continue
        out.append(text[pos : match.end()])
        quote = value.group()[:1]
        out.append(f"{quote}{REDACTED}{quote}" if quote in ("'", '"') else REDACTED)
        pos = value.end()
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)
