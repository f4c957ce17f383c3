"""trace_fn / umbrella_trace_fn on every kind of function."""

from __future__ import annotations

import contextlib
import inspect
import logging
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest
from opentelemetry import trace
from opentelemetry.trace import StatusCode

from asynctrace import (
    ConfigurationError,
    enable_telemetry,
    set_span_groups,
    trace_fn,
    umbrella_span,
    umbrella_trace_fn,
)
from asynctrace.testing import CapturedSpans, capture_spans


def attrs(span: object) -> dict[str, object]:
    """A span's attributes as a dict."""
    return dict(span.attributes or {})  # type: ignore[attr-defined]


@trace_fn("reward")
def add(a: int, b: int = 2, *, scale: int = 1) -> int:
    """Add and scale."""
    return (a + b) * scale


@trace_fn("generation", "gen.sleep")
async def sleepy(seconds: float) -> trace.Span:
    """Sleep and report the current span."""
    await anyio.sleep(seconds)
    return trace.get_current_span()


def test_plain_function_span_and_default_name(spans: CapturedSpans) -> None:
    """A sync function gets a leaf span named after its qualified name."""
    assert add(1, scale=3) == 9
    (span,) = spans.spans
    assert span.name == "add"
    assert attrs(span)["rl.bucket"] == "productive"


def test_signature_and_metadata_preserved() -> None:
    """functools.wraps + inspect.signature are truthful (Ray/FastAPI introspection)."""
    assert add.__name__ == "add"
    assert add.__doc__ == "Add and scale."
    assert str(inspect.signature(add)) == "(a: 'int', b: 'int' = 2, *, scale: 'int' = 1) -> 'int'"
    assert inspect.iscoroutinefunction(sleepy)
    assert inspect.isgeneratorfunction(trace_fn("job")(numbers))
    assert inspect.isasyncgenfunction(trace_fn("job")(anumbers))


def test_decorated_before_configuration_then_enabled_at_runtime() -> None:
    """The gate is read per call: enabling a group affects already-decorated functions."""
    assert add(1) == 3  # telemetry off
    with capture_spans("default") as captured:
        add(1)
        set_span_groups("default,reward")
        add(1)
        set_span_groups("default")
        add(1)
    assert captured.names() == ["add"]


@pytest.mark.anyio
async def test_coroutine_span_covers_awaited_body(spans: CapturedSpans) -> None:
    """The span covers the awaited 50 ms body, not coroutine creation, and is current."""
    coro = sleepy(0.05)
    await anyio.sleep(0.05)  # creation time must not count
    began = time.perf_counter()
    current = await coro
    awaited = time.perf_counter() - began
    (span,) = spans.spans
    assert current.get_span_context().span_id == span.context.span_id
    assert span.end_time is not None
    assert span.start_time is not None
    duration = (span.end_time - span.start_time) / 1e9
    # ~0.05 s: the body only, as long as the await (creation would add the
    # 0.05 s slept before it, however late a loaded machine ran the loop).
    # uvloop's millisecond timers may wake up to 1 ms early against the SDK's
    # wall clock.
    assert 0.045 <= duration <= awaited + 0.001


@pytest.mark.anyio
async def test_coroutine_exception_and_cancel(spans: CapturedSpans) -> None:
    """Errors are recorded and re-raised; cancellation is not an error."""

    @trace_fn("reward", "fails")
    async def fails() -> None:
        await anyio.sleep(0)
        raise ValueError("bad")

    with pytest.raises(ValueError, match="bad"):
        await fails()
    with anyio.move_on_after(0.01):
        await sleepy(5)
    failed, cancelled = spans.spans
    assert failed.status.status_code is StatusCode.ERROR
    assert attrs(cancelled)["asynctrace.cancelled"] is True
    assert cancelled.status.status_code is not StatusCode.ERROR


def numbers(n: int) -> Iterator[int]:
    """Yield 0..n-1, reporting nothing."""
    yield from range(n)


