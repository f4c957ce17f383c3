"""Which requests are resends: later attempts of one session call (aiohttp's own retry of
a stale pooled connection, a redirect hop, a retry middleware's new attempt)."""

from __future__ import annotations

import functools
import logging
import weakref
from collections.abc import Callable
from typing import Any, Final

from opentelemetry.trace import Span

__all__ = ["PENDING", "attempted", "count_resend"]

logger = logging.getLogger("asynctrace")

# The session calls one of whose attempts failed or was answered 3xx or more (a resend
# may follow), by id: a weak reference to the call and its resends so far. Other
# requests in between (a token fetched before the retry) leave them be; an entry goes
# when its call is collected, and there are at most _MAX_CALLS, the oldest dropped first.
# A call that cannot be referenced weakly (aiohttp's timers on some builds) is held, so
# its id is not reused while remembered, until newer ones push it out.
# Empty, the common case, it costs a request one truth test.
PENDING: Final[dict[int, tuple[Callable[[], Any], int]]] = {}
_MAX_CALLS: Final = 1024


class _Held:
    """A call held by a strong reference, read as a weak reference is: ``held()``."""

    __slots__ = ("_call",)

    def __init__(self, call: Any) -> None:
        self._call = call

    def __call__(self) -> Any:
        return self._call


def _call_of(request: Any) -> Any:
    """What every attempt of one session call shares: aiohttp builds a new
    ``ClientRequest`` for each retry and redirect hop, all with the call's timer;
    the request object itself on an aiohttp whose requests have none."""
    timer = getattr(request, "_timer", None)
    return request if timer is None else timer


def _forget(key: int, ref: Callable[[], Any]) -> None:
    """The call *ref* is gone: its entry, if still its own, goes too."""
    entry = PENDING.get(key)
    if entry is not None and entry[0] is ref:
        PENDING.pop(key, None)


def attempted(request: Any) -> None:
    """*request* failed or was answered 3xx or more: a later attempt of the same session
    call, if any, is a resend."""
    try:
        call = _call_of(request)
        key = id(call)
        entry = PENDING.get(key)
        if entry is not None and entry[0]() is call:
            return  # a resend already: its count stays
        if len(PENDING) >= _MAX_CALLS:
            PENDING.pop(next(iter(PENDING)), None)
        ref: Callable[[], Any]
        try:
            ref = weakref.ref(call, functools.partial(_forget, key))
        except TypeError:  # not weakly referenceable: held, within _MAX_CALLS
            ref = _Held(call)
        PENDING[key] = (ref, 0)
    except Exception:  # an odd request object, another thread's change: no resend count
        logger.debug("asynctrace: could not remember the attempt", exc_info=True)


def count_resend(span: Span, request: Any) -> None:
    """Set ``http.request.resend_count`` on *span* when *request* is a later attempt of a
    session call one of whose attempts failed or was answered 3xx or more."""
    try:
        call = _call_of(request)
        key = id(call)
        entry = PENDING.get(key)
        if entry is not None and entry[0]() is call:
            count = entry[1] + 1
            span.set_attribute("http.request.resend_count", count)
            PENDING[key] = (entry[0], count)
    except Exception:  # pragma: no cover - an odd request object: no resend count
        logger.debug("asynctrace: could not count the resend", exc_info=True)
