"""Secrets out of recorded exception text: URLs, credential pairs, known literals.

An exception raised by I/O code often names what it was doing: aiohttp's
``ConnectionTimeoutError`` and ``ClientResponseError`` embed the request URL,
query string and all; a handler's own ``ValueError`` may quote a header.
Whatever asynctrace records of an exception (``exception.message``,
``exception.stacktrace``, the status description) goes through
:func:`redact_text` first:

- every URL (what follows a ``://``, whatever precedes it) loses its
  userinfo, the values of its secret-like query keys and path parameters
  (``;token=``) and its fragment, as ``url.full`` does; a URL inside another
  one (in its path, ``/fetch/https://u:p@h/x``, or its query, as sent or
  percent-encoded) is redacted inside (3 levels deep). Userinfo runs to the
  URL's last ``@``: a password may hold an unencoded ``@``, ``/``, ``?`` or
  ``#``, so an ``@`` later in the URL costs its host and path, not a secret;
  a URL cut inside its userinfo by a quote or a space (``postgres://u:p'ss@h``)
  runs to the next ``@`` of its line;
- a secret-like name followed by ``=`` (``token=abc``, ``user[password]=``),
  a quoted one followed by ``:`` (``'Authorization': 'Basic abc'``, JSON,
  ``{b'password': b'abc'}``), a credential header line (``Authorization:
  Bearer abc``, ``Cookie: a=b``, ``Private-Token: abc``) and a header pair
  repr (``(b'x-api-key', b'abc')``) keep the name and lose the whole value;
  a value in brackets (``auth=('bob', 'pw')``, ``credentials={...}``) up to
  its matching bracket, or to the end of its line; a quoted one
  (``password: "abc"``, ``Authorization: 'Basic abc'``) through its closing
  quote, or to the end of its line;
- the value after a secret-like command-line flag (``--password abc``,
  ``--api-key=abc``, an argv list's ``'--token', 'abc'``) and a ``user:pass``
  after ``-u`` or ``--user`` (curl's form);
- a PEM private key (``-----BEGIN RSA PRIVATE KEY-----`` to its END line, or
  to the end of the text) is replaced whole;
- ``Bearer <credential>`` loses the credential;
- each string of *secrets* (what the caller knows to be secret: a request's
  header values, its query values) is replaced wherever it appears, but for
  those under 4 characters (``1``, ``?0``).

The secrets given for an exception go with it (:func:`remember`): a span that
records the same exception later, as it escapes the spans around the one that
knew them, or an exception raised ``from`` it, is redacted with them too.

A name is secret-like when it contains, case-insensitively, one of
:data:`SECRET_WORDS` (or a word given to :func:`register_secret_words`; one
shorter than 3 characters, ``sk``, counts anywhere in a URL's query key, as
``url.full`` redaction counts it, but elsewhere only where no letter or digit
is glued to it: ``sk=`` and ``x_sk=``, not ``task=``).
Matching errs on the safe side: ``monkey=1`` loses its ``1``. Every pattern
runs in time linear in the text (no nested quantifier can backtrack over a
long run; URLs are found with ``str.find``, secrets too), and nothing here
raises.
"""

from __future__ import annotations

import functools
import re
import threading
from collections import OrderedDict, deque
from collections.abc import Collection, Iterable, Mapping
from typing import Any, Final
from urllib.parse import quote, unquote_plus

from ._errors import ConfigurationError
from ._forksafe import reinit_at_fork

__all__ = [
    "CREDENTIAL_KEYS",
    "EXCEPTION_TEXT_CHARS",
    "REDACTED",
    "SECRET_WORDS",
    "URL_ATTRIBUTES",
    "exception_reason",
    "is_credential_header",
    "is_credential_key",
    "redact_exception_text",
    "redact_query",
    "redact_text",
    "redact_url_attribute",
    "redact_url_attributes",
    "redact_url_value",
    "register_secret_words",
    "remember",
    "secrets_of",
]

