"""An exception's recorded text: redacted, bounded, and redacted with its known secrets.

An HTTP integration that knows a request's secrets (header values, query
values) gives them to :func:`remember` with the exception the request raised; every
span that records that exception later, or one raised ``from`` it, redacts
with them too (:func:`secrets_of`). The text kept of an exception is bounded
(:data:`EXCEPTION_TEXT_CHARS`), and only what is kept is redacted.
"""

from __future__ import annotations

import threading
from collections import OrderedDict, deque
from collections.abc import Collection
from typing import Final

from ._forksafe import reinit_at_fork
from ._redact import redact_text

__all__ = [
    "EXCEPTION_TEXT_CHARS",
    "exception_reason",
    "redact_exception_text",
    "remember",
    "secrets_of",
]

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
