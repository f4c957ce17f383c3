"""Making a span current, and ending it with how its block ended.

:func:`attach` and :func:`detach` set OpenTelemetry's context variable
directly when the runtime context is the ContextVar one (any other runtime
context goes through the API); :func:`finish` and :func:`mark_exit` record an
escaping exception, redacted, as an error (cancellation is not one) and end
the span. None of them raises.
"""

from __future__ import annotations

import builtins
import sys
import traceback
from collections.abc import Collection
from contextvars import ContextVar
from typing import Final

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span
from opentelemetry.trace.status import Status, StatusCode

from ._errors import report_internal_error
from ._exception_text import redact_exception_text, remember, secrets_of
from ._fast._span import SPAN_TYPES
from ._semconv import CANCELLED
from ._span_rules import site

__all__ = [
    "attach",
    "attach_context",
    "current_context",
    "detach",
    "finish",
    "mark_exit",
    "record_exception",
]


def _span_key() -> str:
    """The context key OpenTelemetry keeps the current span under."""
    from opentelemetry.trace.propagation import _SPAN_KEY as key

    return key


def _context_var() -> ContextVar[otel_context.Context] | None:
    """OpenTelemetry's context variable, when the runtime context is the ContextVar one.

    Setting it is what ``otel_context.attach`` does then; doing it here saves
    that function's layers on every span. Any other runtime context goes
    through the API.
    """
    from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext

    runtime = getattr(otel_context, "_RUNTIME_CONTEXT", None)
    if type(runtime) is not ContextVarsRuntimeContext:
        return None
    var = getattr(runtime, "_current_context", None)
    return var if isinstance(var, ContextVar) else None


_CONTEXT_VAR: Final = _context_var()
_SPAN_KEY: Final = _span_key()
_Context: Final = otel_context.Context


def attach(span: Span) -> object | None:
    """Make *span* current; returns the token or ``None`` on failure."""
    try:
        var = _CONTEXT_VAR
        if var is None:
            return otel_context.attach(trace.set_span_in_context(span))
        values = var.get().copy()  # set_span_in_context, without its layers
        values[_SPAN_KEY] = span
        return var.set(_Context(values))
    except Exception as exc:
        report_internal_error(("attach", type(span).__name__), exc)
        return None


def current_context() -> otel_context.Context:
    """The current OpenTelemetry context (to :func:`attach_context` again later)."""
    var = _CONTEXT_VAR
    return var.get() if var is not None else otel_context.get_current()


def attach_context(context: otel_context.Context) -> object | None:
    """Make *context* current; returns the token (for :func:`detach`) or ``None`` on failure."""
    try:
        var = _CONTEXT_VAR
        return var.set(context) if var is not None else otel_context.attach(context)
    except Exception as exc:
        report_internal_error(("attach", "context"), exc)
        return None


def detach(token: object | None, group: object = None) -> None:
    """Undo :func:`attach`.

    A failure is logged once per span *group* (the groups are few), so that a
    leak in one group does not hide a later one in another.
    """
    if token is None:
        return
    try:
        var = _CONTEXT_VAR
        if var is None:
            otel_context.detach(token)  # type: ignore[arg-type]
        else:
            var.reset(token)  # type: ignore[arg-type]
    except ValueError as exc:  # a token of another context (a generator resumed elsewhere)
        from ._managed_span import exited_elsewhere  # (it imports this module)

        exited_elsewhere(group, exc)
    except Exception as exc:
        report_internal_error(("detach", site(group)), exc)


def finish(
    span: Span,
    exc_type: type[BaseException] | None,
    exc: BaseException | None,
    end_time: int | None = None,
    secrets: Collection[str] = (),
) -> None:
    """Record how the block ended and end *span*; never raises."""
    if exc_type is not None:
        try:
            mark_exit(span, exc_type, exc, secrets)
        except Exception as err:  # the span still ends
            report_internal_error(("exit", type(span).__name__), err)
    try:
        span.end(end_time)
    except Exception as err:
        report_internal_error(("end", type(span).__name__), err)