REDACTED: Final = "REDACTED"
# The same words as the HTTP integrations' default secret query keys: every name
# is_credential_key treats as a credential holds one of them ("pass" aside, which
# as a substring would make "bypass=" and "passenger=" secret-like).
SECRET_WORDS: Final = (
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

_SECRET_NAME = re.compile("|".join(SECRET_WORDS), re.IGNORECASE)
# What ends a URL in text: a space, a quote or an angle bracket. URLs are found by
# their "://" (str.find), whatever precedes it: "3http://", "a-http://" and a
# scheme of any length are URLs too, and no pattern can backtrack over a long run.
_URL_END = re.compile(r"[\s'\"<>`]")
# A name (starting where no name character precedes it) and its separator; the
# value is matched apart, so a name that is not secret-like consumes nothing more.
# "user[password]=" counts: a "]" may close the name.
_NAME_SEP = re.compile(
    r"(?<![\w.\-%\[])(?P<name>[\w.\-%\[]{1,128})\]?"
    r"(?P<sep>[ \t]*=[ \t]*|(?P<quote>['\"])[ \t]*:[ \t]*|:[ \t]*)"
)
# A value: quoted (a bytes repr's b'...' too; backslash escapes kept inside; an
# unterminated one to the end of its line), or unquoted up to white space, a quote
# or an "&" or ";" that starts the next "name=" (so "Tr0ub4dor&3xyz" goes whole,
# and "token=abc&n=1" keeps its "n=1").
_VALUE = re.compile(
    r"b?'(?:[^'\\\n]|\\.)*'?|b?\"(?:[^\"\\\n]|\\.)*\"?|"
    r"(?:(?:basic|bearer|digest|token|negotiate)[ \t]+)?"
    r"(?:[^\s'\"&;]|[&;](?![\w.\-%\[\]]{1,128}=))+",
    re.IGNORECASE,
)
# A credential header's value: quoted (b'...' too), through its closing quote or to
# the end of its line; or the rest of its line up to a quote or an angle bracket,
# with a quoted string after an "=" inside it (Cookie: sid="abc", Digest
# response="...") taken whole.
_HEADER_VALUE = re.compile(
    r"b?'(?:[^'\\\r\n]|\\.)*'?|b?\"(?:[^\"\\\r\n]|\\.)*\"?|"
    r"(?:[^\r\n'\"<>=]|=(?:'(?:[^'\\\r\n]|\\.)*'?|\"(?:[^\"\\\r\n]|\\.)*\"?)?)+"
)
# What a bracketed value ("auth=('bob', 'pw')", "credentials={...}") is scanned by:
# quoted strings whole (a bracket inside one does not count), brackets, line ends.
_BRACKET_TOKEN = re.compile(r"'(?:[^'\\\n]|\\.)*'?|\"(?:[^\"\\\n]|\\.)*\"?|[()\[\]{}\r\n]")
_CLOSERS: Final = {"(": ")", "[": "]", "{": "}"}
_MAX_BRACKETS = 64  # nested deeper: the value runs to the end of its line
_LINE_END = re.compile(r"[\r\n]")
# Header names whose "Name: value" form is a credential: one of these words among
# the "-"/"_"-separated words of the name (not "KeyError: ...", "AuthError: ...").
_HEADER_WORDS: Final = frozenset(
    {
        "authorization",
        "auth",
        "cookie",
        "token",
        "key",
        "apikey",
        "secret",
        "password",
        "passwd",
        "pwd",
        "passphrase",
        "jwt",
        "credential",
        "credentials",
        "signature",
        "session",
    }
)
_WORD_SPLIT = re.compile(r"[\-_]")
# A header as a (name, value) pair repr: ('x-api-key', 'abc'), (b'cookie', b'a=b').
_PAIR_REPR = re.compile(
    r"\(\s*b?(?P<q1>['\"])(?P<name>[\w.\-]{1,128})(?P=q1)\s*,\s*"
    r"(?P<pre>b?(?P<q2>['\"]))(?:[^'\"\\\n]|\\.)*(?P=q2)"
)
_USER_FLAGS: Final = frozenset({"-u", "--user"})  # their value is secret when it is user:pass


def _flag_pattern(words: str) -> re.Pattern[str]:
    """A secret-like command-line flag and what separates it from its value.

    ``--password x``, ``--token=x``, an argv list's ``'--password', 'x'`` (a
    ``CalledProcessError``'s command): a ``--flag`` holding one of *words* (a
    regex alternation). ``-u``/``--user`` only before a ``user:`` (curl's
    ``-u bob:pw``). The value is matched apart (with ``_VALUE``). Other flags
    do not match at all: a command line of ordinary flags costs no Python call.
    """
    return re.compile(
        r"(?<![\w.\-])(?:b?(?P<quote>['\"]))?"
        rf"(?P<flag>--(?=[\w.\-]{{0,127}}?(?:{words}))[a-z][\w.\-]{{0,127}}"
        r"|(?:-u|--user)(?=(?:['\"][ \t]*,[ \t]*|[ \t]*=[ \t]*|[ \t]+)b?['\"]?[^\s'\":=]{0,256}:))"
        r"(?(quote)(?P=quote)[ \t]*,[ \t]*|(?:[ \t]*=[ \t]*|[ \t]+))",
        re.IGNORECASE,
    )


# A PEM block's first line; a private key's label holds "PRIVATE KEY".
_PEM_BEGIN = re.compile(r"-----BEGIN ([A-Z0-9 ]{1,64})-----")
_BEARER = re.compile(r"(?<![\w\-])(bearer[ \t]+)[\w\-.~+/]+=*", re.IGNORECASE)
_SHORT = 8  # secrets shorter than this are replaced only where they stand alone
_MIN_SECRET = 4  # shorter ones ("1", "?0") are not replaced at all: they are everywhere
_MAX_SECRETS = 1024  # the longest this many secrets of one exception are replaced...
_MAX_SECRETS_CHARS = 262144  # ...and no more than this many characters of them in all
_NEST_DEPTH = 3  # URLs inside query values inside URLs...: deeper ones are replaced whole


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
        if "-----BEGIN " in text:
            text = _redact_private_keys(text)
        if "://" in text:
            text = _redact_urls(text, 0)
        if "=" in text or ":" in text:
            text = _redact_pairs(text)
        if "(" in text and "," in text:
            text = _PAIR_REPR.sub(_redact_pair_repr, text)
        if "--" in text or "-u" in text or "-U" in text:  # after the pairs: a flag's value
            text = _redact_flags(text)  # may be a header name (--user Authorization: ...)
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


EXCEPTION_TEXT_CHARS: Final = 65_536
"""The characters kept of an exception's text (its message, its stack trace) on a span."""
_MARGIN = 8192  # redacted past what is kept: a secret across the cut is still found


def redact_exception_text(text: str, secrets: Collection[str] = (), *, tail: bool = False) -> str:
    """:func:`redact_text` for an exception's text of any size, in bounded time.

    At most :data:`EXCEPTION_TEXT_CHARS` characters are kept: the start and a
    ``...<truncated N chars>`` note, or with *tail* (a stack trace, whose
    innermost frames and message come last) the start and the end around a
    ``...<N chars left out>...`` note. Only the parts kept (and a margin past
    them) are redacted: a message of megabytes (an HTML error page) costs no
    more than one of 64 KiB on the thread that records it.

    Example:
        >>> redact_exception_text("token=abc")
        'token=REDACTED'
        >>> redact_exception_text("x" * 70_000)[-26:]
        'x...<truncated 4464 chars>'
    """
    keep = EXCEPTION_TEXT_CHARS
    first = keep // 2 if tail else keep  # characters kept from the start
    last = keep - first  # and from the end
    if len(text) <= keep + _MARGIN:  # the common case: redacted whole
        text = redact_text(text, secrets)
        if len(text) <= keep:
            return text
        head, end = text[:first], text[len(text) - last :]
    else:
        head = redact_text(text[: first + _MARGIN], secrets)[:first]
        end = redact_text(text[-(last + _MARGIN) :], secrets)[-last:] if last else ""
    if not tail:
        return f"{head}...<truncated {len(text) - keep} chars>"
    return f"{head}...<{len(text) - keep} chars left out>...{end}"


def exception_reason(exc_type: type[BaseException], exc: BaseException | None) -> str:
    """``"ValueError: <message>"``, redacted (with *exc*'s remembered secrets) and bounded
    (:func:`redact_exception_text`); never raises.

    Example:
        >>> exception_reason(ValueError, ValueError("GET http://h/?token=abc"))
        'ValueError: GET http://h/?token=REDACTED'
    """
    try:
        message = str(exc)
    except Exception:
        message = f"<unprintable {exc_type.__name__}>"
    secrets = secrets_of(exc) if exc is not None else frozenset()
    return redact_exception_text(f"{exc_type.__name__}: {message}", secrets)


# Exceptions cannot be weakly referenced: their secrets are kept by id, for the
# most recent few thousand. An id reused by a later exception only redacts more.
_KNOWN: OrderedDict[int, frozenset[str]] = OrderedDict()
_KNOWN_MAX = 8192
_KNOWN_LOCK = threading.Lock()
reinit_at_fork(_KNOWN_LOCK)  # held by another thread at fork(): new in the child

# What traceback.format_exception shows of an exception group: its first 15
# members, 10 groups deep. secrets_of looks that far (and at most _WALK_MAX
# exceptions in all), breadth-first in member order, so the members shown are
# the ones whose secrets are found.
_GROUP_WIDTH = 15
_GROUP_DEPTH = 10
_WALK_MAX = 1024


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
    ``TaskGroup``'s), those of the members a formatted traceback shows (the
    first 15, 10 groups deep), breadth-first: at most 1024 exceptions in all.
    Never raises.
    """
    if not _KNOWN:
        return frozenset()
    found: set[str] = set()
    seen: set[int] = set()
    pending: deque[tuple[BaseException, int]] = deque([(exc, 0)])
    try:
        with _KNOWN_LOCK:
            while pending and len(seen) < _WALK_MAX:
                current, depth = pending.popleft()
                if id(current) in seen:
                    continue
                seen.add(id(current))
                found.update(_KNOWN.get(id(current), ()))
                for behind in _behind(current):
                    pending.append((behind, depth))
                if depth < _GROUP_DEPTH:
                    for member in _members(current):
                        pending.append((member, depth + 1))
    except Exception:  # pragma: no cover - _behind and _members do not raise
        pass
    return frozenset(found)


def _behind(exc: BaseException) -> list[BaseException]:
    """The exceptions *exc* was raised from or during (attributes a subclass may break)."""
    found = []
    for name in ("__cause__", "__context__"):
        try:
            behind = getattr(exc, name, None)
        except Exception:
            continue
        if isinstance(behind, BaseException):
            found.append(behind)
    return found


def _members(exc: BaseException) -> list[BaseException]:
    """An exception group's first members, those a formatted traceback shows."""
    try:
        inner = getattr(exc, "exceptions", None)
    except Exception:  # a property of a user's exception class that raises
        return []
    if inner.__class__ is not tuple:
        return []
    return [e for e in inner[:_GROUP_WIDTH] if isinstance(e, BaseException)]


