"""Task ids and counter names as recorded: redacted as exception text is, and bounded.

Session records (:mod:`asynctrace._session_record`), the span scopes and
baggage stamp these names on what they write; a name that repeats costs a set
lookup once redaction has left it as it is.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from . import _redact, _secret_words
from ._payloads import MAX_TEXT, _Copier, _count_cut

__all__ = ["bounded_text", "redacted_name"]


def bounded_text(text: str, secrets: Collection[str] = frozenset(), *, count: bool = True) -> str:
    """*text* redacted as exception text is, and bounded as a payload's string is.

    At most :data:`~asynctrace._payloads.MAX_TEXT` characters are kept, then
    a ``"...<truncated N chars>"`` note; of a longer text only a prefix is
    redacted (see :func:`asynctrace._payloads.plain_payload`), so the time it
    takes is bounded whatever the size of *text*. A text cut is counted in
    :func:`asynctrace._payloads.truncated_payloads` when *count*.

    Example:
        >>> bounded_text("token=abc")
        'token=REDACTED'
        >>> bounded_text("x" * 70_000)[-26:]
        'x...<truncated 4464 chars>'
    """
    if len(text) <= MAX_TEXT:  # the common case: a short text, redacted whole
        redacted = _redact.redact_text(text, secrets)
        if len(redacted) <= MAX_TEXT:
            return redacted
    copier = _Copier()
    out = copier.text(text, frozenset(secrets))
    if copier.cut and count:
        _count_cut()
    return out


_MAX_PLAIN_CACHED: Final = 4096
_MAX_PLAIN_LEN: Final = 256
_plain: set[str] = set()  # short names redaction leaves as they are (bounded)
_plain_pattern: object = None  # the secret-name pattern _plain was found with


def redacted_name(name: str, *, count: bool = False) -> str:
    """A task id or counter name redacted as exception text is (no URL userinfo,
    no secret query value or credential pair), and bounded as a payload's
    string is (:func:`bounded_text`; a name cut is counted when *count*).

    Names repeat from record to record: a short one that redaction leaves as
    it is, is remembered (a bounded set, forgotten when
    :func:`asynctrace.register_secret_words` widens what is secret), so the
    next time it costs a set lookup.

    Example:
        >>> redacted_name("https://u:pw@host/item-7")
        'https://host/item-7'
    """
    global _plain_pattern
    if _plain_pattern is not _secret_words._SECRET_NAME:  # secret words were added
        _plain.clear()
        _plain_pattern = _secret_words._SECRET_NAME
    if name in _plain:
        return name
    redacted = bounded_text(name, count=count)
    if redacted == name and len(name) <= _MAX_PLAIN_LEN and len(_plain) < _MAX_PLAIN_CACHED:
        _plain.add(name)
    return redacted