def mark_exit(
    span: Span,
    exc_type: type[BaseException],
    exc: BaseException | None,
    secrets: Collection[str] = (),
) -> None:
    """Exceptions are errors; cancellation and other BaseExceptions are not.

    A ``BaseExceptionGroup`` (a task group's, say) that holds an ``Exception``
    anywhere inside is an error too: only a group of nothing but
    BaseExceptions (cancellations, a ``KeyboardInterrupt``) is not.
    What is recorded of the exception (message, stack trace, status
    description) is redacted first (:func:`~asynctrace._redact.redact_text`),
    with *secrets* replaced too, and any secrets remembered for *exc*.
    """
    if issubclass(exc_type, Exception) or _holds_error(exc):
        if exc is not None:
            if secrets:
                remember(exc, secrets)  # the spans around this one record it too
            secrets = secrets_of(exc) or secrets
            try:
                record_exception(span, exc, secrets)
            except Exception as err:  # str(exc) may raise: the status is still set
                report_internal_error(("record_exception", exc_type.__name__), err)
        description = redact_exception_text(f"{exc_type.__name__}: {_text(exc)}", secrets)
        span.set_status(Status(StatusCode.ERROR, description))
    else:
        span.set_attribute(CANCELLED, True)


_GROUP: Final = getattr(builtins, "BaseExceptionGroup", None)  # 3.11+


def _is_group(exc: BaseException) -> bool:
    """Whether *exc* is a ``BaseExceptionGroup``: the built-in one (3.11+, which
    the ``exceptiongroup`` backport re-exports there), or the backport's when
    that is imported (3.10)."""
    if _GROUP is not None:
        return isinstance(exc, _GROUP)
    module = sys.modules.get("exceptiongroup")
    backport = getattr(module, "BaseExceptionGroup", None) if module is not None else None
    return isinstance(backport, type) and isinstance(exc, backport)


def _holds_error(exc: BaseException | None, depth: int = 0) -> bool:
    """Whether *exc* is an exception group holding an ``Exception`` at any depth.

    Reads the groups' ``exceptions`` only (no ``split``, which calls a
    subclass's ``derive``); nesting past 64 levels counts as no error.
    """
    if exc is None or depth > 64 or not _is_group(exc):
        return False
    for inner in getattr(exc, "exceptions", ()):
        if isinstance(inner, Exception) or _holds_error(inner, depth + 1):
            return True
    return False


def record_exception(span: Span, exc: BaseException, secrets: Collection[str] = ()) -> None:
    """Record *exc* as an escaped ``exception`` event, redacted, on any provider's span.

    A fast-provider span formats the stack trace on its export thread and
    redacts it there; any other span (the SDK's) gets the event the SDK's own
    ``record_exception`` would add, with message and stack trace redacted.
    """
    if span.__class__ in SPAN_TYPES:
        span._record_exception(exc, None, None, True, secrets)  # type: ignore[attr-defined]
        return
    if not span.is_recording():
        return
    cls = type(exc)
    module = cls.__module__
    try:
        stacktrace = "".join(traceback.format_exception(cls, exc, exc.__traceback__))
    except Exception as err:  # a broken __str__ in the chain, say
        stacktrace = f"<stack trace unavailable: {type(err).__name__}>"
    span.add_event(
        "exception",
        {
            "exception.type": f"{module}.{cls.__qualname__}"
            if module and module != "builtins"
            else cls.__qualname__,
            "exception.message": redact_exception_text(_text(exc), secrets),
            "exception.stacktrace": redact_exception_text(stacktrace, secrets, tail=True),
            "exception.escaped": "True",
        },
    )


def _text(exc: BaseException | None) -> str:
    """``str(exc)``, or a placeholder when its ``__str__`` raises."""
    try:
        return str(exc)
    except Exception:
        return f"<unprintable {type(exc).__name__}>"