def register_secret_words(words: Iterable[str]) -> None:
    """Treat names containing any of *words* as secret-like too, process-wide.

    For secret query keys an integration is configured with (``sess``, say):
    an exception raised after its span ended (``raise_for_status()``) names
    the URL, and is recorded by spans that never knew the request. A word
    matches without case; one of 3 characters or more anywhere in a name, as
    a default word does. A shorter one (``sk``) anywhere in a URL's query key
    or path parameter, as a client's ``url.full`` redaction matches it, and
    elsewhere (``sk=``, ``'sk':``, ``--sk``) only where no letter or digit is
    glued to it: ``x_sk=`` counts, ``task=`` does not.

    Raises :class:`~asynctrace.ConfigurationError`, registering none of
    *words*, when *words* is not an iterable of non-empty strings (a bare
    string included), or when the words added in all would pass 64 (a word
    already secret-like, ``mytoken``, does not count).

    Example:
        >>> register_secret_words(["rolloutcode"])
        >>> redact_text("GET http://h/x?rolloutcode=abc&n=1")
        'GET http://h/x?rolloutcode=REDACTED&n=1'
    """
    global _SECRET_NAME
    checked = _checked_words(words)
    with _KNOWN_LOCK:
        # A word holding one already matched anywhere (``mytoken``) adds nothing.
        anywhere = [*SECRET_WORDS, *(w for w in _EXTRA_WORDS if len(w) >= _MIN_WORD)]
        added = {w for w in checked - _EXTRA_WORDS if not any(a in w for a in anywhere)}
        if not added:
            return
        total = len(_EXTRA_WORDS) + len(added)
        if total > MAX_SECRET_WORDS:
            raise ConfigurationError(
                f"register_secret_words: words: at most {MAX_SECRET_WORDS} secret words can "
                f"be added in a process; {len(_EXTRA_WORDS)} are, and {len(added)} more "
                f"({', '.join(sorted(added)[:5])}{', ...' if len(added) > 5 else ''}) would "
                f"make {total}: none of them was added"
            )
        _EXTRA_WORDS.update(added)
        name, key, flag = _word_patterns(_EXTRA_WORDS)
        _PATTERNS[name] = (key, flag)  # before _SECRET_NAME: a reader finds them
        _SECRET_NAME = name


