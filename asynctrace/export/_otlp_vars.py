"""The OTLP exporter variables in force for a signal, and how a check reports on them.

Per signal: the trace exporter reads ``OTEL_EXPORTER_OTLP_TRACES_*``, the
goodput metric exporter ``OTEL_EXPORTER_OTLP_METRICS_*``, each before the
general ``OTEL_EXPORTER_OTLP_*``; one that is empty (or blank) counts as unset.
A refused value is a :class:`~asynctrace.ConfigurationError` naming the
variable, the value and what is accepted; a value taken with a message is
logged once per process.
"""

from __future__ import annotations

import logging
import os
import threading

from .._errors import ConfigurationError
from .._forksafe import reinit_at_fork

__all__ = ["PREFIX", "SIGNALS", "once", "per_signal", "refuse", "variable"]

logger = logging.getLogger("asynctrace")

PREFIX = "OTEL_EXPORTER_OTLP_"
"""The prefix of the general variables (``OTEL_EXPORTER_OTLP_*``)."""
SIGNALS = ("TRACES", "METRICS", "LOGS")
"""The signals of the per-signal variables (``OTEL_EXPORTER_OTLP_<SIGNAL>_*``)."""
_told: set[tuple[str, str]] = set()  # (variable, value) already logged about
_told_lock = threading.Lock()
reinit_at_fork(_told_lock)  # held at fork(): new in the child


def per_signal(signal: str) -> str:
    """``OTEL_EXPORTER_OTLP_TRACES_`` for ``TRACES``: the prefix of *signal*'s variables."""
    if signal not in SIGNALS:
        raise ValueError(f"signal: {signal!r}; accepted: {', '.join(SIGNALS)}")
    return f"{PREFIX}{signal}_"


def variable(name: str, signal: str) -> tuple[str, str] | None:
    """The variable in force for *name* (``TIMEOUT``, say) and its value, else None.

    *signal*'s own one first, then the general one, as OpenTelemetry reads
    them; one that is empty (or blank) counts as unset.
    """
    for key in (f"{per_signal(signal)}{name}", f"{PREFIX}{name}"):
        value = os.environ.get(key)
        if value is not None and value.strip():
            return key, value
    return None


def refuse(key: str, value: str, problem: str, accepted: str) -> ConfigurationError:
    """The error refusing *key*'s *value*: what is wrong with it and what is accepted."""
    return ConfigurationError(
        f"{key}: {value!r} {problem}; accepted: {accepted} (an empty value counts as unset)"
    )


def once(key: str, value: str, level: int, message: str, *args: object) -> None:
    """Log *message* the first time *key* is found set to *value* in this process."""
    with _told_lock:
        if (key, value) in _told:
            return
        _told.add((key, value))
    logger.log(level, message, *args)
