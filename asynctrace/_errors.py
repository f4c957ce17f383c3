"""Error types and the log-once policy of the hot path."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Collection, Hashable

from ._forksafe import reinit_at_fork

__all__ = [
    "ConfigurationError",
    "MissingExtraError",
    "RedactingFilter",
    "first_report",
    "report_internal_error",
]

logger = logging.getLogger("asynctrace")


class RedactingFilter(logging.Filter):
    """What asynctrace logs is redacted as recorded spans are: a user's exception in a
    traceback (one a hook raised, or the one a failing ``__exit__`` was handling) may
    name a URL with its token. The message is formatted and redacted, and so is a
    traceback; a record that cannot be redacted is replaced by :attr:`left_out`."""

    left_out = "asynctrace: a log record could not be redacted; left out"

    def secrets(self, record: logging.LogRecord) -> Collection[str]:
        """Texts to replace in *record* besides what looks secret: those remembered
        for its exception."""
        from ._exception_text import secrets_of

        error = record.exc_info[1] if record.exc_info else None
        return secrets_of(error) if error is not None else frozenset()

    def filter(self, record: logging.LogRecord) -> bool:
        """Redact *record*'s message and traceback in place; always keep the record."""
        try:
            from ._redact import redact_text

            secrets = self.secrets(record)
            record.msg = redact_text(record.getMessage(), secrets)
            record.args = None
            if record.exc_info:  # formatters print exc_text once set, not the traceback
                text = record.exc_text or logging.Formatter().formatException(record.exc_info)
                record.exc_text = redact_text(text, secrets)
        except Exception:  # a record that cannot be examined is kept out whole
            record.msg, record.args = self.left_out, None
            record.exc_info = record.exc_text = None
        return True


logger.addFilter(RedactingFilter())


class ConfigurationError(ValueError):
    """A configuration value was rejected.

    Raised before any global state changes. The message names the key (or
    argument), the value that was given and what would have been accepted.

    Example:
        >>> from asynctrace import resolve_span_groups
        >>> resolve_span_groups("nope")  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        ConfigurationError: span_groups: unknown name 'nope' ...
    """


class MissingExtraError(ImportError):
    """An optional dependency is not installed.

    The message gives the exact ``pip install 'asynctrace[extra]'`` line.

    Example:
        >>> raise MissingExtraError("sdk", "opentelemetry.sdk")  # doctest: +SKIP
    """

    def __init__(self, extra: str, module: str) -> None:
        super().__init__(
            f"{module} is not installed; install it with: pip install 'asynctrace[{extra}]'",
            name=module,
        )
        self.extra = extra


# ---------------------------------------------------------------------------
# Hot-path failures: logged once per call site, swallowed, unless strict.

_reported: set[Hashable] = set()
_reported_lock = threading.Lock()
reinit_at_fork(_reported_lock)  # a lock held at fork() is made new in the child
_STRICT_ON = ("1", "true", "yes", "on")
_STRICT_OFF = ("", "0", "false", "no", "off")


def _strict_from_env() -> bool:
    """``ASYNCTRACE_STRICT``: on, off, or (anything else) off with a warning naming it."""
    raw = os.environ.get("ASYNCTRACE_STRICT", "")
    value = raw.strip().lower()
    if value in _STRICT_ON:
        return True
    if value not in _STRICT_OFF:
        logger.warning(
            "asynctrace: ASYNCTRACE_STRICT=%r is not understood; strict mode stays off "
            "(accepted: %s to turn it on, %s or empty to leave it off)",
            raw,
            ", ".join(_STRICT_ON),
            ", ".join(_STRICT_OFF[1:]),
        )
    return False


_strict = _strict_from_env()


def set_strict(value: bool) -> bool:
    """Make hot-path failures re-raise (used by asynctrace's own tests).

    Returns the previous setting.
    """
    global _strict
    previous = _strict
    _strict = value
    return previous


def is_strict() -> bool:
    """Whether hot-path failures re-raise."""
    return _strict


def report_internal_error(site: Hashable, exc: BaseException, detail: str = "") -> None:
    """Log *exc* once for *site* on the ``asynctrace`` logger.

    *detail* (a span's name, say: what differs from call to call) is told in
    the one message, and is not part of the site. In strict mode the
    exception is re-raised instead, so that test suites see failures that
    production code would swallow.
    """
    if _strict:
        raise exc
    if not first_report(site):
        return
    try:
        logger.warning(
            "asynctrace: instrumentation failed at %s%s; continuing untraced "
            "(further failures here are not logged)",
            site,
            f" ({detail})" if detail else "",
            exc_info=exc,
        )
    except Exception:  # pragma: no cover - logging itself broken
        pass


def first_report(site: Hashable) -> bool:
    """Whether *site* is reported for the first time (it is noted as reported then)."""
    with _reported_lock:
        if site in _reported:
            return False
        _reported.add(site)
        return True


def reset_reported() -> None:
    """Forget which call sites were already logged (for tests)."""
    with _reported_lock:
        _reported.clear()