# How many words register_secret_words adds in a process, at most: each one costs every
# name that redaction examines a little (64: +25% on a 200-character message).
MAX_SECRET_WORDS: Final = 64
_MIN_WORD = 3  # shorter words count in free text only where nothing alphanumeric is glued
# to them: "sk" would make every "task=", "risk=" and "desk=" secret-like.
_EXTRA_WORDS: set[str] = set()
# The patterns of each set of words registered so far, by its name pattern (the
# _SECRET_NAME they go with): URL keys, flags. At most MAX_SECRET_WORDS + 1 entries.
_PATTERNS: dict[re.Pattern[str], tuple[re.Pattern[str], re.Pattern[str]]] = {
    _SECRET_NAME: (_SECRET_NAME, _flag_pattern(_SECRET_NAME.pattern))
}


def _checked_words(words: object) -> set[str]:
    """*words* as a set of lower-case words, or ConfigurationError naming what is wrong."""
    accepted = "an iterable of words (non-empty str), such as ['sess', 'sk']"
    if isinstance(words, (str, bytes, bytearray)) or not isinstance(words, Iterable):
        raise ConfigurationError(
            f"register_secret_words: words: expected {accepted}, got "
            f"{type(words).__name__} {words!r:.80}"
            + (f"; write [{words!r}] for one word" if isinstance(words, str) else "")
        )
    checked: set[str] = set()
    for word in words:
        if not isinstance(word, str) or not word:
            raise ConfigurationError(
                f"register_secret_words: words: expected {accepted}, got "
                f"{type(word).__name__} {word!r:.80} among them"
            )
        checked.add(word.lower())
    return checked


