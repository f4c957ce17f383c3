"""Secret-like names: the words that make one, and the words a program adds.

A name is secret-like when it contains, case-insensitively, one of
:data:`SECRET_WORDS` or a word given to :func:`register_secret_words`. One
of 3 characters or more counts anywhere; a shorter one (``sk``) anywhere in a
URL's query key, as ``url.full`` redaction counts it, but elsewhere only
where no letter or digit is glued to it (``sk=`` and ``x_sk=``, not
``task=``). Outside a URL's query key, ``sig`` does not count followed by a
letter (``sigma``, ``design``) nor ``auth`` in ``author`` or ``authority``.
The compiled patterns of each set of words are kept, so a reader never sees a
half-registered set.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Collection, Iterable
from typing import Final
from urllib.parse import unquote_plus

from ._errors import ConfigurationError
from ._forksafe import reinit_at_fork

__all__ = [
    "MAX_SECRET_WORDS",
    "REDACTED",
    "SECRET_WORDS",
    "register_secret_words",
    "secret_words",
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
# In free text, two words count only where they are no start of an ordinary word:
# "sig" not in "sigma", "signal" or "design" ("signature" is a word of its own), "auth"
# not in "author" or "authority" (but in "authorization"). A URL's query key counts
# them anywhere, as url.full redaction does.
_NAME_FORMS: Final = {"sig": r"sig(?![a-z])", "auth": r"auth(?!or(?!i[sz]))"}
_SECRET_NAME = re.compile(
    "|".join(_NAME_FORMS.get(word, word) for word in SECRET_WORDS), re.IGNORECASE
)
_DEFAULT_NAME: Final = _SECRET_NAME  # the default words alone, whatever is registered


def _flag_patterns(words: str) -> tuple[re.Pattern[str], re.Pattern[str]]:
    """A secret-like command-line flag and what separates it from its value; and its
    gate, what any text it matches in holds.

    ``--password x``, ``--token=x``, an argv list's ``'--password', 'x'`` (a
    ``CalledProcessError``'s command): a ``--flag`` holding one of *words* (a
    regex alternation), or a ``-flag`` (Go's ``-token x``). ``-u``, ``--user``
    and ``--proxy-user`` only before a ``user:`` (curl's ``-u bob:pw``, and
    ``-ubob:pw`` glued). The value is matched apart (``_redact_pairs._VALUE``).
    Other flags do not match at all: a command line of ordinary flags costs no
    Python call.

    The gate: a ``-`` that starts a flag and, within a name's length, one of
    *words*, or a ``-u``. Its first character is a literal, so a text without
    one is scanned at C speed (the flag pattern, which starts with
    look-behinds, is tried at every character).
    """
    flag = re.compile(
        r"(?:(?<![\w.\-])|(?<=\\[nrt]))(?:b?(?P<quote>['\"]))?"
        rf"(?P<flag>--?(?=[\w.\-]{{0,127}}?(?:{words}))[a-z][\w.\-]{{0,127}}"
        r"|(?:-u|--user|--proxy-user)"
        r"(?=(?:['\"][ \t]*,[ \t]*|[ \t]*=[ \t]*|[ \t]+)b?['\"]?[^\s'\":=]{0,256}:)"
        r"|(?<![^\s'\"])(?P<glued>-u)(?=[^\s'\":=\-][^\s'\":=]{0,255}:(?![\s\])},]|\Z)))"
        r"(?(glued)|(?(quote)(?P=quote)[ \t]*,[ \t]*|(?:[ \t]*=[ \t]*|[ \t]+)))",
        re.IGNORECASE,
    )
    gate = re.compile(
        rf"-(?:(?<![\w.\-]-)|(?<=\\[nrt]-))[\w.\-]{{0,127}}?(?:{words})|-u", re.IGNORECASE
    )
    return flag, gate


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
        >>> from asynctrace import redact_text
        >>> register_secret_words(["rolloutcode"])
        >>> redact_text("GET http://h/x?rolloutcode=abc&n=1")
        'GET http://h/x?rolloutcode=REDACTED&n=1'
    """
    global _SECRET_NAME, _REGISTERED, _REGISTERED_NAME
    checked = _checked_words(words)
    with _WORDS_LOCK:
        # A word holding one already matched anywhere (``mytoken``) adds nothing.
        anywhere = [
            *(w for w in SECRET_WORDS if w not in _NAME_FORMS),  # "author" adds a word
            *(w for w in _EXTRA_WORDS if len(w) >= _MIN_WORD),
        ]
        added = {
            w
            for w in checked - _EXTRA_WORDS
            if w not in SECRET_WORDS and not any(a in w for a in anywhere)
        }
        # ... to the patterns of free text, but it still names a key as the program's
        # (a payload's "hftoken", which no default rule reads as a credential)
        named = checked - added - _EXTRA_WORDS - _NAMED - set(SECRET_WORDS)
        if not added and not named:
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
        _NAMED.update(named)
        name, key, flag, registered = _word_patterns(_EXTRA_WORDS | _NAMED)
        _PATTERNS[name] = (key, flag)  # before _SECRET_NAME: a reader finds them
        _SECRET_NAME = name
        _REGISTERED_NAME = registered
        # Last: a cache that sees the new words and forgets its plain texts must find
        # them redacted by the new patterns when it looks again.
        _REGISTERED = frozenset(_EXTRA_WORDS | _NAMED)


# How many words register_secret_words adds in a process, at most: each one costs every
# name that redaction examines a little (64: +25% on a 200-character message).
MAX_SECRET_WORDS: Final = 64
_MIN_WORD = 3  # shorter words count in free text only where nothing alphanumeric is glued
# to them: "sk" would make every "task=", "risk=" and "desk=" secret-like.
_EXTRA_WORDS: set[str] = set()
_NAMED: set[str] = set()  # words given that free text matched already (not counted)
_REGISTERED: frozenset[str] = frozenset()  # the words as secret_words() gives them
# The registered words alone, as names in free text match them (None: none registered).
_REGISTERED_NAME: re.Pattern[str] | None = None


def secret_words() -> frozenset[str]:
    """The words given to :func:`register_secret_words` in this process (lower case),
    the built-in ones aside.

    The same object until a registration adds a word: a cache of text found
    to hold nothing secret can tell, by identity, that it must be forgotten.

    Example:
        >>> before = secret_words()
        >>> secret_words() is before
        True
    """
    return _REGISTERED


_WORDS_LOCK = threading.Lock()  # one registration at a time
reinit_at_fork(_WORDS_LOCK)  # held by another thread at fork(): new in the child
# The patterns of each set of words registered so far, by its name pattern (the
# _SECRET_NAME they go with): URL keys, flags. At most MAX_SECRET_WORDS + 1 entries.
_Flags = tuple[re.Pattern[str], re.Pattern[str]]  # a flag pattern and its gate
_PATTERNS: dict[re.Pattern[str], tuple[re.Pattern[str], _Flags]] = {
    _SECRET_NAME: (
        re.compile("|".join(SECRET_WORDS), re.IGNORECASE),
        _flag_patterns(_SECRET_NAME.pattern),
    )
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


def _word_patterns(
    extra: Collection[str],
) -> tuple[re.Pattern[str], re.Pattern[str], _Flags, re.Pattern[str]]:
    """The patterns of the default words and *extra*: for names, URL keys and flags,
    and for names holding one of *extra* (a header's name, a payload's key).

    Names (free text): a word of ``_MIN_WORD`` characters or more anywhere, a
    shorter one with no letter or digit glued to it. URL keys: every word
    anywhere, as the HTTP integrations' ``url.full`` redaction matches them.
    """
    added = list(map(re.escape, sorted(w for w in extra if len(w) >= _MIN_WORD)))
    long = [*SECRET_WORDS, *added]
    short = sorted(w for w in extra if len(w) < _MIN_WORD)
    # A short word, then (a lookbehind of its length) no letter or digit before it: a
    # literal first keeps the pattern's quick scan for its first characters.
    registered = [
        *added,
        *(
            rf"(?:{'|'.join(map(re.escape, words))})(?<![^\W_][\s\S]{{{size}}})(?![^\W_])"
            for size in range(1, _MIN_WORD)
            if (words := [w for w in short if len(w) == size])
        ),
    ]
    names = "|".join([*(_NAME_FORMS.get(word, word) for word in SECRET_WORDS), *registered])
    keys = "|".join([*long, *map(re.escape, short)])
    return (
        re.compile(names, re.IGNORECASE),
        re.compile(keys, re.IGNORECASE),
        _flag_patterns(names),
        re.compile("|".join(registered), re.IGNORECASE),
    )


def _key_pattern() -> re.Pattern[str]:
    """What makes a URL's query key or path parameter secret-like (every word, anywhere)."""
    try:
        return _PATTERNS[_SECRET_NAME][0]
    except KeyError:  # a name pattern set from outside (restored by a test): its words
        return _SECRET_NAME


def _flag() -> _Flags:
    """What finds a secret-like command-line flag, and its gate, for the words registered
    so far."""
    try:
        return _PATTERNS[_SECRET_NAME][1]
    except KeyError:  # pragma: no cover - as _key_pattern
        return _flag_patterns(_SECRET_NAME.pattern)


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


def _registered_name(name: str) -> bool:
    """Whether *name* (a payload's key, a header's name) holds a registered secret word,
    as a name in free text holds one (``mysess``, ``X-MySess`` after
    ``register_secret_words(["sess"])``; a word shorter than 3 characters with no
    letter or digit glued to it; ``Client-Assertion`` holds ``client_assertion``)."""
    registered = _REGISTERED_NAME
    return registered is not None and (
        registered.search(name) is not None
        or ("-" in name and registered.search(name.replace("-", "_")) is not None)
    )


def _registered_header(name: str) -> bool:
    """Whether ``name: ...`` in text is a header holding a registered secret word: as
    :func:`_registered_name`, but not an exception's name (``SessError: ...``)."""
    last = name.rpartition(".")[2]  # json.decoder.JSONDecodeError: ...
    return _registered_name(name) and not (
        last[:1].isupper() and last.endswith(("Error", "Exception", "Warning"))
    )


_WORD_SPLIT = re.compile(r"[\-_]")