@trace_fn("data_processing", "gen")
def traced_numbers(n: int) -> Iterator[int]:
    """Yield the current span id n times."""
    for _ in range(n):
        yield trace.get_current_span().get_span_context().span_id
    return


@trace_fn("data_processing", "agen")
async def traced_anumbers(n: int) -> AsyncIterator[int]:
    """Async-yield the current span id n times."""
    for _ in range(n):
        await anyio.sleep(0)
        yield trace.get_current_span().get_span_context().span_id


async def anumbers(n: int) -> AsyncIterator[int]:
    """Async-yield 0..n-1."""
    for i in range(n):
        yield i


def _no_detach_failures(caplog: pytest.LogCaptureFixture) -> None:
    assert not [r for r in caplog.records if "Failed to detach" in r.getMessage()]


def test_generator_span_covers_iteration(
    spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    """The span is current inside the body only, covers the iteration, ends once."""
    with umbrella_span("step", "caller") as caller:
        seen = []
        for span_id in traced_numbers(3):
            seen.append(span_id)
            assert trace.get_current_span() is caller
        assert trace.get_current_span() is caller
    gen_span = spans.by_name("gen")[0]
    assert seen == [gen_span.context.span_id] * 3
    assert len(spans.by_name("gen")) == 1
    assert gen_span.parent is not None
    assert gen_span.parent.span_id == caller.get_span_context().span_id
    _no_detach_failures(caplog)


def test_generator_break_ends_span_once(
    spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    """`break` closes the generator: one span, marked cancelled, caller span unchanged."""
    with umbrella_span("step", "caller") as caller:
        for _ in traced_numbers(10):
            break
        assert trace.get_current_span() is caller
    (gen_span,) = spans.by_name("gen")
    assert attrs(gen_span)["asynctrace.cancelled"] is True
    _no_detach_failures(caplog)


def test_generator_send_throw_and_return_value(spans: CapturedSpans) -> None:
    """send(), throw() and the return value pass through the wrapper."""

    @trace_fn("reward", "echo")
    def echo() -> Iterator[object]:
        received = yield "ready"
        try:
            yield received
        except KeyError:
            yield "caught"
        return "done"

    gen = echo()
    assert next(gen) == "ready"
    assert gen.send("hello") == "hello"
    assert gen.throw(KeyError("k")) == "caught"
    with pytest.raises(StopIteration) as stop:
        next(gen)
    assert stop.value.value == "done"
    assert spans.names() == ["echo"]


def test_generator_arguments_are_checked_at_the_call(spans: CapturedSpans) -> None:
    """Like an undecorated generator function: a bad call raises at once, not at next()."""

    @trace_fn("reward")
    def count(start: int, *, step: int = 1) -> Iterator[int]:
        yield start
        yield start + step

    assert inspect.isgeneratorfunction(count)
    assert str(inspect.signature(count, follow_wrapped=False)) == str(inspect.signature(count))
    with pytest.raises(TypeError):
        count(1, 2)  # type: ignore[misc]
    with pytest.raises(TypeError):
        count(step=2)  # type: ignore[call-arg]
    assert list(count(1, step=5)) == [1, 6]
    assert [name.rsplit(".", 1)[-1] for name in spans.names()] == ["count"]


def test_an_advertised_signature_is_not_trusted(spans: CapturedSpans) -> None:
    """A function whose __signature__ differs from its code is forwarded as called."""

    def gen(*args: Any, **kwargs: Any) -> Iterator[Any]:
        yield args, kwargs

    gen.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("x", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    )
    traced = trace_fn("reward")(gen)
    assert list(traced(x=1)) == [((), {"x": 1})]


@pytest.mark.anyio
async def test_async_generator_bad_arguments_raise_at_the_call(spans: CapturedSpans) -> None:
    """Like an undecorated async generator function: a bad call raises at once, no span."""

    @trace_fn("reward")
    async def numbers(n: int, *, step: int = 1, span: int = 0) -> AsyncIterator[int]:
        yield n + span
        yield n + step

    assert inspect.isasyncgenfunction(numbers)
    assert str(inspect.signature(numbers, follow_wrapped=False)) == str(inspect.signature(numbers))
    with pytest.raises(TypeError):
        numbers(1, 2)  # type: ignore[misc]
    with pytest.raises(TypeError):
        numbers(step=2)  # type: ignore[call-arg]
    assert spans.spans == []
    # A parameter may share a name with the wrapper's machinery ("span").
    assert [x async for x in numbers(1, step=5, span=10)] == [11, 6]
    assert [name.rsplit(".", 1)[-1] for name in spans.names()] == ["numbers"]


@pytest.mark.anyio
async def test_async_generator_parameters_may_shadow_builtins(spans: CapturedSpans) -> None:
    """Parameters named like the builtins the wrapper uses shadow nothing of it."""

    @trace_fn("reward")
    async def stream(
        type: str = "text",
        BaseException: int = 0,
        GeneratorExit: int = 0,
        StopAsyncIteration: int = 0,
    ) -> AsyncIterator[str]:
        yield type
        raise ValueError("boom")

    agen = stream("a")
    assert await agen.__anext__() == "a"
    with pytest.raises(ValueError, match="boom"):
        await agen.__anext__()
    early = stream("b")
    assert await early.__anext__() == "b"
    await early.aclose()  # GeneratorExit path
    assert [s.status.status_code for s in spans.spans] == [StatusCode.ERROR, StatusCode.UNSET]
    assert dict(spans.spans[1].attributes or {})["asynctrace.cancelled"] is True


@pytest.mark.anyio
async def test_async_generator_with_unmirrorable_signature(spans: CapturedSpans) -> None:
    """A signature that cannot be mirrored is forwarded as called."""

    async def agen(*args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        yield args, kwargs

    agen.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [inspect.Parameter("x", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    )
    traced = trace_fn("reward")(agen)
    assert [x async for x in traced(1, y=2)] == [((1,), {"y": 2})]
    assert len(spans.spans) == 1


def test_disabled_generator_passes_through() -> None:
    """With telemetry off a decorated generator behaves exactly like the original."""

    @trace_fn("reward")
    def echo() -> Iterator[object]:
        received = yield 1
        yield received
        return "r"

    gen = echo()
    assert next(gen) == 1
    assert gen.send(5) == 5
    with pytest.raises(StopIteration) as stop:
        next(gen)
    assert stop.value.value == "r"


@pytest.mark.anyio
async def test_async_generator_span(
    spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    """An async generator's span covers the iteration; the caller's span is unchanged."""
    async with umbrella_span("step", "caller") as caller:
        seen = [span_id async for span_id in traced_anumbers(3)]
        assert trace.get_current_span() is caller
    (agen_span,) = spans.by_name("agen")
    assert seen == [agen_span.context.span_id] * 3
    assert "asynctrace.cancelled" not in attrs(agen_span)
    _no_detach_failures(caplog)


@pytest.mark.anyio
async def test_async_generator_aclose_from_other_task(
    spans: CapturedSpans, caplog: pytest.LogCaptureFixture
) -> None:
    """aclose() from another task ends the span exactly once, without detach errors."""
    agen = traced_anumbers(100)
    async with umbrella_span("step", "caller") as caller:
        await agen.__anext__()
        assert trace.get_current_span() is caller

    async def closer() -> None:
        await agen.aclose()

    async with anyio.create_task_group() as tg:
        tg.start_soon(closer)
    await agen.aclose()
    (agen_span,) = spans.by_name("agen")
    assert attrs(agen_span)["asynctrace.cancelled"] is True
    _no_detach_failures(caplog)


@pytest.mark.anyio
async def test_async_generator_break_asend_athrow(spans: CapturedSpans) -> None:
    """asend and athrow are forwarded; break + aclose end the span once."""

    @trace_fn("reward", "agen2")
    async def echo() -> AsyncIterator[object]:
        received = yield "ready"
        try:
            yield received
        except KeyError:
            yield "caught"

    agen = echo()
    assert await agen.__anext__() == "ready"
    assert await agen.asend("hi") == "hi"
    assert await agen.athrow(KeyError("k")) == "caught"
    await agen.aclose()
    async with contextlib.aclosing(traced_anumbers(5)) as it:
        async for _ in it:
            break
    names = spans.names()
    assert names.count("agen2") == 1


@pytest.mark.anyio
async def test_disabled_async_generator_passes_through() -> None:
    """With telemetry off a decorated async generator forwards asend."""

    @trace_fn("reward")
    async def echo() -> AsyncIterator[object]:
        received = yield 1
        yield received

    agen = echo()
    assert await agen.__anext__() == 1
    assert await agen.asend(7) == 7
    await agen.aclose()


def test_umbrella_trace_fn_is_unbucketed(spans: CapturedSpans) -> None:
    """umbrella_trace_fn never tags a bucket, even on a leaf group."""

    @umbrella_trace_fn("generation", "wrap")
    def wrap() -> None:
        pass

    wrap()
    assert "rl.bucket" not in attrs(spans.spans[0])


def test_static_attributes(spans: CapturedSpans) -> None:
    """attributes= are set on every call's span."""

    @trace_fn("reward", attributes={"model": "m"})
    def f() -> None:
        pass

    f()
    assert attrs(spans.spans[0])["model"] == "m"


@pytest.mark.parametrize("bad", ["", None, 3])
def test_bad_group_at_decoration(bad: object) -> None:
    """A bad group name fails at decoration time with ConfigurationError."""
    with pytest.raises(ConfigurationError, match="group"):
        trace_fn(bad)  # type: ignore[arg-type]


def test_sync_exception_recorded(spans: CapturedSpans) -> None:
    """A sync function's exception is recorded and re-raised."""

    @trace_fn("reward")
    def boom() -> None:
        raise OSError("x")

    with pytest.raises(OSError, match="x"):
        boom()
    assert spans.spans[0].status.status_code is StatusCode.ERROR


def test_methods_work(spans: CapturedSpans) -> None:
    """Decorated methods bind self normally."""

    class Worker:
        @trace_fn("reward")
        def run(self, x: int) -> int:
            return x * 2

    assert Worker().run(4) == 8
    assert spans.spans[0].name.endswith("Worker.run")


def test_works_with_explicit_provider_logging(caplog: pytest.LogCaptureFixture) -> None:
    """enable_telemetry on a plain SDK provider records the decorated call."""
    from opentelemetry.sdk.trace import TracerProvider

    provider = TracerProvider()
    with caplog.at_level(logging.WARNING):
        enable_telemetry(provider, span_groups="reward")
        assert add(2) == 4
    assert not caplog.records


def test_wrapper_forwards_every_parameter_kind(spans: CapturedSpans) -> None:
    """Positional-only, defaults, *args, keyword-only and **kwargs all pass through."""

    def f(a, /, b, c=3, *args, d, e=5, **kw):  # type: ignore[no-untyped-def]
        return (a, b, c, args, d, e, kw)

    wrapped = trace_fn("reward")(f)
    assert wrapped(1, 2, d=4) == (1, 2, 3, (), 4, 5, {})
    assert wrapped(1, 2, 3, 4, 5, d=6, z=1) == (1, 2, 3, (4, 5), 6, 5, {"z": 1})
    assert wrapped(1, b=2, d=4, e=0) == (1, 2, 3, (), 4, 0, {})
    with pytest.raises(TypeError):
        wrapped(a=1, b=2, d=4)  # positional-only stays positional-only
    assert str(inspect.signature(wrapped)) == str(inspect.signature(f))
    assert len(spans.spans) == 3


def test_wrapper_keeps_default_objects() -> None:
    """Defaults are the same objects, not copies."""
    sentinel: list[int] = []

    def f(x: list[int] = sentinel) -> list[int]:
        return x

    assert trace_fn("reward")(f)() is sentinel


def test_parameter_names_that_clash_with_internals_fall_back() -> None:
    """A parameter named like the wrapper's internals still works (generic wrapper)."""

    def f(_at_fn: int, _at_gate: int = 2) -> int:
        return _at_fn + _at_gate

    assert trace_fn("reward")(f)(1) == 3
    assert trace_fn("reward")(f)(1, _at_gate=5) == 6


def test_a_traced_function_pickled_by_value_records_where_it_runs() -> None:
    """cloudpickle (Ray, loky, Dask) sends a function defined in ``__main__`` or locally
    by value: a traced one pickles, and its copy reads the gate of the process it runs
    in, not a frozen copy of the sender's."""
    cloudpickle = pytest.importorskip("cloudpickle")
    from asynctrace._state import GATE

    @trace_fn("reward")
    def score(x: int) -> int:
        return x + 1

    class Worker:
        @trace_fn("generation", "worker.generate")
        async def generate(self, x: int) -> int:
            return x

        @trace_fn("generation", "worker.items")
        def items(self) -> Iterator[int]:
            yield 1

        @trace_fn("generation", "worker.aitems")
        async def aitems(self) -> AsyncIterator[int]:
            yield 1

        @trace_fn("generation", "worker.profiled", profile=True)
        def profiled(self) -> int:
            return 2

    assert cloudpickle.loads(cloudpickle.dumps(GATE)) is GATE
    cloudpickle.dumps(Worker)  # a class with traced methods, by value
    copy, generate, items, aitems, profiled = cloudpickle.loads(
        cloudpickle.dumps((score, Worker.generate, Worker.items, Worker.aitems, Worker.profiled))
    )
    assert copy is not score
    assert generate is not Worker.generate
    worker = Worker()
    with capture_spans(span_groups="all") as spans:
        assert copy(1) == 2
        assert anyio.run(generate, worker, 3) == 3
        assert list(items(worker)) == [1]

        async def drain() -> list[int]:
            return [x async for x in aitems(worker)]

        assert anyio.run(drain) == [1]
        assert profiled(worker) == 2
    assert sorted(s.name for s in spans) == sorted(
        [f"{score.__qualname__}", "worker.generate", "worker.items", "worker.aitems",
         "worker.profiled"]
    )  # fmt: skip


@trace_fn("reward", "gen")
def opens_a_span_across_a_yield() -> Iterator[int]:
    with umbrella_span("step", "inner"):
        yield 1
        with umbrella_span("step", "child"):
            pass


@trace_fn("reward", "agen")
async def aopens_a_span_across_a_yield() -> AsyncIterator[int]:
    async with umbrella_span("step", "inner"):
        yield 1
        async with umbrella_span("step", "child"):
            pass


@pytest.mark.anyio
async def test_a_span_the_generator_opens_across_a_yield_stays_its_parent(
    spans: CapturedSpans,
) -> None:
    """A span the body opens before a ``yield`` is the parent of what it opens after,
    as without the decorator; the consumer's context is left as it was."""
    with umbrella_span("step", "caller") as caller:
        assert list(opens_a_span_across_a_yield()) == [1]
        assert trace.get_current_span() is caller
        assert [x async for x in aopens_a_span_across_a_yield()] == [1]
        assert trace.get_current_span() is caller
    inner, ainner = spans.by_name("inner")
    child, achild = spans.by_name("child")
    assert child.parent.span_id == inner.context.span_id
    assert achild.parent.span_id == ainner.context.span_id
    assert inner.parent.span_id == spans.by_name("gen")[0].context.span_id
    assert ainner.parent.span_id == spans.by_name("agen")[0].context.span_id


def test_an_async_generator_left_open_closes_once_at_loop_shutdown() -> None:
    """The loop's ``shutdown_asyncgens`` closes a traced async generator left open once:
    its ``finally`` may await, nothing is reported, and the span says it was cancelled."""
    import asyncio

    closed: list[str] = []
    errors: list[dict[str, Any]] = []

    @trace_fn("reward", "left.open")
    async def items() -> AsyncIterator[int]:
        try:
            for i in range(10):
                yield i
        finally:
            await asyncio.sleep(0)
            closed.append("finally")

    kept: list[Any] = []

    async def main() -> None:
        asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: errors.append(ctx))
        agen = items()
        kept.append(agen)  # alive until the loop shuts its generators down
        async for i in agen:
            if i == 2:
                break

    with capture_spans(span_groups="all") as spans:
        asyncio.run(main())
    assert errors == []
    assert closed == ["finally"]
    (span,) = spans.by_name("left.open")
    assert attrs(span).get("asynctrace.cancelled") is True
    assert span.status.status_code is not StatusCode.ERROR


def test_the_default_name_is_never_a_repr(spans: CapturedSpans) -> None:
    """A partial's arguments (a token, say) and an object's address never name the span:
    the function's qualified name does, or the callable's class."""
    import functools

    def fetch(url: str, api_key: str) -> str:
        return url

    class Client:
        def __init__(self, token: str) -> None:
            self.token = token

        def __repr__(self) -> str:
            return f"Client(token={self.token})"

        def __call__(self, url: str) -> str:
            return url

    def pages(url: str, api_key: str) -> Iterator[str]:
        yield url

    pager = trace_fn("reward")(functools.partial(pages, api_key="sk-SECRET123"))
    assert list(pager("p")) == ["p"]  # a partial of a generator function: decorated, traced
    partial = trace_fn("reward")(functools.partial(fetch, api_key="sk-SECRET123"))
    client = trace_fn("reward")(Client("tok-SECRET"))
    assert partial("u") == "u"
    assert client("v") == "v"
    names = [s.name for s in spans]
    assert names == [
        pages.__qualname__,
        fetch.__qualname__,
        "test_the_default_name_is_never_a_repr.<locals>.Client",
    ]
    assert partial.__name__ == "fetch"
    assert "SECRET" not in partial.__code__.co_filename + client.__code__.co_filename


@pytest.mark.anyio
async def test_static_and_class_methods(spans: CapturedSpans) -> None:
    """``@trace_fn`` above ``@staticmethod`` / ``@classmethod`` traces the function inside
    and keeps the descriptor; something that cannot be called is refused at decoration."""

    class C:
        @trace_fn("reward", "s")
        @staticmethod
        def s(x: int) -> int:
            return x

        @trace_fn("reward", "c")
        @classmethod
        def c(cls, x: int) -> str:
            return f"{cls.__name__}{x}"

        @trace_fn("reward", "a")
        @staticmethod
        async def a(x: int) -> int:
            return x

    assert C().s(1) == 1
    assert C.s(2) == 2
    assert C.c(1) == "C1"
    assert C().c(2) == "C2"
    assert inspect.iscoroutinefunction(C.a)
    assert await C.a(3) == 3
    assert [s.name for s in spans] == ["s", "s", "c", "c", "a"]
    with pytest.raises(ConfigurationError, match="expected a function"):
        trace_fn("reward")(42)  # type: ignore[type-var]


def test_a_types_coroutine_generator_can_still_be_awaited(spans: CapturedSpans) -> None:
    """A ``@types.coroutine`` generator function stays awaitable; the span covers the await
    (asyncio: the bare ``yield`` is asyncio's way to let the loop run)."""
    import asyncio
    import types

    @trace_fn("reward", "legacy")
    @types.coroutine
    def legacy() -> Iterator[None]:
        yield
        return 5

    async def main() -> int:
        result: int = await legacy()  # type: ignore[misc]
        return result

    assert asyncio.run(main()) == 5
    assert [s.name for s in spans] == ["legacy"]


@pytest.mark.anyio
async def test_profiled_wrappers_check_arguments_at_the_call() -> None:
    """With ``profile=True`` too, bad arguments raise at the call, as calling the function
    would, not when the coroutine is awaited."""

    @trace_fn("reward", profile=True)
    async def one(a: int) -> int:
        return a

    with pytest.raises(TypeError):
        one(1, 2, 3)  # type: ignore[call-arg]
    assert await one(4) == 4
    assert inspect.signature(one) == inspect.signature(one.__wrapped__)