def _word_patterns(extra: Collection[str]) -> tuple[re.Pattern[str], ...]:
    """The patterns of the default words and *extra*: for names, URL keys and flags.

    Names (free text): a word of ``_MIN_WORD`` characters or more anywhere, a
    shorter one with no letter or digit glued to it. URL keys: every word
    anywhere, as the HTTP integrations' ``url.full`` redaction matches them.
    """
    long = [*SECRET_WORDS, *map(re.escape, sorted(w for w in extra if len(w) >= _MIN_WORD))]
    short = sorted(w for w in extra if len(w) < _MIN_WORD)
    # A short word, then (a lookbehind of its length) no letter or digit before it: a
    # literal first keeps the pattern's quick scan for its first characters.
    names = "|".join(
        [
            *long,
            *(
                rf"(?:{'|'.join(map(re.escape, words))})(?<![^\W_][\s\S]{{{size}}})(?![^\W_])"
                for size in range(1, _MIN_WORD)
                if (words := [w for w in short if len(w) == size])
            ),
        ]
    )
    keys = "|".join([*long, *map(re.escape, short)])
    return (
        re.compile(names, re.IGNORECASE),
        re.compile(keys, re.IGNORECASE),
        _flag_pattern(names),
    )


def _key_pattern() -> re.Pattern[str]:
    """What makes a URL's query key or path parameter secret-like (every word, anywhere)."""
    try:
        return _PATTERNS[_SECRET_NAME][0]
    except KeyError:  # a name pattern set from outside (restored by a test): its words
        return _SECRET_NAME


