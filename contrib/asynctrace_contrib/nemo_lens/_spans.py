"""lens's span helpers: gated ``managed_span`` and ``trace_fn``, ungated ``span_cm``."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from typing import Any, Final, TypeVar

from opentelemetry import trace

import asynctrace

from ._redaction import clean, safe_set_span_attributes

__all__ = ["managed_span", "redacting_span", "span_cm", "trace_fn"]

F = TypeVar("F", bound=Callable[..., Any])

_LOG = logging.getLogger("asynctrace_contrib.nemo_lens")  # one logger, the package's name


def managed_span(
    group: str, name: str, tracer: trace.Tracer | None = None, **attributes: Any
) -> contextlib.AbstractContextManager[trace.Span]:
    """A span of *group* around the block, with *attributes*; lens's signature.

    A leaf of a bucketed group gets its bucket, a span of an umbrella group
    (``job``, ``step``, ...) is an umbrella, exactly as
    :func:`asynctrace.managed_span`, which this returns. *tracer* is accepted
    and ignored: spans go through asynctrace's pipeline. Disabled, it yields
    asynctrace's shared non-recording span (lens yields ``None``).
    *attributes* are filtered and redacted as by :func:`safe_set_span_attributes`.

    An ``rl.bucket`` attribute (``**{"rl.bucket": "idle"}``, the only way a
    lens signature gives one) is the span's explicit bucket: it wins over the
    bucket scope and the group's bucket, as ``bucket=`` does for
    :func:`asynctrace.managed_span`. On an umbrella (or inside a per-prompt
    scope) it is dropped, as there. An ``rl.bucket`` that names no bucket
    (lens has none, so lens code may use the key for its own labels) is
    logged once and left out; the span is recorded with its group's bucket.

    Example:
        >>> with managed_span("forward_backward", "rl.policy.forward_backward", mb=4) as span:
        ...     span.set_attribute("rl.loss", 0.5)
    """
    bucket = None
    if _BUCKET_KEY in attributes:
        bucket = _bucket(attributes.pop(_BUCKET_KEY))
    return asynctrace.managed_span(
        group, name, attributes=clean(attributes) if attributes else None, bucket=bucket
    )


_BUCKET_KEY: Final = "rl.bucket"


def _bucket(value: object) -> asynctrace.Bucket | None:
    """The bucket an ``rl.bucket`` attribute names; ``None`` for none, and for a value
    that names no bucket (logged once: a span call never raises for it, as the span
    helpers do not)."""
    if value is None or isinstance(value, asynctrace.Bucket):
        return value
    if isinstance(value, str):
        try:
            return asynctrace.Bucket(value.strip().lower())
        except ValueError:
            pass
    if not _unknown_bucket_told:
        _unknown_bucket_told.append(True)
        _LOG.warning(
            "asynctrace: managed_span: rl.bucket=%s names no bucket (accepted: %s); it is "
            "left out and the span keeps its group's bucket (told once)",
            asynctrace.redact_text(repr(value))[:80],
            ", ".join(b.value for b in asynctrace.Bucket),
        )
    return None


_unknown_bucket_told: list[bool] = []


@contextlib.contextmanager
def span_cm(
    name: str,
    tracer: trace.Tracer | None = None,
    record_exception: bool = True,
    **attributes: Any,
) -> Iterator[trace.Span]:
    """An ungated span around the block (lens's ``span_cm``), current inside it.

    Recorded through asynctrace's tracer whenever telemetry is on, whatever
    groups are enabled; *tracer* overrides it, as in lens. *attributes* are
    filtered and redacted as by :func:`safe_set_span_attributes`.

    Example:
        >>> with span_cm("rl.setup.tokenizer", vocab=32000):
        ...     pass
    """
    chosen = tracer if tracer is not None else asynctrace.get_tracer()
    with redacting_span(chosen, name, record_exception) as span:
        if attributes:
            safe_set_span_attributes(span, attributes)
        yield span


@contextlib.contextmanager
def redacting_span(
    tracer: trace.Tracer, name: str, record_exception: bool = True
) -> Iterator[trace.Span]:
    """``tracer.start_as_current_span(name)``, an escaping exception recorded redacted.

    OpenTelemetry's ``use_span`` and the SDK's ``record_exception`` record an
    exception's message, stack trace and ``"<type>: <message>"`` status as
    they are: here they go through asynctrace's redaction (no URL userinfo,
    no secret-like values, none of the secrets remembered for the exception),
    on any provider (:func:`asynctrace.record_error`).
    """
    with tracer.start_as_current_span(
        name, record_exception=False, set_status_on_exception=False
    ) as span:
        try:
            yield span
        except Exception as exc:
            asynctrace.record_error(span, exc, event=record_exception)  # never raises
            raise


def trace_fn(group: str, name: str, tracer: trace.Tracer | None = None) -> Callable[[F], F]:
    """Each call of the decorated function is a span of *group* (checked per call).

    :func:`asynctrace.trace_fn`: on an ``async def`` the span covers the
    awaited body (lens's ends when the coroutine object is made). *tracer* is
    accepted and ignored.

    Example:
        >>> @trace_fn("optimizer", "rl.policy.optimizer_step")
        ... def step():
        ...     return 1
        >>> step()
        1
    """
    return asynctrace.trace_fn(group, name)
