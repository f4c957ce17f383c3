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
  runs to the next ``@`` of its line. A query value percent-encoded whole
  (``next=%2Fcb%3Ftoken%3D...``) is decoded and redacted inside as a query; a
  URL written with JSON's escaped slashes (``postgres:\\/\\/u:p@h``) or
  percent-encoded whole in the text (``http%3A%2F%2Fu%3Ap%40h``) is redacted
  as one written plainly;
- a secret-like name followed by ``=`` (``token=abc``, ``user[password]=``),
  a quoted one followed by ``:`` (``'Authorization': 'Basic abc'``, JSON,
  ``{b'password': b'abc'}``), a credential header line (``Authorization:
  Bearer abc``, ``Cookie: a=b``, ``Private-Token: abc``) and a header pair
  repr (``(b'x-api-key', b'abc')``) keep the name and lose the whole value;
  a value in brackets (``auth=('bob', 'pw')``, ``credentials={...}``) up to
  its matching bracket, or to the end of its line; a quoted one
  (``password: "abc"``, ``Authorization: 'Basic abc'``) through its closing
  quote, or to the end of its line; an unquoted one up to a space, without
  the ``)``, ``,``, ``]`` or ``}`` trailing it. A name that is data
  (:func:`~asynctrace._credential_names.is_data_name`: ``max_tokens``,
  ``token_ids``) keeps its value;
- the value after a secret-like command-line flag (``--password abc``,
  ``--api-key=abc``, an argv list's ``'--token', 'abc'``; not a data flag,
  ``--max-tokens``), a ``user:pass`` after ``-u`` or ``--user`` (curl's
  form), and the password after ``-p`` on the line of a tool that takes one
  there (``mysql -pabc``, ``sshpass -p abc``, ``docker login -p abc``);
- a PEM private key (``-----BEGIN RSA PRIVATE KEY-----`` to its END line, or
  to the end of the text) is replaced whole;
- ``Bearer <credential>`` loses the credential (after a run of scheme words,
  ``Bearer Token abc``; a quoted one keeps its quotes);
- these forms are read inside escaped text too: a name right after an escaped
  line break or tab (``\\r\\nAuthorization: ...`` in a repr or JSON) or a
  path's backslash (``C:\\app\\token=abc``), a value in escaped quotes
  (``\\"password\\": \\"abc\\"``, JSON inside JSON), a URL with its
  slashes escaped twice (``postgres:\\\\/\\\\/u:p@h``) or percent-encoded
  with its slashes left as they are (``https%3A//u%3Ap%40h``);
- an unquoted ``name: value`` where *name* is a credential header, holds a
  registered word, or is a lower-case key whose last word is a credential
  (``spring.datasource.password: abc``, ``secretAccessKey: abc``; after a
  ``[``: Go's ``map[Authorization:[...]]``), and HTTPie's ``name==value``;
- each string of *secrets* (what the caller knows to be secret: a request's
  header values, its query values) is replaced wherever it appears, but for
  those under 4 characters (``1``, ``?0``).

The secrets given for an exception go with it (``_exception_text.remember``):
a span that records the same exception later, as it escapes the spans around
the one that knew them, or an exception raised ``from`` it, is redacted with
them too.

A name is secret-like when it contains, case-insensitively, one of
:data:`~asynctrace._secret_words.SECRET_WORDS` (or a word given to
:func:`~asynctrace.register_secret_words`; one
shorter than 3 characters, ``sk``, counts anywhere in a URL's query key, as
``url.full`` redaction counts it, but elsewhere only where no letter or digit
is glued to it: ``sk=`` and ``x_sk=``, not ``task=``).
Outside a URL's query key, ``sig`` followed by a letter (``sigma``) and
``auth`` in ``author``/``authority`` do not count. Matching errs on the safe
side: ``monkey=1`` loses its ``1``. Not found: a secret with nothing
secret-like beside it (a literal passed positionally, ``login("bob", "pw")``). Every pattern
runs in time linear in the text (no nested quantifier can backtrack over a
long run; URLs are found with ``str.find``, secrets too), and nothing here
raises.
"""

from __future__ import annotations

import re
from collections.abc import Collection

from ._redact_pairs import (
    _PAIR_REPR,
    _PASSWORD_TOOLS,
    _redact_flags,
    _redact_pair_repr,
    _redact_pairs,
    _redact_tool_passwords,
    _replacement,
)
from ._redact_urls import (
    _ESCAPED_SLASHES,
    _TWICE_ESCAPED_SLASHES,
    _redact_encoded_urls,
    _redact_escaped_urls,
    _redact_urls,
)
from ._secret_words import REDACTED

__all__ = ["redact_text"]

# A PEM block's first line; a private key's label holds "PRIVATE KEY".
_PEM_BEGIN = re.compile(r"-----BEGIN ([A-Z0-9 ]{1,64})-----")
# "Bearer abc", "Bearer Bearer abc", "Bearer Token abc" (a run of scheme words, kept)
# lose "abc" (a quoted one keeps its quotes); also after an escaped line break ("\n").
_BEARER = re.compile(
    r"(?:(?<![\w\-])|(?<=\\[nrt]))(bearer[ \t]+(?:(?:bearer|basic|digest|token|negotiate|jwt)"
    r"[ \t]+)*)(\\'[^'\s\\]+\\'|\\\"[^\"\s\\]+\\\"|'[^'\s]+'|\"[^\"\s]+\"|[\w\-.~+/:]+=*)",
    re.IGNORECASE,
)
_SHORT = 8  # secrets shorter than this are replaced only where they stand alone
_MIN_SECRET = 4  # shorter ones ("1", "?0") are not replaced at all: they are everywhere
_MAX_SECRETS = 1024  # the longest this many secrets of one exception are replaced...
_MAX_SECRETS_CHARS = 262144  # ...and no more than this many characters of them in all


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
        if _TWICE_ESCAPED_SLASHES in text:
            text = _redact_escaped_urls(text, _TWICE_ESCAPED_SLASHES[1:4])
        if _ESCAPED_SLASHES in text:
            text = _redact_escaped_urls(text)
        if "%3" in text:
            text = _redact_encoded_urls(text)
        if "=" in text or ":" in text:
            text = _redact_pairs(text)
        if "(" in text and "," in text:
            text = _PAIR_REPR.sub(_redact_pair_repr, text)
        if "-" in text:  # after the pairs: a flag's value may be a header name
            text = _redact_flags(text)  # (--user Authorization: ...)
        # The patterns below start with look-behinds, tried at every character: a test
        # for their words in a case-folded copy (what an ignored case matches: the long
        # s is "s") costs a thirtieth of a scan.
        folded = text.casefold()
        if "-p" in text and any(tool in folded for tool in _PASSWORD_TOOLS):
            text = _redact_tool_passwords(text)
        return _BEARER.sub(_bearer, text) if "bearer" in folded else text
    except Exception:  # a pattern cannot fail on a str; a caller's odd "secrets" might
        return REDACTED


def _bearer(match: re.Match[str]) -> str:
    """A ``Bearer`` credential's replacement: its scheme words kept, the credential gone."""
    return match.group(1) + _replacement(match.group(2))


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