def _flag() -> re.Pattern[str]:
    """What finds a secret-like command-line flag, for the words registered so far."""
    try:
        return _PATTERNS[_SECRET_NAME][1]
    except KeyError:  # pragma: no cover - as _key_pattern
        return _flag_pattern(_SECRET_NAME.pattern)


def _replace_secrets(text: str, secrets: Collection[str]) -> str:
    """*text* with each of *secrets* replaced: str.find per secret (linear in the text).

    The longest secrets first, at most _MAX_SECRETS of them and _MAX_SECRETS_CHARS
    characters in all; ones shorter than _MIN_SECRET are not replaced, ones
    shorter than _SHORT only where no letter or digit is glued to them.
    """
    candidates = sorted(
        {s for s in secrets if isinstance(s, str) and len(s.strip()) >= _MIN_SECRET},
        key=len,
        reverse=True,
    )
    spans: list[tuple[int, int]] = []
    budget = _MAX_SECRETS_CHARS
    for secret in candidates[:_MAX_SECRETS]:
        size = len(secret)
        if size > len(text):
            continue
        budget -= size
        if budget < 0:
            break
        short = size < _SHORT
        at = text.find(secret)
        while at != -1:
            end = at + size
            if short and (
                (at and secret[0].isalnum() and text[at - 1].isalnum())
                or (end < len(text) and secret[-1].isalnum() and text[end].isalnum())
            ):  # "42" must not eat the "42" of a port or a status
                at = text.find(secret, at + 1)
                continue
            spans.append((at, end))
            at = text.find(secret, end)
    if not spans:
        return text
    spans.sort()
    out: list[str] = []
    pos = 0
    start, stop = spans[0]
    for at, end in spans[1:]:
        if at <= stop:  # overlapping or adjacent: one replacement
            stop = max(stop, end)
            continue
        out.append(text[pos:start])
        out.append(REDACTED)
        pos = stop
        start, stop = at, end
    out.append(text[pos:start])
    out.append(REDACTED)
    out.append(text[stop:])
    return "".join(out)


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


def _cut_in_userinfo(url: str) -> bool:
    """Whether *url* (after its ``scheme://``, cut at a quote or a space) may end in a password.

    Its whole text is a netloc with a ``:`` that is no port (``u:p``, not
    ``host:8080``), and no ``@``.
    """
    colon = url.rfind(":")
    if colon == -1 or "@" in url or "/" in url or "?" in url or "#" in url:
        return False
    return not url[colon + 1 :].isdigit()


