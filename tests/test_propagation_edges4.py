"""Carriers at their edges: a callable that returns a coroutine, a secret task id in
baggage, carriers of the wrong shape, baggage past its limits, process-pool baggage."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import gc
import logging
import multiprocessing
import warnings
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote

import pytest
from opentelemetry import baggage, trace
from opentelemetry import context as otel_context
from opentelemetry.baggage.propagation import W3CBaggagePropagator

import asynctrace as at
from asynctrace.testing import capture_spans

TRACE_ID = 0x1111111111111111111111111111111
SPAN_ID = 0x2222222222222222
CARRIER = {"traceparent": f"00-{TRACE_ID:032x}-{SPAN_ID:016x}-01"}


# --- accepts_trace_context on callables that return a coroutine ---------------------------


async def _body() -> int:
    await asyncio.sleep(0)
    with at.managed_span("reward", "remote.body"):
        await asyncio.sleep(0)
    return at.current_iteration() or 0


class _Handler:
    """An object whose ``__call__`` is an ``async def``: not a coroutine function itself."""

    async def __call__(self) -> int:
        return await _body()


def _not_async_aware(fn: Callable[..., Any]) -> Callable[..., Any]:
    """A decorator that is not async-aware (it hides the ``async def`` behind a ``def``)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    return wrapper


@_not_async_aware
async def _decorated() -> int:
    return await _body()


@pytest.mark.parametrize("target", [_Handler(), _decorated], ids=["async_call", "decorated"])
def test_a_coroutine_returned_by_a_sync_callable_runs_under_the_carrier(target: Any) -> None:
    """The body, which runs only when awaited, runs under the carrier's span and scopes, not
    under the awaiting task's span; named as the body."""
    wrapped: Any = at.accepts_trace_context(target)
    sent_with_scope: dict[str, str] = {}

    async def main() -> int:
        with at.umbrella_span("step", "ambient"):
            coro = wrapped(trace_carrier=sent_with_scope)
            assert coro.__name__ == ("__call__" if isinstance(target, _Handler) else "_decorated")
            return int(await coro)

    with capture_spans("all", propagate_scopes=True) as captured:
        with at.iteration_scope(7), at.remote_trace_context(CARRIER):
            sent_with_scope.update(at.current_trace_carrier())
        assert asyncio.run(main()) == 7
    (body,) = captured.by_name("remote.body")
    assert body.parent is not None
    assert (body.context.trace_id, body.parent.span_id) == (TRACE_ID, SPAN_ID)
    assert body.attributes is not None
    assert body.attributes["rl.iteration"] == 7


def test_a_returned_coroutine_cancelled_before_it_starts_does_not_warn() -> None:
    """A task cancelled before its first step closes the body too: no "never awaited"."""
    wrapped: Any = at.accepts_trace_context(_Handler())

    async def main() -> None:
        task = asyncio.ensure_future(wrapped(trace_carrier=CARRIER))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with capture_spans("all"):
            asyncio.run(main())
        gc.collect()
    assert [w for w in caught if "never awaited" in str(w.message)] == []


def test_a_sync_result_is_returned_as_it_is() -> None:
    """A plain sync function's result, an awaitable one included, is not wrapped."""
    future: concurrent.futures.Future[int] = concurrent.futures.Future()
    wrapped: Any = at.accepts_trace_context(lambda: future)
    with capture_spans("all"):
        assert wrapped(trace_carrier=CARRIER) is future


# --- a text task id in baggage ------------------------------------------------------------

SECRET_TASK = "https://alice:s3cretpw@data.example/item-7?token=abc123"


def test_a_text_task_id_is_redacted_in_baggage_as_on_spans() -> None:
    """The ``baggage`` carrier entry and ``BAGGAGE`` hold the task id as the span's
    ``rl.task_id`` holds it, and the far side's task scope is that text."""
    with capture_spans("all", propagate_scopes=True) as captured:
        with at.task_scope(SECRET_TASK), at.umbrella_span("step", "rl.step"):
            carrier = at.current_trace_carrier()
            env = at.inject_env({})
        with at.remote_trace_context(carrier):
            received = at.current_task_id()
    stamped = str(captured.by_name("rl.step")[0].attributes["rl.task_id"])  # type: ignore[index]
    for text in (stamped, unquote(carrier["baggage"]), unquote(env["BAGGAGE"])):
        assert "s3cretpw" not in text
        assert "abc123" not in text
    assert received == stamped


@pytest.mark.parametrize("task_id", ["item-7", "23", 23, "é/ü x", "a=b;c"])
def test_a_task_id_with_nothing_secret_arrives_as_sent(task_id: int | str) -> None:
    """Redaction leaves a plain id as it is: it arrives with its type and text."""
    with capture_spans("all", propagate_scopes=True), at.task_scope(task_id):
        carrier = at.current_trace_carrier()
    with capture_spans("all", propagate_scopes=True), at.remote_trace_context(carrier):
        assert at.current_task_id() == task_id


