"""A fast span's events, and what an ``exception`` event records (redacted)."""

from __future__ import annotations

import sys
from collections.abc import Collection
from traceback import TracebackException
from typing import Any

from .._exception_text import redact_exception_text, secrets_of
from .._span_errors import STACKTRACE

__all__ = [
    "STACKTRACE",
    "SpanEvent",
    "capture_stack",
    "error_description",
    "exception_attributes",
    "exception_message",
]

_exc_info = sys.exc_info


class SpanEvent:
    """An event recorded on a :class:`FastSpan` (converted on the export thread).

    ``exception`` is set for ``record_exception`` events: the stack trace
    as it was when recorded (a ``traceback.TracebackException``), formatted
    and redacted (with ``secrets`` replaced too) by whichever export thread
    reads the event first.
    """

    __slots__ = ("attributes", "exception", "name", "secrets", "timestamp")

    def __init__(
        self,
        name: str,
        attributes: dict[str, Any],
        timestamp: int,
        exception: TracebackException | None = None,
        secrets: Collection[str] = (),
    ) -> None:
        self.name = name
        self.attributes = attributes
        self.timestamp = timestamp
        self.exception = exception
        self.secrets = secrets


def error_description(text: str) -> str:
    """An ``ERROR`` status description, redacted (and bounded) as exception text, with the
    secrets remembered for the exception being handled, if any: OpenTelemetry's
    ``use_span``, and code such as ``span.set_status(Status(ERROR, str(exc)))`` in an
    ``except`` block, quote that exception."""
    handled = _exc_info()[1]
    return redact_exception_text(text, secrets_of(handled) if handled is not None else ())


def capture_stack(exception: BaseException) -> TracebackException | None:
    """The exception's stack trace as it is now (notes, chain and frames), not yet text.

    What ``traceback.format_exception`` builds before it formats; the source
    lines are read, and the text made, on the export thread. It keeps no frame
    alive.
    """
    try:
        captured = TracebackException(
            type(exception), exception, exception.__traceback__, lookup_lines=False, compact=True
        )
        _freeze_notes(captured)
    except Exception:  # a broken __str__ or __notes__ in the chain, say
        return None
    return captured


def _freeze_notes(captured: TracebackException) -> None:
    """Copy the notes of *captured* and of each exception in its chain (its cause, its
    context, a group's members): ``TracebackException`` keeps the list itself, so a note
    added after recording would show in the stack trace."""
    pending: list[Any] = [captured]
    seen: set[int] = set()
    while pending:
        item = pending.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        notes = getattr(item, "__notes__", None)
        if isinstance(notes, list):  # (anything else is formatted as its repr: kept)
            item.__notes__ = tuple(notes)
        for linked in (item.__cause__, item.__context__):
            if linked is not None:
                pending.append(linked)
        pending.extend(getattr(item, "exceptions", None) or ())


def exception_attributes(
    exception: BaseException, stacktrace: str, escaped: bool, secrets: Collection[str]
) -> dict[str, Any]:
    """An ``exception`` event's attributes, as the SDK names them: the type's module-qualified
    name, the message redacted (with *secrets*), *stacktrace* as given, *escaped*."""
    cls = type(exception)
    module = cls.__module__
    qualname = cls.__qualname__
    return {
        "exception.type": f"{module}.{qualname}" if module and module != "builtins" else qualname,
        "exception.message": redact_exception_text(exception_message(exception), secrets),
        STACKTRACE: stacktrace,
        "exception.escaped": str(escaped),
    }


def exception_message(exception: BaseException) -> str:
    """``str(exception)``, or a placeholder naming its type when that raises."""
    try:
        return str(exception)
    except Exception:
        return f"<unprintable {type(exception).__name__}>"