def _redact_private_keys(text: str) -> str:
    """Each PEM private key (``-----BEGIN ... PRIVATE KEY-----`` to its END line) replaced.

    A key without its END line is replaced to the end of *text*. One ``str.find``
    pass: linear.
    """
    out: list[str] = []
    pos = 0
    at = text.find("-----BEGIN ")
    while at != -1:
        begin = _PEM_BEGIN.match(text, at)
        if begin is None or "PRIVATE KEY" not in begin.group(1):
            at = text.find("-----BEGIN ", at + 1)
            continue
        end_line = f"-----END {begin.group(1)}-----"
        stop = text.find(end_line, begin.end())
        out.append(text[pos:at])
        out.append(REDACTED)
        pos = len(text) if stop == -1 else stop + len(end_line)
        at = text.find("-----BEGIN ", pos)
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def _redact_flags(text: str) -> str:
    """The value after each secret-like command-line flag replaced.

    ``--password x``, ``--api-key=x``, an argv list's ``'--token', 'x'``, and the
    value of ``-u``/``--user`` when it is ``user:pass`` (curl's form).
    """
    out: list[str] = []
    pos = 0
    for match in _flag().finditer(text):
        if match.start() < pos:
            continue  # inside a value already replaced
        flag = match.group("flag")
        start = match.end()
        value = _VALUE.match(text, start)
        if value is None or value.group().startswith(REDACTED):
            continue
        if flag.lower() in _USER_FLAGS and ":" not in value.group():
            continue
        out.append(text[pos:start])
        out.append(_replacement(value.group()))
        pos = value.end()
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


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
    if "://" not in decoded:
        return value
    if depth >= _NEST_DEPTH:
        return REDACTED
    redacted = _redact_urls(decoded, depth + 1)
    return value if redacted == decoded else quote(redacted, safe="/:")


def _secret_name(name: str, pattern: re.Pattern[str] | None = None) -> bool:
    """Whether *name* (percent-decoded: ``%74oken`` is ``token``) is secret-like.

    By *pattern*, or by the registered words as names in free text match them.
    """
    if pattern is None:
        pattern = _SECRET_NAME
    if pattern.search(name):
        return True
    if "%" in name or "+" in name:
        try:
            return bool(pattern.search(unquote_plus(name)))
        except Exception:  # cannot be decoded: treat it as secret
            return True
    return False


def is_credential_header(name: str) -> bool:
    """Whether the header *name*'s values are credentials (``Private-Token``, ``DD-API-KEY``).

    The rule asynctrace applies to ``Name: value`` text it records and to the
    headers an HTTP integration is asked to record.

    Example:
        >>> is_credential_header("X-Api-Key"), is_credential_header("Content-Type")
        (True, False)
    """
    words = _WORD_SPLIT.split(name.lower())
    if any(word in _HEADER_WORDS for word in words):
        return True
    # "AccessToken: ...", but not a dotted exception name ("fernet.InvalidToken: ...")
    return "." not in name and words[-1].endswith(("token", "apikey", "password", "secret"))


_credential_header = functools.lru_cache(maxsize=1024)(is_credential_header)  # names repeat


CREDENTIAL_KEYS: Final = frozenset(
    ("password", "passwd", "pwd", "passphrase", "secret", "token", "cookie", "auth",
     "authorization", "credential", "credentials", "apikey", "jwt", "signature",
     "api_key", "private_key", "access_key", "secret_key", "set_cookie")
)  # fmt: skip
"""The keys :func:`is_credential_key` treats as credentials by default."""

