"""Payloads attached to sessions and executions: copied as plain JSON values at the call."""

from __future__ import annotations

import math
import numbers
import re
import threading
from collections.abc import Mapping
from typing import Any, Final

from . import _secret_words
from ._credential_names import is_credential_header, is_credential_key
from ._errors import ConfigurationError
from ._exception_text import redact_start, secrets_of
from ._forksafe import reinit_at_fork
from ._redact import redact_text
from ._secret_words import REDACTED

__all__ = ["MAX_NODES", "MAX_PAYLOAD_CHARS", "MAX_TEXT", "check_payload", "plain_payload"]


def check_payload(payload: object, where: str) -> dict[str, Any] | None:
    """A JSON-ready copy of a payload mapping with string keys (``None`` when empty), or raise."""
    if payload is None:
        return None
    if not isinstance(payload, Mapping):
        raise ConfigurationError(
            f"{where}: expected a mapping with str keys (or None), got {type(payload).__name__}"
        )
    for key in payload:
        if not isinstance(key, str):
            # Named by type and a bounded repr: a payload's values may be secrets, or huge.
            raise ConfigurationError(
                f"{where}: expected a mapping with str keys (or None), got a "
                f"{type(payload).__name__} with key {redact_text(_short_repr(key))} "
                f"of type {type(key).__name__}"
            )
    return plain_payload(payload) or None


def _short_repr(value: object) -> str:
    """``repr(value)``, cut to 80 characters (``"<unreadable>"`` if it raises)."""
    try:
        text = repr(value)
    except Exception:
        return "<unreadable>"
    return text if len(text) <= _REPR_CHARS else f"{text[:_REPR_CHARS]}..."


_REPR_CHARS = 80


_PAYLOAD_DEPTH = 16
MAX_NODES: Final = 10_000
"""Values (keys not counted) one payload keeps; the rest become one marker per container."""
MAX_TEXT: Final = 65_536
"""Characters one string of a payload keeps (a key's too), after redaction."""
MAX_PAYLOAD_CHARS: Final = 1 << 20
"""Characters all the strings of one payload keep together (keys included)."""

_CUT_VALUES: Final = f"<truncated: more than {MAX_NODES} values>"
_CUT_KEY: Final = "<truncated>"
_CUT_TEXT: Final = f"<truncated: more than {MAX_PAYLOAD_CHARS} characters>"
# Redacting a huge string costs time linear in it: only a prefix is examined
# (_exception_text.redact_start's rule), long enough that a credential cut in half
# at its end lies past what is kept.
_SCAN: Final = 4 * MAX_TEXT

_cut_lock = threading.Lock()
reinit_at_fork(_cut_lock)  # a lock held at fork() is made new in the child
_cut_payloads = 0


def truncated_payloads() -> int:
    """How many payloads of this process were cut (too many values or too much text)."""
    return _cut_payloads


