"""One export attempt of a retrying queue, and what the exporter says about it after.

An exporter that can tell (:class:`~._otlp_http.HttpSpanExporter` does)
says after its ``export`` whether a failed batch was refused for good or is
worth a retry, when the backend asked to be tried again, and how many spans
of a delivered batch were left out. A backend's ``Retry-After`` is honoured
up to :data:`MAX_RETRY_AFTER_S`.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from .._redact import redact_text
from ._otlp import configured_header_secrets
from ._queue import QueuedSpanProcessor

__all__ = ["MAX_RETRY_AFTER_S", "ExportAttempts"]

logger = logging.getLogger("asynctrace")

MAX_RETRY_AFTER_S = 60.0
"""The longest wait a backend's ``Retry-After`` (or gRPC ``RetryInfo``) is honoured for."""
_MESSAGE_CHARS = 200  # of a backend's partial-success message, in the log


class ExportAttempts(QueuedSpanProcessor):
    """How a retrying queue sends a batch once and reads the exporter's answer.

    A base of :class:`~._retry.RetryingSpanProcessor`, whose ``__init__``
    makes every attribute declared here (and says what each is).
    """

    _exporter: Any
    _not_before: float
    _warned_refusal: bool
    _warned_rejection: bool
    _transient: bool
    _left_out: int

    def _send(self, spans: list[Any]) -> bool | None:
        """One attempt: ``True`` delivered, ``False`` to retry, ``None`` given up.

        An exporter that can tell says more after its ``export``
        (:class:`~._otlp_http.HttpSpanExporter` does): ``refused``, why the
        batch failed for good (an HTTP status other than 429, 502, 503 and
        504, a redirect, a batch too large to send, a gRPC status OTLP says
        not to retry): given up, not retried; ``transient``, that the backend
        asked for a retry (429, 502, 503, 504, gRPC ``RetryInfo``);
        ``retry_after``, the seconds it asked to wait first; ``left_out``,
        how many spans of a delivered batch it could not encode, and
        ``rejected``, how many the backend rejected (OTLP partial success,
        with ``rejection``, its message): set aside in ``_left_out``,
        counted as failed. The caller counts the outcome, in one move with
        where the spans were.
        """
        self._transient = False
        self._left_out = 0
        count = len(spans)
        try:
            result = self._exporter.export(spans)
        except BaseException as exc:  # SystemExit from an exporter must not end the worker
            self._report(exc, "export")
            return None
        exporter = self._exporter
        if getattr(result, "name", "SUCCESS") != "FAILURE":
            left_out = getattr(exporter, "left_out", 0)
            if isinstance(left_out, int) and 0 < left_out <= count:
                self._left_out = left_out
                self._warn_refusal(f"{left_out} of its spans could not be encoded")
            rejected = getattr(exporter, "rejected", 0)
            if isinstance(rejected, int) and rejected > 0:
                rejected = min(rejected, count - self._left_out)
                self._left_out += rejected
                self._warn_rejection(rejected, count, getattr(exporter, "rejection", None))
            return True
        refused = getattr(exporter, "refused", None)
        if refused:
            self._warn_refusal(str(refused))
            return None
        self._transient = bool(getattr(exporter, "transient", None))
        retry_after = getattr(exporter, "retry_after", None)
        if isinstance(retry_after, (int, float)) and retry_after > 0:
            wait = min(float(retry_after), MAX_RETRY_AFTER_S)  # NaN compares False: not here
            self._not_before = max(self._not_before, time.monotonic() + wait)
        return False

    def _warn_rejection(self, rejected: int, count: int, message: Any) -> None:
        if not self._warned_rejection:
            self._warned_rejection = True
            reason = ""
            if isinstance(message, str):  # the configured header values may be quoted in it
                reason = redact_text(message, configured_header_secrets())[:_MESSAGE_CHARS]
            logger.warning(
                "asynctrace: the backend of exporter %r rejected %d of the %d spans of a batch "
                "(%s); rejected spans are counted as failed, not retried (further rejections "
                "are not logged)",
                self.name,
                rejected,
                count,
                reason or "no message",
            )

    def _warn_refusal(self, reason: str) -> None:
        if not self._warned_refusal:
            self._warned_refusal = True
            logger.warning(
                "asynctrace: the backend of exporter %r refused a batch (%s); refused "
                "batches and spans are counted as failed, not retried (further refusals are "
                "not logged)",
                self.name,
                reason,
            )
