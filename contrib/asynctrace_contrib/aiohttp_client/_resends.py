"""Which of a task's requests is a resend of the one before: aiohttp's own retry of a
stale pooled connection, a redirect hop, a retry middleware's new attempt."""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import Any

from opentelemetry.trace import Span

__all__ = ["attempted", "count_resend", "last_attempt"]

logger = logging.getLogger("asynctrace")

# The session call of this task's last request that failed or was answered 3xx or
# more (a resend may follow), and that attempt's resend count (0 for the first).
_LAST: ContextVar[tuple[Any, int] | None] = ContextVar(
    "asynctrace_aiohttp_last_attempt", default=None
)
last_attempt = _LAST.get


def _call_of(request: Any) -> Any:
    """What every attempt of one session call shares: aiohttp builds a new
    ``ClientRequest`` for each retry and redirect hop, all with the call's timer;
    the request object itself on an aiohttp whose requests have none."""
    timer = getattr(request, "_timer", None)
    return request if timer is None else timer


def attempted(request: Any) -> None:
    """*request* failed or was answered 3xx or more: the task's next request of the same
    session call, if any, is a resend."""
    try:
        last = _LAST.get()
        call = _call_of(request)
        _LAST.set((call, last[1] if last is not None and last[0] is call else 0))
    except Exception:  # pragma: no cover - an odd request object: no resend count
        logger.debug("asynctrace: could not remember the attempt", exc_info=True)


def count_resend(span: Span, request: Any) -> None:
    """Set ``http.request.resend_count`` on *span* when *request* is a later attempt of
    the session call whose attempt failed or was redirected last in this task.

    Any other request means that call is over: it is forgotten.
    """
    try:
        last = _LAST.get()
        _LAST.set(None)
        if last is not None and last[0] is _call_of(request):
            count = last[1] + 1
            span.set_attribute("http.request.resend_count", count)
            _LAST.set((last[0], count))
    except Exception:  # pragma: no cover - an odd request object: no resend count
        logger.debug("asynctrace: could not count the resend", exc_info=True)