# Word breaks of a key: anything but a letter or digit, and case changes (apiKey, APIKey).
_KEY_BREAK = re.compile(r"[^0-9A-Za-z]+|(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_LONGEST_KEY = 128  # a longer key is judged by its end


def is_credential_key(key: str, names: Collection[str] = CREDENTIAL_KEYS) -> bool:
    """Whether *key*, or its trailing words, is one of *names* (without case).

    Words break at anything but a letter or digit and at case changes, so
    ``access_token``, ``refreshToken``, ``OPENAI_API_KEY`` and ``X-Api-Key``
    end with credential names; a credential word elsewhere does not count:
    ``session_id``, ``token_count`` and ``prompt_token_ids`` are data. The
    rule of the values asynctrace records under a key (session payloads).

    Example:
        >>> is_credential_key("OPENAI_API_KEY"), is_credential_key("token_count")
        (True, False)
        >>> is_credential_key("gen_ai.prompt", {"prompt"})
        True
    """
    if not isinstance(names, frozenset):  # a set or a list: cached by its frozen form
        names = frozenset(names)
    return _is_listed(key[-_LONGEST_KEY:], names)


@functools.lru_cache(maxsize=4096)  # keys repeat: after the first, a dict lookup
def _is_listed(key: str, names: frozenset[str]) -> bool:
    forms = _forms(names)
    words = [word.lower() for word in _KEY_BREAK.split(key) if word]
    return any("_".join(words[i:]) in forms for i in range(len(words)))


@functools.lru_cache(maxsize=64)
def _forms(names: frozenset[str]) -> frozenset[str]:
    """*names* as lower-case words joined by ``_``, as :func:`_is_listed` compares them."""
    return frozenset(
        "_".join(word.lower() for word in _KEY_BREAK.split(name) if word) for name in names
    )


def _registered_header(name: str) -> bool:
    """Whether a ``-``/``_``-separated word of header *name* is a registered secret word
    (``X-Sess: ...`` after ``register_secret_words(["sess"])``)."""
    extra = _EXTRA_WORDS
    return bool(extra) and any(word in extra for word in _WORD_SPLIT.split(name.lower()))


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
        elif _credential_header(name) or _registered_header(name):  # not KeyError: ...
            value_pattern = _HEADER_VALUE
        if value_pattern is None:
            continue
        start = match.end()
        if text[start : start + 1] in _CLOSERS:  # auth=('bob', 'pw'): the whole tuple
            out.append(text[pos:start])
            out.append(REDACTED)
            pos = _bracketed_end(text, start)
            continue
        value = value_pattern.match(text, start)
        if value is None or value.group().startswith(REDACTED):  # (by the URL pass)
            continue
        out.append(text[pos:start])
        out.append(_replacement(value.group()))
        pos = value.end()
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def _bracketed_end(text: str, start: int) -> int:
    """Where the value opening with the bracket at *start* ends: after its closing bracket.

    One pass over the brackets and quoted strings that follow (linear); a closer
    of another kind (``(]``) does not close. Unbalanced, or nested deeper than
    _MAX_BRACKETS: the end of its line (on the safe side).
    """
    expected: list[str] = []
    for token in _BRACKET_TOKEN.finditer(text, start):
        char = token.group()[0]
        if char in _CLOSERS:
            if len(expected) == _MAX_BRACKETS:
                break
            expected.append(_CLOSERS[char])
        elif char in "\r\n":
            return token.start()
        elif expected and char == expected[-1]:
            expected.pop()
            if not expected:
                return token.end()
    line_end = _LINE_END.search(text, start)
    return len(text) if line_end is None else line_end.start()


def _replacement(value: str) -> str:
    """``REDACTED`` in *value*'s quotes (``'...'``, ``b"..."``), if it has any."""
    prefix = "b" if value[:1] in ("b", "B") and value[1:2] in ("'", '"') else ""
    quote_ = value[len(prefix) : len(prefix) + 1]
    if quote_ in ("'", '"'):
        return f"{prefix}{quote_}{REDACTED}{quote_}"
    return REDACTED


def _redact_pair_repr(match: re.Match[str]) -> str:
    """``('x-api-key', 'abc')`` -> ``('x-api-key', 'REDACTED')`` for a secret-like name."""
    if not _secret_name(match.group("name")):
        return match.group()
    head = match.group()[: match.start("pre") - match.start()]
    quote_ = match.group("q2")
    return f"{head}{match.group('pre')}{REDACTED}{quote_}"
