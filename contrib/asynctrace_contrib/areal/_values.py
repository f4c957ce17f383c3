"""What AReaL's ``args`` become on a span: attribute values, redacted; warnings said once."""

from __future__ import annotations

import json
import logging
import numbers
from collections.abc import Mapping
from typing import Any, Final

import asynctrace

_log = logging.getLogger("asynctrace_contrib.areal")
_warned: set[str] = set()


def _warn_once(key: str, message: str, *args: object) -> None:
    """Log *message* the first time *key* comes up (AReaL warns and goes on; so does this)."""
    if key in _warned:
        return
    _warned.add(key)
    try:  # an exception's repr may name a URL with its token: redacted as asynctrace logs
        text = asynctrace.redact_text(message % args if args else message)
    except Exception:
        text = f"{message} (arguments left out: they could not be formatted)"
    _log.warning("%s", text)


def _field(config: Any, name: str, default: Any = None) -> Any:
    if isinstance(config, Mapping):
        return config.get(name, default)
    return getattr(config, name, default)


_SCALARS: Final = frozenset({bool, int, float, str})


def _json_text(value: Any) -> str:
    """*value* as the JSON text AReaL writes for it (other objects as their ``str()``)."""
    try:
        return json.dumps(value, ensure_ascii=False, default=str)
    except Exception:  # a circular value, a str() that raises: never break the caller
        try:
            return str(value)
        except Exception:
            return f"<unreadable {type(value).__name__}>"


_REDACTED: Final = "REDACTED"  # what a credential key's value becomes, as in session payloads
_MAX_KEYS_CACHED: Final = 4096
_credential_keys: dict[str, bool] = {}  # key -> asynctrace.is_credential_key(key), bounded
_plain_texts: set[str] = set()  # short strings found to hold nothing to redact, bounded
_MAX_PLAIN_LEN: Final = 256
_plain_words: list[frozenset[str]] = [asynctrace.secret_words()]  # what _plain_texts knew


def _forget_plain_texts(words: frozenset[str]) -> None:
    """Forget the strings found plain and the keys found no credentials: the program has
    registered secret *words* since (``rolloutcode=abc`` was plain, and the key
    ``rolloutcode`` no credential, before ``register_secret_words(["rolloutcode"])``)."""
    _plain_texts.clear()
    _credential_keys.clear()
    _plain_words[0] = words


def _is_credential(key: str) -> bool:
    """``asynctrace.is_credential_key(key)``, remembered: ``args`` keys repeat every step."""
    found = _credential_keys.get(key)
    if found is None:
        words = asynctrace.secret_words()  # before judging: a registration meanwhile wins
        found = asynctrace.is_credential_key(key)
        if len(_credential_keys) < _MAX_KEYS_CACHED and words is _plain_words[0]:
            _credential_keys[key] = found
    return found


def _text(value: str) -> str:
    """*value* redacted (``asynctrace.redact_text``).

    ``args`` strings repeat every step: a short one that redaction leaves as
    it is is remembered (a bounded set), so next time it costs a set lookup.
    """
    redacted = asynctrace.redact_text(value)
    if redacted == value and len(value) <= _MAX_PLAIN_LEN and len(_plain_texts) < _MAX_KEYS_CACHED:
        _plain_texts.add(value)
    return redacted


def _attribute(value: Any) -> Any:
    """One ``args`` value as a span attribute, as close to AReaL's JSON as attributes go.

    Numbers stay as they are (numpy's numbers as the int or float they stand
    for), a string is redacted (:func:`_text`), a list or tuple of one scalar
    type stays a list (of redacted strings), anything else (mappings, mixed or
    nested lists) is its JSON text, redacted: a ``headers`` mapping loses its
    ``Authorization`` value.
    """
    cls = value.__class__
    if cls is int or cls is float or cls is bool:
        return value
    if cls is str:
        return value if value in _plain_texts else _text(value)
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):  # a str enum: its value, as json.dumps writes it
        return _text(str.__str__(value))
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, list | tuple):
        kinds = {v.__class__ for v in value}
        if len(kinds) == 1 and kinds <= _SCALARS:
            return _texts(value) if str in kinds else list(value)
    return _text(_json_text(value))


def _pair_name(name: str) -> bool:
    """Whether *name*, the first of two strings, names a credential: a credential key, or
    a header name with a ``-`` that holds a credential word (``Ocp-Apim-Subscription-Key``),
    as session payloads tell a pair's name."""
    return _is_credential(name) or ("-" in name and asynctrace.is_credential_header(name))


def _texts(value: list[str] | tuple[str, ...]) -> list[str]:
    """A list of strings, each redacted (:func:`_text`), and the one after the name of a
    credential REDACTED, as session payloads hide it: a command line's flag
    (``["--api-key", "..."]``) or a pair's name (``["Authorization", "Bearer ..."]``; a
    data pair such as ``["token", "</s>"]`` too, as in the payloads)."""
    out: list[str] = []
    hide = len(value) == 2 and len(value[0]) <= _MAX_PLAIN_LEN and _pair_name(value[0])
    first = hide
    for item in value:
        if hide and not first:
            out.append(_REDACTED)
            hide = False
            continue
        first = False
        out.append(item if item in _plain_texts else _text(item))
        if item[:1] == "-" and "=" not in item and len(item) <= _MAX_PLAIN_LEN:
            hide = _is_credential(item)
    return out


def _attributes(
    args: Mapping[str, Any] | None, category: str | None = None
) -> dict[str, Any] | None:
    """AReaL's ``args`` as span attributes (see :func:`_attribute`), with ``areal.category``.

    ``None`` values are left out: an attribute cannot hold ``null``. The value
    of a credential key (``asynctrace.is_credential_key``: ``api_key``,
    ``access_token``, ``Authorization``) is ``"REDACTED"``, whatever its type.
    """
    out: dict[str, Any] = {}
    if args:
        words = asynctrace.secret_words()
        if words is not _plain_words[0]:
            _forget_plain_texts(words)
        for key, value in args.items():
            if value is None:
                continue
            name = key if key.__class__ is str else str(key)
            secret = _credential_keys.get(name)  # inline: args keys repeat every step
            if secret is None:
                secret = _is_credential(name)
            cls = value.__class__
            if secret:
                out[name] = _REDACTED
            elif (
                cls is int or cls is float or cls is bool or (cls is str and value in _plain_texts)
            ):  # inline, no call: what args hold every step
                out[name] = value
            else:
                out[name] = _attribute(value)
    if category is not None:
        out["areal.category"] = category
    return out or None