def _count_cut() -> None:
    global _cut_payloads
    with _cut_lock:  # only when a payload is cut: off the common path
        _cut_payloads += 1


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
    values; an exception's remembered secrets too), as a session's ``reason`` is;
    keys too. The value of a key that names a credential
    (:func:`asynctrace.is_credential_key`: ``password``, ``api_key``,
    ``X-Api-Key``, ``access_token``, ``Cookie``...), or holds a word given to
    :func:`asynctrace.register_secret_words` (and is not shaped as data,
    ``code_count``), is ``"REDACTED"`` whatever its type;
    so is, in a list or tuple, the item after such a name: the value of a
    two-item pair (``("Authorization", "Basic ...")``, a header list's entry,
    ``bytes`` names too) and the argument of a flag (``["mysql", "--password",
    "..."]``). A string too long to redact whole (over ``4 * MAX_TEXT``
    characters) that ends its redacted prefix inside a URL whose userinfo could
    lie past it is kept up to that URL's ``scheme://`` only. Two
    keys that read the same once strings (``1`` and ``"1"``) are both kept,
    the later as ``"1#2"``.

    A payload is bounded: at most :data:`MAX_NODES` values (shared references
    count each time they appear); :data:`MAX_TEXT` characters per string, cut
    with a ``"...<truncated N chars>"`` note; :data:`MAX_PAYLOAD_CHARS`
    characters of strings in all. A container cut short ends with a marker
    (``"<truncated: ...>"``, under the key ``"<truncated>"`` in a mapping);
    each payload cut is counted (:func:`truncated_payloads`, the session
    tracer's ``stats()["truncated_payloads"]``).

    A value that cannot be read (its ``str()`` raises, say) is written as
    ``"<unreadable TYPE>"``: a payload never breaks the caller.
    """
    copier = _Copier()
    out = copier.mapping(payload, _PAYLOAD_DEPTH + 1)
    if copier.cut:
        _count_cut()
    return out


_BIG = 1 << 4096  # past this, an int is written as a note of its size (see _Copier.plain)


class _Copier:
    """One payload's copy, with what is left of its budgets."""

    __slots__ = ("chars", "cut", "nodes")

    def __init__(self) -> None:
        self.nodes = MAX_NODES
        self.chars = MAX_PAYLOAD_CHARS
        self.cut = False

    def mapping(self, value: Mapping[Any, Any], depth: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        suffixes: dict[str, int] = {}  # the last "#n" given to a name, so a run of them is linear
        keys = _known_keys()
        for key, item in value.items():
            if self.nodes <= 0 or self.chars <= 0:
                out[_free(out, _CUT_KEY, suffixes)] = _CUT_VALUES if self.nodes <= 0 else _CUT_TEXT
                self.cut = True
                break
            self.nodes -= 1
            secret = False
            try:
                raw = key if type(key) is str else str(key)
                known = (keys.get(raw) or _key(raw)) if len(raw) <= _KEY_CACHED else None
                if known is not None:
                    text, secret = known
                    self.chars -= len(text)
                else:
                    text, secret = self.text(raw), is_credential_key(raw)
                name = text if text not in out else _free(out, text, suffixes)
            except Exception:
                name = _free(out, f"<unreadable key {type(key).__name__}>", suffixes)
            try:
                # A credential's value goes whatever its type: a number or a
                # mapping is as secret as a string.
                out[name] = REDACTED if secret else self.plain(item, depth - 1)
            except Exception:
                out[name] = f"<unreadable {type(item).__name__}>"
        return out

    def text(self, value: str, secrets: frozenset[str] = frozenset()) -> str:
        """*value* redacted, then cut to what the budgets leave."""
        if self.chars <= 0:
            self.cut = True
            return _CUT_TEXT
        if len(value) > _SCAN:
            # A prefix only; should redaction shrink it to near what is kept, the whole.
            text, dropped = redact_start(value, MAX_TEXT, secrets, scan=_SCAN, rescan=len(value))
        else:
            text = redact_text(value, secrets)
            dropped = max(0, len(text) - MAX_TEXT)
            text = text[:MAX_TEXT]
        keep = min(MAX_TEXT, self.chars)
        if len(text) > keep:
            dropped += len(text) - keep
            text = text[:keep]
        if dropped:
            self.cut = True
            text = f"{text}...<truncated {dropped} chars>"
        self.chars -= min(len(text), keep)
        return text

    def sequence(
        self, value: list[Any] | tuple[Any, ...] | set[Any] | frozenset[Any], depth: int
    ) -> list[Any]:
        """*value* as a list. In a list or tuple, the item after a name of a credential
        is REDACTED: a pair's value (``("Authorization", "Basic ...")``) and a flag's
        argument (``["mysql", "--password", "..."]``)."""
        out: list[Any] = []
        ordered = isinstance(value, (list, tuple))  # a set has no order: nothing follows a name
        # A pair's name is read once, here; in the loop, only a str starting with "-" is.
        hide_second = ordered and len(value) == 2 and _pair_name(next(iter(value)))
        hide = False
        for item in value:
            if self.nodes <= 0 or self.chars <= 0:
                out.append(_CUT_VALUES if self.nodes <= 0 else _CUT_TEXT)
                self.cut = True
                break
            self.nodes -= 1
            if hide:
                out.append(REDACTED)
                hide = False
                continue
            out.append(self.plain(item, depth - 1))
            if hide_second:
                hide, hide_second = True, False
            elif ordered and type(item) is str and item[:1] == "-" and _flag_name(item):
                hide = True
        return out

    def plain(self, value: Any, depth: int) -> Any:
        kind = type(value)
        if kind is str:
            return self.text(value)
        if kind is bool or value is None:
            return value
        if kind is int:
            # JSON holds any int, but writing one with more than sys.get_int_max_str_digits()
            # digits (4300 by default) raises, which would cost the whole record.
            return value if -_BIG < value < _BIG else f"<int of {value.bit_length()} bits>"
        if kind is float:
            return value if math.isfinite(value) else repr(value)
        if isinstance(value, BaseException):  # with the secrets remembered for it
            return self.text(str(value), secrets_of(value))
        if depth <= 0:
            return self.text(str(value))
        if isinstance(value, Mapping):
            return self.mapping(value, depth)
        if isinstance(value, (list, tuple, set, frozenset)):
            return self.sequence(value, depth)
        if isinstance(value, numbers.Real):  # int and float subclasses (enums), numpy's numbers
            return self.plain(
                int(value) if isinstance(value, numbers.Integral) else float(value), depth
            )
        return self.text(str(value))


def _pair_name(item: object) -> bool:
    """Whether *item*, the first of a pair, names a credential: a credential key
    (``Authorization``, ``X-Api-Key``, ``password``), or a header name, with a ``-``,
    that holds a credential word (``Ocp-Apim-Subscription-Key``); ``bytes`` too, as
    ASGI sends headers. Data such as ``("token_count", 5)`` keeps its value, as under a
    key. A command-line flag (:func:`_flag_name`) is a credential key too.
    """
    if isinstance(item, (bytes, bytearray)):
        if len(item) > _KEY_CACHED:  # no name is that long: a value, not a name
            return False
        name = bytes(item).decode("latin-1")
    elif isinstance(item, str) and len(item) <= _KEY_CACHED:
        name = item
    else:
        return False
    return is_credential_key(name) or ("-" in name and is_credential_header(name))


def _flag_name(item: str) -> bool:
    """Whether *item*, a ``str`` starting with ``-``, is a command-line flag naming a
    credential: ``-`` or ``--`` then a credential key (``--password``, ``--api-key``),
    without ``=`` (``--password=x`` is redacted as text is)."""
    return len(item) <= _KEY_CACHED and "=" not in item and is_credential_key(item)


def _key(raw: str) -> tuple[str, bool]:
    """A short key's recorded name and whether it names a credential (cached: keys repeat)."""
    words = _secret_words._REGISTERED  # before judging: a registration meanwhile wins
    known = (raw if _PLAIN_KEY.fullmatch(raw) else redact_text(raw), is_credential_key(raw))
    if _KEYS_WORDS is words:  # else judged with words the cache no longer holds
        if len(_KEYS) >= _MAX_KEYS:  # names made up per call: stay bounded
            _KEYS.clear()
        _KEYS[raw] = known
    return known


def _known_keys() -> dict[str, tuple[str, bool]]:
    """The cache of short keys, forgotten when the registered secret words change."""
    global _KEYS_WORDS
    if _KEYS_WORDS is not _secret_words._REGISTERED:
        _KEYS.clear()
        _KEYS_WORDS = _secret_words._REGISTERED
    return _KEYS


_KEY_CACHED = 128  # longer keys are redacted each time, under the payload's budget
_MAX_KEYS = 4096
_KEYS: dict[str, tuple[str, bool]] = {}
_KEYS_WORDS = _secret_words._REGISTERED  # the registered words _KEYS was judged with
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.\-]{1,64}")  # nothing redact_text would change


def _free(out: dict[str, Any], name: str, suffixes: dict[str, int]) -> str:
    """*name*, or if *out* has it already, the first free ``name#n`` (n from 2): nothing lost."""
    if name not in out:
        return name
    n = suffixes.get(name, 1) + 1
    while f"{name}#{n}" in out:
        n += 1
    suffixes[name] = n
    return f"{name}#{n}"