# --- carriers of the wrong shape ----------------------------------------------------------

_TP = CARRIER["traceparent"]


@pytest.mark.parametrize(
    ("carrier", "counted"),
    [
        (_TP, 1),  # a bare traceparent string
        (_TP.encode(), 1),
        ([(b"traceparent", _TP.encode())], 1),  # ASGI scope["headers"]
        ((("traceparent", _TP),), 1),  # gRPC metadata
        ({b"traceparent": _TP.encode()}, 1),  # a dict of raw header names
        ({b"Baggage": b"k=v", b"traceparent": _TP.encode(), b"host": b"x"}, 2),
        ({b"host": b"x"}, 0),  # no header of ours: nothing lost
        (None, 0),
        ({}, 0),
        ([], 0),
    ],
)  # fmt: skip
def test_a_carrier_that_is_not_read_is_counted(
    carrier: Any, counted: int, caplog: pytest.LogCaptureFixture
) -> None:
    """What is not read for its shape is counted in ``carrier_not_read``, never logged;
    ``None`` and an empty carrier are no carrier at all."""
    before = at.carrier_stats()
    with caplog.at_level(logging.DEBUG, logger="asynctrace"):
        with capture_spans("all"), at.remote_trace_context(carrier) as remote:
            assert not remote.valid
            assert at.current_trace_carrier() == {}
    after = at.carrier_stats()
    assert {k: after[k] - before[k] for k in after if after[k] != before[k]} == (
        {"carrier_not_read": counted} if counted else {}
    )
    assert caplog.records == []


def test_a_carrier_whose_truth_value_raises_is_counted() -> None:
    """An object that cannot say whether it is empty (an array, say) is not read, counted."""

    class Ambiguous:
        def __bool__(self) -> bool:
            raise ValueError("ambiguous")

    before = at.carrier_stats()["carrier_not_read"]
    with at.remote_trace_context(Ambiguous()) as remote:  # type: ignore[arg-type]
        assert not remote.valid
    assert at.carrier_stats()["carrier_not_read"] == before + 1


# --- received baggage: what counts toward 180 ---------------------------------------------

_VALID_180 = [f"k{i}=v{i}" for i in range(180)]


@pytest.mark.parametrize(
    "first",
    ["é=1", "x=" + "a" * 4100, "bad key=1", "k=v;", "=v"],
    ids=["non_ascii", "over_4096", "bad_key", "empty_property", "no_key"],
)
def test_received_baggage_keeps_what_opentelemetry_keeps(first: str) -> None:
    """Ahead of 180 valid entries: a non-ASCII or over-long entry is dropped before the 180
    are counted (the 180th valid one kept), an invalid one after; as OpenTelemetry's
    ``W3CBaggagePropagator`` does."""
    header = ",".join([first, *_VALID_180])
    extracted = W3CBaggagePropagator().extract({"baggage": header}, otel_context.Context())
    expected = dict(baggage.get_all(extracted))
    before = at.carrier_stats()["baggage_entries_skipped"]
    with capture_spans("all", propagate_scopes=True):
        with at.remote_trace_context({**CARRIER, "baggage": header}):
            received = dict(baggage.get_all())
    assert received == expected
    skipped = at.carrier_stats()["baggage_entries_skipped"] - before
    assert skipped == 1 + 180 - len(received)  # the first, and any valid one pushed out


# --- process pools: the caller's baggage --------------------------------------------------


def _seen_in_worker(_: object = None) -> tuple[int, dict[str, object], int | None]:
    span_id = trace.get_current_span().get_span_context().span_id
    return span_id, dict(baggage.get_all()), at.current_iteration()


@pytest.mark.parametrize("propagate", [True, False], ids=["scopes_on", "scopes_off"])
@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_a_process_pool_carries_the_callers_baggage(start: str, propagate: bool) -> None:
    """A forked and a spawned worker (which has no telemetry configured) both see the
    caller's baggage, span and scopes, whatever either side's ``propagate_scopes`` says."""
    if start not in multiprocessing.get_all_start_methods():
        pytest.skip(f"no {start} start method here")
    mp_context = multiprocessing.get_context(start)
    pool = at.context_executor(concurrent.futures.ProcessPoolExecutor(1, mp_context=mp_context))
    try:
        with capture_spans("all", propagate_scopes=propagate):
            token = otel_context.attach(baggage.set_baggage("user", "u1"))
            try:
                with at.iteration_scope(3), at.umbrella_span("step", "rl.step"):
                    span_id = trace.get_current_span().get_span_context().span_id
                    seen = [pool.submit(_seen_in_worker).result(), *pool.map(_seen_in_worker, [1])]
            finally:
                otel_context.detach(token)
            after = pool.submit(_seen_in_worker).result()
    finally:
        pool.shutdown()
    assert seen == [(span_id, {"user": "u1"}, 3)] * 2
    assert after == (0, {}, None)
