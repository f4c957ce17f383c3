"""The SDK provider's spans record exceptions redacted, as the fast provider's do.

The spans asynctrace hands out on the SDK provider (``get_tracer()``,
``start_span``, ``managed_span``) are the SDK's own objects, given a class
whose ``record_exception``, ``set_status`` and ``__exit__`` redact. These
tests run the real SDK pipeline (its processors, the in-memory exporter).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, StatusCode

import asynctrace
from asynctrace._span_redacting import redacting
from asynctrace.testing import capture_spans

LEAKY = "POST http://bob:pw-hunter2@h/x?api_key=key-0123456789"
REDACTED = "POST http://h/x?api_key=REDACTED"


class Unprintable(Exception):
    """An exception whose message cannot be read."""

    def __str__(self) -> str:
        raise RuntimeError("no message")


class Kept(SpanProcessor):
    """Keeps the spans it is given at start and at end."""

    def __init__(self) -> None:
        self.started: list[Span] = []
        self.ended: list[ReadableSpan] = []

    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        self.started.append(span)

    def on_end(self, span: ReadableSpan) -> None:
        self.ended.append(span)


@pytest.fixture
def sdk() -> Iterator[tuple[Kept, InMemorySpanExporter]]:
    """asynctrace configured with a program's own SDK provider: a processor and an exporter."""
    kept, exporter = Kept(), InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(kept)
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    asynctrace.configure(
        {"enabled": True, "span_groups": "all", "exporters": [], "provider": provider}
    )
    yield kept, exporter
    asynctrace.shutdown(timeout_s=5.0)


def _texts(span: ReadableSpan) -> list[str]:
    return [span.status.description or ""] + [
        str(value) for event in span.events for value in (event.attributes or {}).values()
    ]


def test_the_span_processors_hold_is_the_one_that_redacts(
    sdk: tuple[Kept, InMemorySpanExporter],
) -> None:
    """The span is changed in place: processors, the current context and the caller share it."""
    kept, exporter = sdk
    with asynctrace.managed_span("reward", "shared") as span:
        assert kept.started[-1] is span
        current = trace.get_current_span()
        assert current is span
        try:
            raise ValueError(LEAKY)
        except ValueError as exc:
            current.record_exception(exc)  # as a library would, on whatever span is current
            current.set_status(StatusCode.ERROR, f"failed: {LEAKY}")
    (ended,) = exporter.get_finished_spans()
    assert kept.ended == [ended]
    (event,) = ended.events
    assert event.attributes is not None
    assert event.attributes["exception.message"] == REDACTED
    assert ended.status.description == f"failed: {REDACTED}"
    assert not [text for text in _texts(ended) if "hunter2" in text or "0123456789" in text]


@pytest.mark.parametrize("provider", ["fast", "sdk"])
def test_an_unprintable_exception_escaping_a_span_is_recorded_and_reraised(
    provider: str,
) -> None:
    """A ``__str__`` that raises: the program sees its own exception, the span a placeholder.

    The SDK's own ``__exit__`` formats the status with ``str(exc)``, which
    would replace the program's exception with the ``RuntimeError``.
    """
    with capture_spans("all", provider=provider) as captured:
        with pytest.raises(Unprintable):
            with asynctrace.get_tracer().start_span("unprintable"):
                raise Unprintable
        (span,) = captured.spans
    (event,) = span.events
    assert event.attributes is not None
    assert event.attributes["exception.message"] == "<unprintable Unprintable>"
    assert event.attributes["exception.escaped"] == "True"
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "Unprintable: <unprintable Unprintable>"


def test_a_span_class_with_its_own_recording_is_left_to_it() -> None:
    """An SDK span subclass that records exceptions its own way keeps its class and its way."""

    class Audited(Span):
        recorded: list[BaseException]

        def record_exception(self, exception: BaseException, *args: object, **kw: object) -> None:
            self.recorded.append(exception)

    audited = Audited("audited", SpanContext(1, 2, is_remote=False))
    audited.recorded = []
    audited.start()
    assert redacting(audited) is audited
    assert type(audited) is Audited
    plain = TracerProvider().get_tracer("plain").start_span("plain")
    sdk_class = type(plain)
    assert redacting(plain) is plain
    assert type(plain) is not sdk_class  # the redacting subclass
    assert isinstance(plain, sdk_class)
    assert isinstance(plain, ReadableSpan)
    assert type(redacting(plain)) is type(plain)  # once
    with contextlib.suppress(ValueError), plain:
        raise ValueError(LEAKY)
    assert plain.status.description == f"ValueError: {REDACTED}"
    with contextlib.suppress(ValueError), audited:
        raise ValueError(LEAKY)
    assert [str(exc) for exc in audited.recorded] == [LEAKY]


def test_a_span_not_recorded_is_handed_as_it_is(
    sdk: tuple[Kept, InMemorySpanExporter],
) -> None:
    """A span the sampler dropped (the SDK's non-recording span) is not changed."""
    asynctrace.configure(
        {"enabled": True, "span_groups": "all", "exporters": [], "provider": "sdk",
         "sampling_ratio": 0.0}
    )  # fmt: skip
    span = asynctrace.get_tracer().start_span("dropped")
    assert type(span) is trace.NonRecordingSpan
    with contextlib.suppress(ValueError), span:
        raise ValueError(LEAKY)
