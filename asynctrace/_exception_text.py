"""An exception's recorded text: redacted, bounded, and redacted with its known secrets.

An HTTP integration that knows a request's secrets (header values, query
values) gives them to :func:`remember` with the exception the request raised; every
span that records that exception later, or one raised ``from`` it, redacts
with them too (:func:`secrets_of`). The text kept of an exception is bounded
(:data:`EXCEPTION_TEXT_CHARS`), and only what is kept is redacted.
"""

from __future__ import annotations

import re
import threading
from collections import OrderedDict, deque
from collections.abc import Collection
from typing import Final

from ._forksafe import reinit_at_fork
from ._redact import redact_text
from ._redact_urls import _URL_END
from ._secret_words import REDACTED

__all__ = [
    "EXCEPTION_TEXT_CHARS",
    "exception_reason",
    "redact_end",
    "redact_exception_text",
    "redact_start",
    "remember",
    "secrets_of",
]

EXCEPTION_TEXT_CHARS: Final = 65_536
"""The characters kept of an exception's text (its message, its stack trace) on a span."""
SCAN_MARGIN: Final = 8192
"""Characters of a redacted slice never kept: those next to where the slice was cut."""
_RESCAN: Final = 4  # a slice that redaction shrank is examined again, this many times longer


def redact_start(
    text: str, keep: int, secrets: Collection[str] = (), *, scan: int = 0, rescan: int = 0
) -> tuple[str, int]:
    """The redacted start of *text*, at most *keep* characters, and how many are left out.

    The one rule for a text too long to redact whole (an exception's text, a
    payload's string): only ``text[:scan]`` is examined (``keep +``
    :data:`SCAN_MARGIN` by default), and what is kept never reaches where that
    slice was cut, where a secret the cut halves is not recognised: the last
    :data:`SCAN_MARGIN` characters of the redacted slice are never kept. When
    redaction shrank the slice that far (a long ``Cookie:`` line), the first
    *rescan* characters (``4 * scan`` by default) are examined instead, and if
    those shrink as much, fewer than *keep* characters are kept. A URL running
    to the slice's end whose userinfo could lie past it is kept up to its
    ``scheme://``, then ``REDACTED``. Time is linear in what is examined.

    Example:
        >>> redact_start("password=hunter2 " + "x" * 100_000, 20)
        ('password=REDACTED xx', 99997)
    """
    scan = scan or keep + SCAN_MARGIN
    for size in (scan, rescan or _RESCAN * scan):
        if len(text) <= size:  # redacted whole: nothing is cut
            whole = redact_text(text, secrets)
            return whole[:keep], max(0, len(whole) - keep)
        head = text[:size]
        url = _open_url(head)
        if url >= 0:  # its userinfo may end past the slice: kept to its "scheme://"
            kept = redact_text(head[:url], secrets)[:keep]
            return (kept + REDACTED if len(kept) < keep else kept), len(text) - len(kept)
        redacted = redact_text(head, secrets)
        if len(redacted) >= keep + SCAN_MARGIN:
            return redacted[:keep], len(text) - keep
    kept = redacted[: max(0, len(redacted) - SCAN_MARGIN)]
    return kept, len(text) - len(kept)


def redact_end(
    text: str, keep: int, secrets: Collection[str] = (), *, scan: int = 0, rescan: int = 0
) -> str:
    """The redacted end of *text*, at most *keep* characters: :func:`redact_start`'s rule
    from the other side. The first :data:`SCAN_MARGIN` characters of the redacted slice
    are never kept, and a part kept that starts inside the slice's first word (no space
    or quote before it), a URL's userinfo cut from its ``scheme://``, starts after that
    word's last ``@``, as ``REDACTED``.

    Example:
        >>> redact_end("x" * 100_000 + " token=abc", 12)
        'ken=REDACTED'
    """
    scan = scan or keep + SCAN_MARGIN
    for size in (scan, rescan or _RESCAN * scan):
        if len(text) <= size:
            return redact_text(text, secrets)[-keep:]
        redacted = redact_text(text[-size:], secrets)
        if len(redacted) >= keep + SCAN_MARGIN:
            start = len(redacted) - keep
            break
    else:
        start = min(len(redacted), SCAN_MARGIN)
    if _URL_END.search(redacted, 0, start) is None:  # the kept part starts in the first word
        stop = _URL_END.search(redacted, start)
        at = redacted.rfind("@", start, stop.start() if stop is not None else len(redacted))
        if at != -1:
            return REDACTED + redacted[at:]
    return redacted[start:]


def _open_url(head: str) -> int:
    """Where a URL *head* ends inside has its rest (after ``scheme://``), when its userinfo
    could end past *head*; ``-1`` if none could.

    A URL could when its host runs to the end of *head*, or holds a ``:`` or ``@``:
    an ``@`` later makes what precedes it a password, as
    :func:`~asynctrace._redact.redact_text` reads URLs. A URL in the path or query
    of the one running to the end runs there too, and is checked alike.
    """
    at = head.rfind("://")
    if at == -1 or _URL_END.search(head, at) is not None:
        return -1
    # The outer URL begins after the last end of a URL before that "://": search the
    # text before it, reversed.
    before = _URL_END.search(head[at - 1 :: -1]) if at else None
    risky = _RISKY_HOST.search(head, at - before.start() if before is not None else 0)
    return risky.start() + 3 if risky is not None else -1


# A "://" whose host (up to "/", "?" or "#") holds ":" or "@", or runs to the end.
# Each try stops at the first of those: linear, in one search.
_RISKY_HOST: Final = re.compile(r"://[^/?#:@]*(?:[:@]|\Z)")


def redact_exception_text(text: str, secrets: Collection[str] = (), *, tail: bool = False) -> str:
    """:func:`redact_text` for an exception's text of any size, in bounded time.

    At most :data:`EXCEPTION_TEXT_CHARS` characters are kept: the start and a
    ``...<truncated N chars>`` note, or with *tail* (a stack trace, whose
    innermost frames and message come last) the start and the end around a
    ``...<N chars left out>...`` note. Only the parts kept (and a margin past
    them) are redacted: a message of megabytes (an HTML error page) costs no
    more than a few of 64 KiB on the thread that records it. A part cut from a
    longer text follows :func:`redact_start`'s rule: it never reaches where the
    redacted slice was cut.

    Example:
        >>> redact_exception_text("token=abc")
        'token=REDACTED'
        >>> redact_exception_text("x" * 70_000)[-26:]
        'x...<truncated 4464 chars>'
    """
    keep = EXCEPTION_TEXT_CHARS
    first = keep // 2 if tail else keep  # characters kept from the start
    last = keep - first  # and from the end
    if len(text) <= keep + SCAN_MARGIN:  # the common case: redacted whole
        text = redact_text(text, secrets)
        if len(text) <= keep:
            return text
        head, end = text[:first], text[len(text) - last :]
        left_out = len(text) - keep
    else:
        head, left_out = redact_start(text, first, secrets)
        end = redact_end(text, last, secrets) if last else ""
        left_out = max(0, left_out - len(end))
    if not tail:
        return f"{head}...<truncated {left_out} chars>"
    return f"{head}...<{left_out} chars left out>...{end}"


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
