"""When a held batch goes out again: exponential backoff with jitter, and giving up.

One attempt per backoff period goes out during an outage, never before the
backend's ``Retry-After``. A held batch that failed more than
:data:`PROBE_AFTER` times with nothing to say why is given up when the batch
after it goes through; one the backend asked to retry never is.
"""

from __future__ import annotations

import logging
import random
import time

from ._retry_buffer import Held, RetryBuffer
from ._sync import _Marker

__all__ = ["INITIAL_BACKOFF_S", "MAX_BACKOFF_S", "PROBE_AFTER", "RetrySchedule"]

logger = logging.getLogger("asynctrace")

INITIAL_BACKOFF_S = 0.5
MAX_BACKOFF_S = 5.0
PROBE_AFTER = 2  # a held batch that failed this often is tried against the next one


class RetrySchedule(RetryBuffer):
    """How a retrying queue retries the oldest held batch when it is due.

    A base of :class:`~._retry.RetryingSpanProcessor`, whose ``__init__``
    makes every attribute declared here (and says what each is).
    """

    _retried: int
    _failures: int
    _next_attempt: float
    _warned_outage: bool

    def _retry_one(self) -> bool:
        """Resolve the oldest held item if it is due; whether there may be more to do now."""
        pending = self._pending
        if not pending or self._abandoned:
            return False
        head = pending[0]
        if head.__class__ is _Marker:
            pending.popleft()
            self._honour(head)
            return True
        if time.monotonic() < self._next_attempt:
            return False
        assert isinstance(head, Held)
        if head.attempts:  # not one that waited behind a failure and goes out the first time
            self._retried += len(head.spans)
        ok = self._send(head.spans)
        if ok is False:
            head.attempts += 1
            # A batch that keeps failing while the next goes through is refused by a backend
            # that is up, but only a failure that says nothing can mean that: a 503 is the
            # backend asking for a retry, whatever the next batch meets.
            if head.attempts > PROBE_AFTER and not self._transient and self._probe_next():
                self._resolve(head, False)
                self._warn_refusal(
                    f"a held batch failed {head.attempts} times while the next went through"
                )
                self._failures = 0
                self._warned_outage = False
                return True
            self._schedule_retry()
            return False
        self._resolve(head, ok is True)
        if self._failures:  # the backend answers again, or the exporter raised
            logger.info(
                "asynctrace: exporter %r %s after %d failed attempts",
                self.name,
                "delivers again" if ok else "gave up a held batch (refused, or it raised)",
                self._failures,
            )
        self._failures = 0
        self._warned_outage = False
        return True

    def _probe_next(self) -> bool:
        """Send the held batch after the head; ``True`` if it was delivered.

        The batch after the head given up (refused too, or the exporter
        raised) says nothing about the head: ``False``.
        """
        second = next((item for item in list(self._pending)[1:] if isinstance(item, Held)), None)
        if second is None:
            return False
        if second.attempts:
            self._retried += len(second.spans)
        ok = self._send(second.spans)
        if ok is False:
            second.attempts += 1
            return False
        self._resolve(second, ok is True)
        return ok is True

    def _schedule_retry(self) -> None:
        self._failures += 1
        backoff = min(MAX_BACKOFF_S, INITIAL_BACKOFF_S * 2 ** min(self._failures - 1, 16))
        wait = backoff * random.uniform(0.5, 1.0)
        self._next_attempt = max(time.monotonic() + wait, self._not_before)
        # Once shutting down, what is held is retried until the deadline at most, and the
        # shutdown's own summary says what was left: no promise of retries after it.
        if not self._warned_outage and not (self._closing or self._abandoned):
            self._warned_outage = True
            logger.warning(
                "asynctrace: exporter %r could not deliver a batch; failed batches are held "
                "(up to %d spans) and retried with backoff, new ones wait behind them",
                self.name,
                self._buffer_spans,
            )
