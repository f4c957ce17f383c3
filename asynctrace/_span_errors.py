"""Current-span blocks that record an escaping exception redacted, on any provider.

OpenTelemetry's ``use_span`` (behind every ``start_as_current_span``) records
an exception that escapes its block as the span's ``record_exception`` does
and sets a ``"<type>: <message>"`` status description: on an SDK span, raw,
a URL's token and all. :func:`redacted_block` is that block with the same
event and status, redacted as asynctrace's own spans record them; the fast
provider's tracer and :class:`~._redacting_tracer.RedactingTracer` (the SDK
tracer :func:`asynctrace.get_tracer` hands out) open their blocks with it,
and :func:`record_error` is the recording alone, for a block of one's own.

The fast provider's spans redact whatever they record themselves; an SDK
span asynctrace hands out is made to do the same by
:func:`~._span_redacting.redacting`.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterator

from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

from ._errors import report_internal_error
from ._exception_text import exception_reason, redact_exception_text, secrets_of

__all__ = ["STACKTRACE", "record_error", "redacted_block", "stack_text"]

STACKTRACE = "exception.stacktrace"
"""The ``exception`` event's stack trace attribute."""


def redacted_block(
    span: trace.Span, end_on_exit: bool, record_exception: bool, set_status_on_exception: bool
) -> Iterator[trace.Span]:
    """``use_span(span, ...)`` as a generator, an escaping exception recorded redacted."""
    with trace.use_span(
        span, end_on_exit=end_on_exit, record_exception=False, set_status_on_exception=False
    ) as current:
        try:
            yield current
        except Exception as exc:
            if record_exception or set_status_on_exception:
                record_error(current, exc, event=record_exception, status=set_status_on_exception)
            raise


def record_error(
    span: trace.Span, exc: BaseException, *, event: bool = True, status: bool = True
) -> None:
    """Record *exc* on *span* as ``use_span`` does, redacted: the ``exception`` event
    (with *event*) and the ``"<type>: <message>"`` ERROR status (with *status*).

    The message and the stack trace lose URL credentials, secret-like values
    and the secrets remembered for *exc*. Never raises.

    Example:
        >>> from opentelemetry import trace
        >>> record_error(trace.INVALID_SPAN, ValueError("GET http://u:pw@h/?token=t"))
    """
    try:
        if not span.is_recording():
            return
        if event:
            if type(span).__module__.startswith("opentelemetry.sdk"):
                _record_sdk(span, exc)
            else:  # asynctrace's spans redact what they record themselves
                span.record_exception(exc)
        if status:
            span.set_status(Status(StatusCode.ERROR, exception_reason(type(exc), exc)))
    except Exception as err:
        report_internal_error(("exit", type(span).__name__), err)


def _record_sdk(span: trace.Span, exc: BaseException) -> None:
    """The SDK's own ``exception`` event, its message and stack trace redacted."""
    secrets = secrets_of(exc)
    try:
        message = str(exc)
    except Exception:
        message = f"<unprintable {type(exc).__name__}>"
    span.record_exception(
        exc,
        {
            "exception.message": redact_exception_text(message, secrets),
            STACKTRACE: stack_text(exc, secrets),
        },
    )


def stack_text(exc: BaseException, secrets: frozenset[str]) -> str:
    """*exc*'s stack trace as ``traceback.format_exception`` writes it, redacted."""
    try:
        stack = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    except Exception as err:  # a broken __str__ in the chain, say
        return f"<stack trace unavailable: {type(err).__name__}>"
    return redact_exception_text(stack, secrets, tail=True)
