"""Conformance: the fast and the SDK provider record, export and ship the same telemetry.

One instrumented program (asynctrace's helpers and the plain OpenTelemetry
API) runs once on each provider through the real pipeline: ``configure`` with
the in-memory, chrome and OTLP/HTTP exporters (a real receiver on
127.0.0.1), and ``capture_spans``. Each result is normalized (span ids become
the tree they encode, timestamps are dropped, stack traces keep this file's
frames and their last line), checked against what the program must produce,
and compared across the providers.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import re
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import (
    INVALID_SPAN_CONTEXT,
    Link,
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    TraceFlags,
    TraceState,
)
from opentelemetry.trace.status import Status, StatusCode

import asynctrace
from asynctrace import (
    Bucket,
    bucket_scope,
    configure,
    instant,
    iteration_scope,
    managed_span,
    shutdown,
    trace_fn,
    umbrella_span,
)
from asynctrace.export import read_chrome_trace
from asynctrace.testing import capture_spans

PROVIDERS = ["fast", "sdk"]
THIS_FILE = Path(__file__).resolve()

LIB_NAME = "conformance.lib"
LIB_VERSION = "1.2.3"
LIB_SCHEMA = "https://opentelemetry.io/schemas/1.26.0"
LIB_ATTRIBUTES = {"lib.flavor": "conformance"}
ASYNCTRACE_SCOPE = ("asynctrace", asynctrace.__version__, None, {})
LIB_SCOPE = (LIB_NAME, LIB_VERSION, LIB_SCHEMA, LIB_ATTRIBUTES)

# A propagated (remote) parent, as a carrier would bring it.
REMOTE_TRACE_ID = 0x4BF92F3577B34DA6A3CE929D0E0E4736
REMOTE_SPAN_ID = 0x00F067AA0BA902B7
REMOTE_STATE = TraceState([("vendor", "abc")])
REMOTE_PARENT = f"{REMOTE_SPAN_ID:016x}"
REMOTE_TRACE = f"{REMOTE_TRACE_ID:032x}"

SAMPLED_RANDOM = TraceFlags.SAMPLED | TraceFlags.RANDOM_TRACE_ID
HAS_IS_REMOTE = 0x100  # OTLP SpanFlags: the is-remote bit of the parent is known
IS_REMOTE = 0x200  # OTLP SpanFlags: the parent is remote
# ids, and the writer's rank and role (on every event, for AReaL's converter)
CHROME_IDS = ("trace_id", "span_id", "parent_span_id", "rank", "role")


def _without_ids(args: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in args.items() if k not in CHROME_IDS}


STACKTRACE = "exception.stacktrace"


class BatchError(ValueError):
    """The program's own error type: its exception.type is module-qualified."""


BATCH_ERROR = f"{BatchError.__module__}.BatchError"


# ---------------------------------------------------------------------------
# The program.


@trace_fn("reward", "conformance.score")
def score(value: int) -> int:
    """A traced plain function (a leaf of ``reward``)."""
    trace.get_current_span().set_attribute("score.input", value)
    return value * 2


@trace_fn("generation", attributes={"fn.kind": "async"})
async def generate(prompt: str) -> str:
    """A traced coroutine function, named by its qualified name."""
    await asyncio.sleep(0)
    return prompt.upper()


@trace_fn("generation", "conformance.generate_fails")
async def generate_fails() -> None:
    """A traced coroutine function whose exception escapes the span."""
    await asyncio.sleep(0)
    raise BatchError("no tokens")


async def program(provider: trace.TracerProvider) -> dict[str, SpanContext]:
    """Exercise the helpers and the OpenTelemetry API; the contexts of some spans, by name."""
    tracer = asynctrace.get_tracer()
    lib = provider.get_tracer(LIB_NAME, LIB_VERSION, LIB_SCHEMA, LIB_ATTRIBUTES)
    seen: dict[str, SpanContext] = {}
    instant("job", "conformance.startup", attributes={"phase": "boot"})  # nothing recording
    with (
        iteration_scope(3),
        umbrella_span("job", "conformance.job", attributes={"job.id": "j-1"}) as job,
    ):
        seen["conformance.job"] = job.get_span_context()
        with managed_span(
            "policy_update", "conformance.update", attributes={"train.tags": ["a", "b"]}
        ) as update:
            seen["conformance.update"] = update.get_span_context()
            update.set_attribute("train.loss", 0.25)
            update.set_attributes({"train.lr": 1e-5, "train.shape": [4, 8], "train.ok": True})
            instant("rollout", "conformance.ready", attributes={"batch.size": 64})
        with bucket_scope(Bucket.OVERHEAD), managed_span("reward", "conformance.scoring"):
            score(21)
        with contextlib.suppress(BatchError):
            with managed_span("data_processing", "conformance.fails"):
                raise BatchError("bad batch")
        await generate("hi")
        with contextlib.suppress(BatchError):
            await generate_fails()
        await _cancelled(tracer)
        _api(tracer, lib, seen)
        await _api_async(lib)
        _lazy()
        await asyncio.gather(*(_worker(tracer, index) for index in range(3)))
    return seen


def _lazy() -> None:
    """A span with ``lazy_attributes``: on the fast provider an export thread computes
    them; every exporter holds the same attributes on both providers."""
    span = asynctrace.start_span(
        "per_prompt",
        "conformance.lazy",
        kind=SpanKind.CLIENT,
        attributes={"lazy.kept": "given"},
        lazy_attributes=lambda: {
            "url.full": "http://bob:pw@h/x?token=abc",
            "server.port": 8080,
            "lazy.kept": "lazy",
            "lazy.late": "lazy",
        },
    )
    span.set_attribute("lazy.late", "by hand")
    asynctrace.end_span(span)


async def _cancelled(tracer: trace.Tracer) -> None:
    """A task cancelled inside a managed span and an API span."""
    started = asyncio.Event()

    async def victim() -> None:
        async with managed_span("generation", "conformance.cancelled"):
            with tracer.start_as_current_span("conformance.cancelled.api"):
                started.set()
                await asyncio.sleep(10)

    task = asyncio.create_task(victim())
    await started.wait()
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _api(tracer: trace.Tracer, lib: trace.Tracer, seen: dict[str, SpanContext]) -> None:
    """The plain OpenTelemetry API: kinds, events, status, links, exceptions, renames."""
    with tracer.start_as_current_span(
        "conformance.client",
        kind=SpanKind.CLIENT,
        attributes={"http.request.method": "GET", "url.path": "/score"},
    ) as client:
        client.add_event("request.sent", {"body.bytes": 128, "body.parts": ["head", "tail"]})
        with lib.start_as_current_span("conformance.server", kind=SpanKind.SERVER) as server:
            server.set_attribute("http.response.status_code", 503)
            server.set_status(Status(StatusCode.ERROR, "upstream unavailable"))
        client.set_status(StatusCode.OK)
        client.set_status(StatusCode.ERROR, "ignored: OK is final")

    @lib.start_as_current_span("conformance.decorated", attributes={"decorated": "sync"})
    def decorated(n: int) -> int:
        trace.get_current_span().set_attribute("decorated.n", n)
        return n

    assert decorated(1) == 1
    manual = lib.start_span("conformance.manual", kind=SpanKind.PRODUCER, attributes={"q": "q1"})
    with trace.use_span(manual, end_on_exit=True):
        with tracer.start_as_current_span("conformance.manual.child"):
            pass
    with contextlib.suppress(KeyError):
        with lib.start_as_current_span("conformance.api_raises"):
            raise KeyError("missing")
    with contextlib.suppress(BatchError):
        with lib.start_span("conformance.span_cm"):  # the span's own __exit__
            raise BatchError("out of a span used as a context manager")
    quiet = lib.start_span(
        "conformance.quiet", record_exception=False, set_status_on_exception=False
    )
    with contextlib.suppress(BatchError), quiet:
        raise BatchError("not recorded")
    other = lib.start_span("conformance.other_root", context=Context())  # a trace of its own
    other.end()
    seen["conformance.other_root"] = other.get_span_context()
    linked = tracer.start_span(
        "conformance.linked",
        links=[Link(other.get_span_context(), {"link.kind": "follows", "link.ids": [1, 2]})],
    )
    linked.add_link(seen["conformance.job"], {"link.kind": "step"})
    linked.add_link(seen["conformance.update"])
    linked.add_link(INVALID_SPAN_CONTEXT)  # dropped: invalid, no attributes
    linked.add_link(INVALID_SPAN_CONTEXT, {"link.kind": "invalid"})  # kept for its attributes
    try:
        raise BatchError("handled")
    except BatchError as exc:
        linked.record_exception(exc, attributes={"retry.attempt": 1})
    linked.add_event("retry", {"retry.delay_s": 0.5})
    linked.set_status(StatusCode.ERROR, "handled failure")
    linked.update_name("conformance.renamed")
    seen["conformance.renamed"] = linked.get_span_context()
    linked.end()
    remote = trace.set_span_in_context(
        NonRecordingSpan(
            SpanContext(
                REMOTE_TRACE_ID,
                REMOTE_SPAN_ID,
                is_remote=True,
                trace_flags=TraceFlags(TraceFlags.SAMPLED),
                trace_state=REMOTE_STATE,
            )
        )
    )
    with lib.start_as_current_span(
        "conformance.remote_child", context=remote, kind=SpanKind.SERVER
    ) as remote_child:
        seen["conformance.remote_child"] = remote_child.get_span_context()
    with lib.start_as_current_span("conformance.kept_open", end_on_exit=False) as kept:
        kept.set_attribute("kept", True)
    assert kept.is_recording()
    kept.end()
    lib.start_span("conformance.left_open", attributes={"left": "open"})  # ended at shutdown


async def _api_async(lib: trace.Tracer) -> None:
    """``start_as_current_span`` decorating a coroutine function."""

    @lib.start_as_current_span("conformance.decorated_async")
    async def fetch() -> None:
        await asyncio.sleep(0)
        trace.get_current_span().add_event("fetched")

    await fetch()


async def _worker(tracer: trace.Tracer, index: int) -> None:
    """One of the tasks of ``asyncio.gather``: an API span around a managed span."""
    with tracer.start_as_current_span(f"conformance.worker.{index}") as span:
        span.set_attribute("worker.index", index)
        await asyncio.sleep(0)
        async with managed_span("generation", f"conformance.worker.{index}.generate") as inner:
            inner.set_attribute("worker.tokens", [index, index + 1])
            await asyncio.sleep(0)


# ---------------------------------------------------------------------------
# What the program must produce (the same on both providers).

JOB = "conformance.job"
ITER = {"rl.iteration": 3}
PRODUCTIVE = {**ITER, "rl.bucket": "productive"}
OVERHEAD = {**ITER, "rl.bucket": "overhead"}
UNSET = ("UNSET", None)


def _exception(kind: str, message: str, escaped: bool, **extra: Any) -> tuple[str, dict[str, Any]]:
    """An exception event, its stack trace left out."""
    escaped_text = str(escaped)  # the SDK's form: "True" / "False"
    attributes = {"exception.type": kind, "exception.message": message}
    return "exception", {**attributes, "exception.escaped": escaped_text, **extra}


# name: (parent, kind, scope, attributes, events, status)
EXPECTED: dict[str, tuple[str | None, str, tuple[Any, ...], dict[str, Any], list[Any], Any]] = {
    "conformance.startup": (None, "INTERNAL", ASYNCTRACE_SCOPE, {"phase": "boot"}, [], UNSET),
    JOB: (
        None,
        "INTERNAL",
        ASYNCTRACE_SCOPE,
        {"asynctrace.group": "job", **ITER, "job.id": "j-1"},
        [],
        UNSET,
    ),
    "conformance.update": (
        JOB,
        "INTERNAL",
        ASYNCTRACE_SCOPE,
        {
            **PRODUCTIVE,
            "train.tags": ("a", "b"),
            "train.loss": 0.25,
            "train.lr": 1e-5,
            "train.shape": (4, 8),
            "train.ok": True,
        },
        [("conformance.ready", {**ITER, "batch.size": 64})],
        UNSET,
    ),
    "conformance.scoring": (JOB, "INTERNAL", ASYNCTRACE_SCOPE, OVERHEAD, [], UNSET),
    "conformance.score": (
        "conformance.scoring",
        "INTERNAL",
        ASYNCTRACE_SCOPE,
        {**OVERHEAD, "score.input": 21},
        [],
        UNSET,
    ),
    "conformance.fails": (
        JOB,
        "INTERNAL",
        ASYNCTRACE_SCOPE,
        OVERHEAD,
        [_exception(BATCH_ERROR, "bad batch", True)],
        ("ERROR", "BatchError: bad batch"),
    ),
    "generate": (JOB, "INTERNAL", ASYNCTRACE_SCOPE, {**PRODUCTIVE, "fn.kind": "async"}, [], UNSET),
    "conformance.lazy": (
        JOB,
        "CLIENT",
        ASYNCTRACE_SCOPE,
        {
            **ITER,
            "lazy.kept": "given",
            "lazy.late": "by hand",
            "url.full": "http://h/x?token=REDACTED",
            "server.port": 8080,
        },
        [],
        UNSET,
    ),
    "conformance.generate_fails": (
        JOB,
        "INTERNAL",
        ASYNCTRACE_SCOPE,
        PRODUCTIVE,
        [_exception(BATCH_ERROR, "no tokens", True)],
        ("ERROR", "BatchError: no tokens"),
    ),
    "conformance.cancelled": (
        JOB,
        "INTERNAL",
        ASYNCTRACE_SCOPE,
        {**PRODUCTIVE, "asynctrace.cancelled": True},
        [],
        UNSET,
    ),
    "conformance.cancelled.api": (
        "conformance.cancelled",
        "INTERNAL",
        ASYNCTRACE_SCOPE,
        {},
        [],
        UNSET,
    ),
    "conformance.client": (
        JOB,
        "CLIENT",
        ASYNCTRACE_SCOPE,
        {"http.request.method": "GET", "url.path": "/score"},
        [("request.sent", {"body.bytes": 128, "body.parts": ("head", "tail")})],
        ("OK", None),
    ),
    "conformance.server": (
        "conformance.client",
        "SERVER",
        LIB_SCOPE,
        {"http.response.status_code": 503},
        [],
        ("ERROR", "upstream unavailable"),
    ),
    "conformance.decorated": (
        JOB,
        "INTERNAL",
        LIB_SCOPE,
        {"decorated": "sync", "decorated.n": 1},
        [],
        UNSET,
    ),
    "conformance.manual": (JOB, "PRODUCER", LIB_SCOPE, {"q": "q1"}, [], UNSET),
    "conformance.manual.child": (
        "conformance.manual",
        "INTERNAL",
        ASYNCTRACE_SCOPE,
        {},
        [],
        UNSET,
    ),
    "conformance.api_raises": (
        JOB,
        "INTERNAL",
        LIB_SCOPE,
        {},
        [_exception("KeyError", "'missing'", False)],
        ("ERROR", "KeyError: 'missing'"),
    ),
    "conformance.span_cm": (
        JOB,
        "INTERNAL",
        LIB_SCOPE,
        {},
        [_exception(BATCH_ERROR, "out of a span used as a context manager", True)],
        ("ERROR", "BatchError: out of a span used as a context manager"),
    ),
    "conformance.quiet": (JOB, "INTERNAL", LIB_SCOPE, {}, [], UNSET),
    "conformance.other_root": (None, "INTERNAL", LIB_SCOPE, {}, [], UNSET),
    "conformance.renamed": (
        JOB,
        "INTERNAL",
        ASYNCTRACE_SCOPE,
        {},
        [
            _exception(BATCH_ERROR, "handled", False, **{"retry.attempt": 1}),
            ("retry", {"retry.delay_s": 0.5}),
        ],
        ("ERROR", "handled failure"),
    ),
    "conformance.remote_child": (REMOTE_PARENT, "SERVER", LIB_SCOPE, {}, [], UNSET),
    "conformance.decorated_async": (JOB, "INTERNAL", LIB_SCOPE, {}, [("fetched", {})], UNSET),
    "conformance.kept_open": (JOB, "INTERNAL", LIB_SCOPE, {"kept": True}, [], UNSET),
    "conformance.left_open": (
        JOB,
        "INTERNAL",
        LIB_SCOPE,
        {"left": "open", "asynctrace.truncated": True},
        [],
        UNSET,
    ),
}
for _i in range(3):
    EXPECTED[f"conformance.worker.{_i}"] = (
        JOB,
        "INTERNAL",
        ASYNCTRACE_SCOPE,
        {"worker.index": _i},
        [],
        UNSET,
    )
    EXPECTED[f"conformance.worker.{_i}.generate"] = (
        f"conformance.worker.{_i}",
        "INTERNAL",
        ASYNCTRACE_SCOPE,
        {**PRODUCTIVE, "worker.tokens": (_i, _i + 1)},
        [],
        UNSET,
    )

# Spans started straight from a tracer (not by asynctrace's helpers) inside the program's
# iteration_scope(3) carry its stamp too, on either provider.
DIRECT = (
    "conformance.cancelled.api",
    "conformance.client",
    "conformance.server",
    "conformance.decorated",
    "conformance.manual",
    "conformance.manual.child",
    "conformance.api_raises",
    "conformance.span_cm",
    "conformance.quiet",
    "conformance.other_root",
    "conformance.renamed",
    "conformance.remote_child",
    "conformance.decorated_async",
    "conformance.kept_open",
    "conformance.left_open",
    "conformance.worker.0",
    "conformance.worker.1",
    "conformance.worker.2",
)
for _name in DIRECT:
    _parent, _kind, _scope, _attributes, _events, _status = EXPECTED[_name]
    EXPECTED[_name] = (_parent, _kind, _scope, {**ITER, **_attributes}, _events, _status)
EXPECTED_LINKS = [
    ("conformance.other_root", {"link.kind": "follows", "link.ids": (1, 2)}),
    (JOB, {"link.kind": "step"}),
    ("conformance.update", {}),
    ("<invalid>", {"link.kind": "invalid"}),
]
# Where each exception was raised: a frame of this file its stack trace must show.
RAISED_IN = {
    "conformance.fails": "program",
    "conformance.generate_fails": "generate_fails",
    "conformance.api_raises": "_api",
    "conformance.span_cm": "_api",
    "conformance.renamed": "_api",
}
RESOURCE = {
    "service.name": "conformance",
    "asynctrace.run_id": "conformance-run",
    "deployment.environment.name": "test",
}


# ---------------------------------------------------------------------------
# Normal forms.


def _stack(text: object) -> dict[str, Any]:
    """A stack trace as both providers must agree on it: this file's frames, the last line.

    Frames of the providers' own code (their ``start_as_current_span``, say)
    differ and are left out.
    """
    assert isinstance(text, str)
    assert text.strip(), "exception.stacktrace is empty"
    frames = re.findall(r'File "([^"]+)", line (\d+), in (\S+)', text)
    own = [(int(line), fn) for path, line, fn in frames if Path(path).resolve() == THIS_FILE]
    return {"frames": own, "last": text.rstrip().splitlines()[-1]}


def _plain(value: Any) -> Any:
    return tuple(value) if isinstance(value, (list, tuple)) else value


def _attrs(attributes: Mapping[str, Any] | None) -> dict[str, Any]:
    """Attributes as a plain dict: sequences as tuples, stack traces reduced."""
    return {
        key: _stack(value) if key == STACKTRACE else _plain(value)
        for key, value in (attributes or {}).items()
    }


def _labels(ids: Mapping[int, str]) -> Callable[[int], str]:
    """Span id to span name, for the spans seen; other ids as hex (``<invalid>`` for 0)."""

    def label(span_id: int) -> str:
        if not span_id:
            return "<invalid>"
        return ids.get(span_id, f"{span_id:016x}")

    return label


def _trace_labels(
    parents: Mapping[int, int], traces: Mapping[int, int], names: Mapping[int, str]
) -> dict[int, str]:
    """Each span's trace, named by the root of its local tree (the trace id if it is remote).

    Also checks that a child shares its parent's trace id.
    """
    out: dict[int, str] = {}
    for span_id in parents:
        root = span_id
        while parents[root] in parents:
            assert traces[parents[root]] == traces[root], names[root]
            root = parents[root]
        out[span_id] = names[root] if not parents[root] else f"{traces[root]:032x}"
    return out


# The conformance program runs with every group on, loop_stall included: on a
# loaded machine the scheduler can hold its event loop past the 50 ms
# threshold, and the monitor then rightly records a stall the program did not
# cause. Those spans are the machine's, and tests/test_stalls.py pins them.
MACHINE_MADE = frozenset({"asynctrace.loop_stall"})


def normalize_memory(spans: Sequence[ReadableSpan]) -> dict[str, dict[str, Any]]:
    """SDK ``ReadableSpan`` objects, by (unique) name; loop stalls left out (see MACHINE_MADE)."""
    spans = [span for span in spans if span.name not in MACHINE_MADE]
    names = {span.context.span_id: span.name for span in spans}
    assert len(set(names.values())) == len(spans), sorted(span.name for span in spans)
    label = _labels(names)
    parents = {s.context.span_id: s.parent.span_id if s.parent else 0 for s in spans}
    traces = {s.context.span_id: s.context.trace_id for s in spans}
    trace_of = _trace_labels(parents, traces, names)
    out: dict[str, dict[str, Any]] = {}
    for span in spans:
        scope = span.instrumentation_scope
        assert scope is not None
        span_id = span.context.span_id
        out[span.name] = {
            "parent": label(parents[span_id]) if parents[span_id] else None,
            "parent_remote": bool(span.parent and span.parent.is_remote),
            "trace": trace_of[span_id],
            "kind": span.kind.name,
            "scope": (
                scope.name,
                scope.version,
                scope.schema_url or None,
                dict(scope.attributes or {}),
            ),
            "attributes": _attrs(span.attributes),
            "events": [(event.name, _attrs(event.attributes)) for event in span.events],
            "status": (span.status.status_code.name, span.status.description),
            "links": [
                (label(link.context.span_id), _attrs(link.attributes)) for link in span.links
            ],
            "flags": int(span.context.trace_flags),
            "trace_state": tuple(span.context.trace_state.items()),
            "dropped": (span.dropped_attributes, span.dropped_events, span.dropped_links),
        }
    return out


def normalize_chrome(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Complete events by name (args without ids, parent by name), instants, process metadata."""
    complete = [e for e in events if e["ph"] == "X" and e["name"] not in MACHINE_MADE]
    ids = {int(event["args"]["span_id"], 16): event["name"] for event in complete}
    assert len(set(ids.values())) == len(complete), sorted(e["name"] for e in complete)
    label = _labels(ids)
    parents = {
        int(e["args"]["span_id"], 16): int(e["args"].get("parent_span_id", "0"), 16)
        for e in complete
    }
    traces = {int(e["args"]["span_id"], 16): int(e["args"]["trace_id"], 16) for e in complete}
    trace_of = _trace_labels(parents, traces, ids)
    spans: dict[str, dict[str, Any]] = {}
    for event in complete:
        span_id = int(event["args"]["span_id"], 16)
        spans[event["name"]] = {
            "cat": event["cat"],
            "parent": label(parents[span_id]) if parents[span_id] else None,
            "trace": trace_of[span_id],
            "args": _attrs({k: v for k, v in event["args"].items() if k not in CHROME_IDS}),
        }
    instants = sorted(
        repr((event["name"], event["cat"], _attrs(_without_ids(event["args"]))))
        for event in events
        if event["ph"] == "i"
    )
    process = {
        event["name"]: event["args"]
        for event in events
        if event["ph"] == "M" and event["name"] != "thread_name"
    }
    return {"spans": spans, "instants": instants, "process": process}


def _value(value: Any) -> Any:
    """An OTLP ``AnyValue`` as a Python value (arrays as tuples)."""
    which = value.WhichOneof("value")
    if which == "array_value":
        return tuple(_value(item) for item in value.array_value.values)
    if which == "kvlist_value":
        return {kv.key: _value(kv.value) for kv in value.kvlist_value.values}
    return getattr(value, which) if which is not None else None


def _kv(attributes: Any) -> dict[str, Any]:
    return _attrs({kv.key: _value(kv.value) for kv in attributes})


def _id(raw: bytes) -> int:
    return int.from_bytes(raw, "big") if raw else 0


def normalize_otlp(requests: Sequence[Any]) -> dict[str, Any]:
    """Spans decoded by the receiver, by name; resources and scopes seen."""
    from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
    from opentelemetry.proto.trace.v1.trace_pb2 import Status as PbStatus

    flat = [
        (rs, ss, span)
        for request in requests
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
        if span.name not in MACHINE_MADE
    ]
    names = {_id(span.span_id): span.name for _, _, span in flat}
    assert len(set(names.values())) == len(flat), sorted(span.name for _, _, span in flat)
    label = _labels(names)
    parents = {_id(span.span_id): _id(span.parent_span_id) for _, _, span in flat}
    traces = {_id(span.span_id): _id(span.trace_id) for _, _, span in flat}
    trace_of = _trace_labels(parents, traces, names)
    spans: dict[str, dict[str, Any]] = {}
    resources: list[dict[str, Any]] = []
    for rs, ss, span in flat:
        resource = _kv(rs.resource.attributes)
        if resource not in resources:
            resources.append(resource)
        span_id = _id(span.span_id)
        status = span.status
        spans[span.name] = {
            "parent": label(parents[span_id]) if parents[span_id] else None,
            "trace": trace_of[span_id],
            "kind": PbSpan.SpanKind.Name(span.kind).removeprefix("SPAN_KIND_"),
            "scope": (
                ss.scope.name,
                ss.scope.version,
                ss.schema_url or None,
                _kv(ss.scope.attributes),
            ),
            "attributes": _kv(span.attributes),
            "events": [(event.name, _kv(event.attributes)) for event in span.events],
            "status": (
                PbStatus.StatusCode.Name(status.code).removeprefix("STATUS_CODE_"),
                status.message or None,
            ),
            "links": [(label(_id(link.span_id)), _kv(link.attributes)) for link in span.links],
            "link_flags": [link.flags for link in span.links],
            "flags": span.flags,
            "trace_state": span.trace_state,
            "dropped": (
                span.dropped_attributes_count,
                span.dropped_events_count,
                span.dropped_links_count,
            ),
        }
    return {"spans": spans, "resources": resources}


# ---------------------------------------------------------------------------
# Pipelines.


def _otlp_module() -> ModuleType:
    """tests/export/test_otlp.py, for its ``Receiver`` (skips without the OTLP exporter)."""
    path = Path(__file__).parent / "export" / "test_otlp.py"
    spec = importlib.util.spec_from_file_location("_conformance_otlp_receiver", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@contextlib.contextmanager
def serving() -> Iterator[Any]:
    """A real OTLP/HTTP receiver, served from a thread."""
    server = _otlp_module().Receiver()
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@dataclass
class Run:
    """What one provider's pipeline produced from :func:`program`."""

    provider: str
    contexts: dict[str, SpanContext]
    memory: list[ReadableSpan]
    chrome: list[dict[str, Any]]
    otlp: list[Any]
    otlp_paths: list[str]
    exported: dict[str, int]


@contextlib.contextmanager
def configured(provider: str, directory: Path, **config: Any) -> Iterator[asynctrace.Telemetry]:
    """``configure`` *provider* with every group on, writing to *directory*; shut down after."""
    telemetry = configure(
        {
            "enabled": True,
            "provider": provider,
            "span_groups": "all",
            "output_dir": str(directory),
            "service_name": "conformance",
            "run_id": "conformance-run",
            "resource_attributes": {"deployment.environment.name": "test"},
            "sampling_ratio": 1.0,
            **config,
        }
    )
    try:
        yield telemetry
    finally:
        assert shutdown(timeout_s=5.0)


def run_program(provider: str, directory: Path) -> Run:
    """Run :func:`program` on *provider* with the memory, chrome and OTLP exporters.

    Everything is read after ``shutdown``, which ends the span the program
    leaves open (``asynctrace.truncated``) and drains every exporter.
    """
    with serving() as receiver, pytest.MonkeyPatch.context() as env:
        env.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"{receiver.endpoint}/v1/traces")
        with configured(provider, directory, exporters=["chrome", "otlp", "memory"]) as telemetry:
            contexts = asyncio.run(program(telemetry.provider))  # type: ignore[arg-type]
        assert telemetry.memory_exporter is not None
        memory = list(telemetry.memory_exporter.get_finished_spans())
        exported = {name: stats.exported for name, stats in telemetry.stats().items()}
        path = telemetry.trace_file
        assert path is not None
        assert path.name == "traces-r0.jsonl"
        chrome = read_chrome_trace(path)
        assert chrome.skipped == 0
        return Run(
            provider,
            contexts,
            memory,
            chrome.events,
            list(receiver.requests),
            list(receiver.paths),
            exported,
        )


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """The program's telemetry on each provider (run once for the module)."""
    return {name: run_program(name, tmp_path_factory.mktemp(name)) for name in PROVIDERS}


# ---------------------------------------------------------------------------
# Per provider: the content is what the program must produce.


def _core(spans: Mapping[str, Mapping[str, Any]]) -> dict[str, tuple[Any, ...]]:
    """What EXPECTED lists of each span (events without stack traces)."""
    return {
        name: (
            span["parent"],
            span["kind"],
            span["scope"],
            span["attributes"],
            [
                (event, {k: v for k, v in attrs.items() if k != STACKTRACE})
                for event, attrs in span["events"]
            ],
            span["status"],
        )
        for name, span in spans.items()
    }


def assert_expected_spans(
    spans: Mapping[str, Mapping[str, Any]], *, open_spans_ended: bool = True
) -> None:
    """*spans* (a normal form) holds what the program must produce, tree and links included.

    Without *open_spans_ended* (no shutdown ended them), the span the
    program leaves open is not among them.
    """
    expected = dict(EXPECTED)
    if not open_spans_ended:
        del expected["conformance.left_open"]
    assert _core(spans) == expected
    assert spans["conformance.renamed"]["links"] == EXPECTED_LINKS
    for name, span in spans.items():
        if name != "conformance.renamed":
            assert span["links"] == [], name
    for name, span in spans.items():
        expected_trace = {
            "conformance.startup": "conformance.startup",
            "conformance.other_root": "conformance.other_root",
            "conformance.remote_child": REMOTE_TRACE,
        }.get(name, JOB)
        assert span["trace"] == expected_trace, name
        for event, attrs in span["events"]:
            if event == "exception":
                stack = attrs[STACKTRACE]
                kind = attrs["exception.type"].rsplit(".", 1)[-1]
                assert stack["last"].endswith(f"{kind}: {attrs['exception.message']}"), name
                assert RAISED_IN[name] in [fn for _, fn in stack["frames"]], (name, stack)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_recorded_spans_are_what_the_program_makes(runs: dict[str, Run], provider: str) -> None:
    """In memory: names, tree, kinds, scopes, attributes, events, status, links, flags."""
    run = runs[provider]
    spans = normalize_memory(run.memory)
    assert_expected_spans(spans)
    for name, span in spans.items():
        assert span["dropped"] == (0, 0, 0), name
        assert span["parent_remote"] is (name == "conformance.remote_child"), name
        if name == "conformance.remote_child":  # the remote parent's flags and trace state
            assert span["flags"] == TraceFlags.SAMPLED
            assert span["trace_state"] == (("vendor", "abc"),)
        else:
            assert span["flags"] == SAMPLED_RANDOM, name
            assert span["trace_state"] == (), name
    for span in run.memory:
        assert span.start_time is not None
        assert span.end_time is not None
        assert span.end_time >= span.start_time, span.name
        assert dict(span.resource.attributes).items() >= RESOURCE.items()
    (marker,) = [span for span in run.memory if span.name == "conformance.startup"]
    assert marker.start_time == marker.end_time  # instant() with nothing recording


@pytest.mark.parametrize("provider", PROVIDERS)
def test_chrome_trace_is_what_the_program_makes(runs: dict[str, Run], provider: str) -> None:
    """The chrome file: one complete event per span, its category, args, tree, instants."""
    run = runs[provider]
    chrome = normalize_chrome(run.chrome)
    memory = normalize_memory(run.memory)
    assert set(chrome["spans"]) == set(EXPECTED)
    for name, event in chrome["spans"].items():
        span = memory[name]
        attributes = span["attributes"]
        category = attributes.get("asynctrace.group") or attributes.get("rl.bucket")
        assert event["cat"] == (category or span["scope"][0]), name
        args = dict(attributes)
        if span["status"][0] == "ERROR":
            args["otel.status_code"] = "ERROR"
            args["otel.status_description"] = span["status"][1]
        if span["kind"] != "INTERNAL":
            args["otel.span_kind"] = span["kind"]
        assert event["args"] == args, name
        assert event["parent"] == span["parent"], name
        assert event["trace"] == span["trace"], name
    expected_instants = sorted(
        repr((event, chrome["spans"][name]["cat"], attrs))
        for name, span in memory.items()
        for event, attrs in span["events"]
    )
    assert chrome["instants"] == expected_instants
    categories = {name: event["cat"] for name, event in chrome["spans"].items()}
    assert categories[JOB] == "job"  # the group of an umbrella
    assert categories["conformance.update"] == "productive"  # the bucket of a leaf
    assert categories["conformance.score"] == "overhead"  # trace_fn in bucket_scope
    assert categories["conformance.client"] == "asynctrace"  # the tracer's scope
    assert categories["conformance.server"] == LIB_NAME
    assert chrome["spans"]["conformance.server"]["args"] == {
        **ITER,  # started inside the program's iteration_scope(3)
        "http.response.status_code": 503,
        "otel.status_code": "ERROR",
        "otel.status_description": "upstream unavailable",
        "otel.span_kind": "SERVER",
    }
    process = chrome["process"]["process_name"]
    assert process["service"] == "conformance"
    assert process["run_id"] == "conformance-run"
    assert process["rank"] == 0


@pytest.mark.parametrize("provider", PROVIDERS)
def test_otlp_content_is_what_the_program_makes(runs: dict[str, Run], provider: str) -> None:
    """Over OTLP/HTTP: the in-memory content, the resource, the scopes, the span flags."""
    run = runs[provider]
    otlp = normalize_otlp(run.otlp)
    memory = normalize_memory(run.memory)
    assert run.otlp_paths
    assert set(run.otlp_paths) == {"/v1/traces"}
    # Loop stalls the machine caused (a loaded host) are exported too, and counted.
    stalls = sum(
        span.name in MACHINE_MADE
        for request in run.otlp
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    )
    assert run.exported["otlp"] == len(EXPECTED) + stalls
    assert run.exported["chrome"] == len(EXPECTED) + stalls
    assert_expected_spans(otlp["spans"])
    for name, span in otlp["spans"].items():
        for key in ("parent", "trace", "kind", "scope", "attributes", "events", "status", "links"):
            assert span[key] == memory[name][key], (name, key)
        remote = name == "conformance.remote_child"
        assert span["flags"] == HAS_IS_REMOTE | (IS_REMOTE if remote else 0), name
        assert span["link_flags"] == [HAS_IS_REMOTE] * len(span["links"]), name
        assert span["trace_state"] == ("vendor=abc" if remote else ""), name
        assert span["dropped"] == (0, 0, 0), name
    (resource,) = otlp["resources"]
    assert resource.items() >= RESOURCE.items()
    assert resource["telemetry.sdk.name"] == "opentelemetry"
    assert resource == _attrs(run.memory[0].resource.attributes)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_span_context_matches_the_exported_span(runs: dict[str, Run], provider: str) -> None:
    """get_span_context(): valid, sampled, local, and the ids of the span every exporter wrote."""
    run = runs[provider]
    memory = {span.name: span for span in run.memory}
    chrome = {e["name"]: e["args"] for e in run.chrome if e["ph"] == "X"}
    otlp = {
        span.name: span
        for request in run.otlp
        for rs in request.resource_spans
        for ss in rs.scope_spans
        for span in ss.spans
    }
    assert set(run.contexts) == {
        JOB,
        "conformance.update",
        "conformance.other_root",
        "conformance.renamed",
        "conformance.remote_child",
    }
    for name, context in run.contexts.items():
        assert context.is_valid, name
        assert context.trace_flags.sampled, name
        assert not context.is_remote, name
        assert memory[name].context.trace_id == context.trace_id, name
        assert memory[name].context.span_id == context.span_id, name
        assert chrome[name]["trace_id"] == f"{context.trace_id:032x}", name
        assert chrome[name]["span_id"] == f"{context.span_id:016x}", name
        assert _id(otlp[name].trace_id) == context.trace_id, name
        assert _id(otlp[name].span_id) == context.span_id, name
    assert run.contexts["conformance.remote_child"].trace_id == REMOTE_TRACE_ID
    assert run.contexts["conformance.remote_child"].trace_state == REMOTE_STATE


# ---------------------------------------------------------------------------
# Across providers: the same program gives the same telemetry.


def test_providers_record_the_same_spans(runs: dict[str, Run]) -> None:
    """The in-memory normal forms of both providers are equal."""
    fast, sdk = (normalize_memory(runs[name].memory) for name in PROVIDERS)
    assert fast.keys() == sdk.keys()
    for name in fast:
        assert fast[name] == sdk[name], name
    fast_resource, sdk_resource = (dict(runs[n].memory[0].resource.attributes) for n in PROVIDERS)
    assert fast_resource == sdk_resource


def test_providers_write_the_same_chrome_trace(runs: dict[str, Run]) -> None:
    """The chrome normal forms of both providers are equal (spans, instants, process)."""
    fast, sdk = (normalize_chrome(runs[name].chrome) for name in PROVIDERS)
    assert fast["spans"].keys() == sdk["spans"].keys()
    for name in fast["spans"]:
        assert fast["spans"][name] == sdk["spans"][name], name
    assert fast["instants"] == sdk["instants"]
    assert fast["process"] == sdk["process"]


def test_providers_ship_the_same_otlp(runs: dict[str, Run]) -> None:
    """The OTLP normal forms of both providers are equal (spans, resource, scopes)."""
    fast, sdk = (normalize_otlp(runs[name].otlp) for name in PROVIDERS)
    assert fast["spans"].keys() == sdk["spans"].keys()
    for name in fast["spans"]:
        assert fast["spans"][name] == sdk["spans"][name], name
    assert fast["resources"] == sdk["resources"]


def test_capture_spans_agrees_across_providers() -> None:
    """capture_spans(provider=...) sees the same spans on both, and what the program makes."""
    forms = {}
    for name in PROVIDERS:
        with capture_spans("all", provider=name) as captured:
            asyncio.run(program(captured.provider))
            forms[name] = normalize_memory(captured.spans)
        assert_expected_spans(forms[name], open_spans_ended=False)
    assert forms["fast"] == forms["sdk"]


# ---------------------------------------------------------------------------
# Span lifecycle.


def lifecycle(provider: str) -> tuple[dict[str, dict[str, Any]], dict[str, bool]]:
    """End spans twice and call every setter after the end; the result and is_recording()."""
    recording: dict[str, bool] = {}
    with capture_spans("all", provider=provider) as captured:
        tracer = asynctrace.get_tracer()
        api = tracer.start_span("lifecycle.api", attributes={"before": 1})
        with managed_span("generation", "lifecycle.managed") as managed:
            managed.set_attribute("inside", True)
        with tracer.start_as_current_span("lifecycle.current") as current:
            current.add_event("inside")
        api.end()
        for span, name in ((api, "api"), (managed, "managed"), (current, "current")):
            recording[name] = span.is_recording()
            context = span.get_span_context()
            span.end()
            span.set_attribute("after", 1)
            span.set_attributes({"after.many": [1, 2], "before": 2})
            span.add_event("after", {"n": 1})
            span.add_link(context, {"after": True})
            span.record_exception(BatchError("after"))
            span.set_status(StatusCode.ERROR, "after the end")
            span.update_name(f"renamed-after-end-{name}")
            span.end()
            recording[f"{name}.again"] = span.is_recording()
        spans = captured.spans
    assert len(spans) == 3  # each span ended (and was exported) once
    return normalize_memory(spans), recording


@pytest.mark.parametrize("provider", PROVIDERS)
def test_calls_after_end_change_nothing(provider: str) -> None:
    """end() twice is harmless; is_recording() is false after end; later setters do nothing."""
    spans, recording = lifecycle(provider)
    assert not any(recording.values()), recording
    assert set(spans) == {"lifecycle.api", "lifecycle.managed", "lifecycle.current"}
    assert spans["lifecycle.api"]["attributes"] == {"before": 1}
    assert spans["lifecycle.managed"]["attributes"] == {"rl.bucket": "productive", "inside": True}
    assert spans["lifecycle.current"]["attributes"] == {}
    assert spans["lifecycle.current"]["events"] == [("inside", {})]
    for name, span in spans.items():
        assert span["status"] == UNSET, name
        assert span["links"] == [], name
        if name != "lifecycle.current":
            assert span["events"] == [], name


def test_lifecycle_agrees_across_providers() -> None:
    """The spans after the calls past their end are the same on both providers."""
    assert lifecycle("fast") == lifecycle("sdk")


# ---------------------------------------------------------------------------
# Details both providers must get right as the SDK does.


def _record_then_change() -> None:
    """Exceptions recorded by spans, then changed by the program: a note, a context."""
    try:
        with managed_span("generation", "conformance.noted"):
            raise BatchError("first attempt")
    except BatchError as exc:
        if hasattr(exc, "add_note"):  # Python 3.11+
            exc.add_note("retrying: attempt 2 of 3")
    saved: BatchError | None = None
    try:
        with managed_span("generation", "conformance.reraised"):
            raise BatchError("deferred")
    except BatchError as exc:
        saved = exc
    assert saved is not None
    with contextlib.suppress(BatchError):
        try:
            raise KeyError("cleanup")
        except KeyError:
            raise saved  # noqa: B904  # now its __context__ is the KeyError


@pytest.mark.parametrize("provider", PROVIDERS)
def test_stack_trace_is_the_one_at_record_time(tmp_path: Path, provider: str) -> None:
    """exception.stacktrace shows the exception as recorded, not as the program changed it later.

    The SDK formats it in record_exception; a note added (Python 3.11+) or a
    context set (re-raised while another exception is handled) afterwards
    must not show, in memory or in the chrome trace.
    """
    with configured(provider, tmp_path, exporters=["chrome", "memory"]) as telemetry:
        _record_then_change()
        assert telemetry.flush(10.0)
        assert telemetry.memory_exporter is not None
        memory = {s.name: s for s in telemetry.memory_exporter.get_finished_spans()}
        assert telemetry.trace_file is not None
        chrome = read_chrome_trace(telemetry.trace_file).events
    in_chrome = {
        e["args"]["exception.message"]: e["args"][STACKTRACE]
        for e in chrome
        if e["ph"] == "i" and e["name"] == "exception"
    }
    wrong = []
    for name, message in (
        ("conformance.noted", "first attempt"),
        ("conformance.reraised", "deferred"),
    ):
        (event,) = memory[name].events
        for where, stack in (
            ("memory", event.attributes[STACKTRACE]),
            ("chrome", in_chrome[message]),
        ):
            assert isinstance(stack, str)
            assert "_record_then_change" in stack, (name, where, stack)
            if not stack.endswith(f"{BATCH_ERROR}: {message}\n") or "KeyError" in stack:
                wrong.append((name, where, stack))
    assert wrong == []


@pytest.mark.parametrize("provider", PROVIDERS)
def test_invalid_link_is_kept_for_its_trace_state(provider: str) -> None:
    """A link to an invalid context is kept if it has attributes or a trace state, as in the SDK.

    The OpenTelemetry specification: links with an invalid SpanContext SHOULD
    be recorded as long as either the attribute set or the TraceState is
    non-empty.
    """
    stated = SpanContext(0, 0, False, trace_state=REMOTE_STATE)
    with capture_spans("all", provider=provider) as captured:
        span = asynctrace.get_tracer().start_span("conformance.links", links=[Link(stated)])
        span.add_link(stated)
        span.add_link(INVALID_SPAN_CONTEXT)  # dropped: nothing to keep it for
        span.add_link(INVALID_SPAN_CONTEXT, {"link.kind": "invalid"})
        span.end()
    (recorded,) = captured.spans
    links = [
        (
            link.context.span_id,
            tuple(link.context.trace_state.items()),
            dict(link.attributes or {}),
        )
        for link in recorded.links
    ]
    assert links == [
        (0, (("vendor", "abc"),), {}),
        (0, (("vendor", "abc"),), {}),
        (0, (), {"link.kind": "invalid"}),
    ]


@pytest.mark.parametrize("provider", PROVIDERS)
def test_span_limits_bound_the_chrome_trace(tmp_path: Path, provider: str) -> None:
    """With span limits, the chrome trace holds what the span does: its events bounded too.

    The SDK applies max_attribute_length and max_event_attributes when the
    event is added (the newest attributes are kept), so its instant events
    carry the bounded attributes, as OTLP and the memory exporter do.
    """
    limits = {"max_attribute_length": 8, "max_event_attributes": 2}
    with configured(
        provider, tmp_path, exporters=["chrome", "memory"], span_limits=limits
    ) as telemetry:
        with asynctrace.get_tracer().start_as_current_span(
            "conformance.limited", attributes={"long": "x" * 20}
        ) as span:
            span.add_event("many", {"a": "a" * 20, "b": "b" * 20, "c": "c" * 20})
        assert telemetry.flush(10.0)
        assert telemetry.memory_exporter is not None
        (recorded,) = telemetry.memory_exporter.get_finished_spans()
        assert telemetry.trace_file is not None
        chrome = read_chrome_trace(telemetry.trace_file).events
    (event,) = recorded.events
    assert dict(recorded.attributes or {}) == {"long": "x" * 8}
    assert dict(event.attributes or {}) == {"b": "b" * 8, "c": "c" * 8}
    (complete,) = [e for e in chrome if e["ph"] == "X"]
    (instant_event,) = [e for e in chrome if e["ph"] == "i"]
    assert complete["args"]["long"] == "x" * 8
    assert instant_event["args"] == {"b": "b" * 8, "c": "c" * 8, "rank": 0}


# ---------------------------------------------------------------------------
# Exceptions recorded redacted, however the span records them.

PASSWORD = "hunter2-pw"
TOKEN = "tok-0123456789"
TOLD = "s3cret-told-value"  # a secret only the caller knows (end_span(..., secrets=...))
LEAKY = f"GET http://bob:{PASSWORD}@h/x?token={TOKEN} answered {TOLD}"
LEAKY_REDACTED = f"GET http://h/x?token=REDACTED answered {TOLD}"
TOLD_REDACTED = "GET http://h/x?token=REDACTED answered REDACTED"
# Told secrets are remembered by the exception's id: kept alive, no later
# exception of these tests takes its id (and its secrets) over.
TOLD_EXCEPTIONS: list[BaseException] = []


def _raise_leaky() -> None:
    raise BatchError(LEAKY)


def _exception_forms() -> None:
    """Every way a span records an exception: escaping its block, by hand, as the current span."""
    tracer = asynctrace.get_tracer()
    with contextlib.suppress(BatchError), tracer.start_as_current_span("leaky.current"):
        _raise_leaky()
    with contextlib.suppress(BatchError), tracer.start_span("leaky.span_cm"):
        _raise_leaky()
    with contextlib.suppress(BatchError):
        span = tracer.start_span("leaky.use_span")
        with trace.use_span(
            span, end_on_exit=True, record_exception=True, set_status_on_exception=True
        ):
            _raise_leaky()
    with contextlib.suppress(BatchError), asynctrace.start_span("reward", "leaky.start_span"):
        _raise_leaky()
    with contextlib.suppress(BatchError):
        with trace.use_span(asynctrace.start_span("reward", "leaky.start_span.use"), True):
            _raise_leaky()
    with contextlib.suppress(BatchError), managed_span("reward", "leaky.managed"):
        _raise_leaky()
    with managed_span("reward", "leaky.current_span"):
        try:
            _raise_leaky()
        except BatchError as exc:
            trace.get_current_span().record_exception(exc)
    for by_hand in (
        tracer.start_span("leaky.by_hand"),
        asynctrace.start_span("reward", "leaky.by_hand.start_span"),
    ):
        try:
            _raise_leaky()
        except BatchError as exc:
            by_hand.record_exception(exc, attributes={"retry.attempt": 2})
        by_hand.set_status(StatusCode.ERROR, f"gave up: {LEAKY}")
        by_hand.end()
    described = tracer.start_span("leaky.status")
    described.set_status(Status(StatusCode.ERROR, LEAKY))
    described.end()
    told = BatchError(LEAKY)
    TOLD_EXCEPTIONS.append(told)
    asynctrace.end_span(asynctrace.start_span("reward", "leaky.told"), told, secrets=[TOLD])
    with contextlib.suppress(BatchError), tracer.start_span("leaky.remembered"):
        raise told


def _leaky(message: str, escaped: bool, **extra: Any) -> tuple[str, dict[str, Any]]:
    return _exception(BATCH_ERROR, message, escaped, **extra)


def _failed(message: str = LEAKY_REDACTED) -> tuple[str, str]:
    return ("ERROR", f"BatchError: {message}")


HANDLED = [_leaky(LEAKY_REDACTED, False, **{"retry.attempt": 2})]
# name: (events, status), stack traces left out; the same on both providers
LEAKY_EXPECTED: dict[str, tuple[list[tuple[str, dict[str, Any]]], tuple[str, str | None]]] = {
    "leaky.current": ([_leaky(LEAKY_REDACTED, False)], _failed()),
    "leaky.span_cm": ([_leaky(LEAKY_REDACTED, True)], _failed()),
    "leaky.use_span": ([_leaky(LEAKY_REDACTED, False)], _failed()),
    "leaky.start_span": ([_leaky(LEAKY_REDACTED, True)], _failed()),
    "leaky.start_span.use": ([_leaky(LEAKY_REDACTED, False)], _failed()),
    "leaky.managed": ([_leaky(LEAKY_REDACTED, True)], _failed()),
    "leaky.current_span": ([_leaky(LEAKY_REDACTED, False)], UNSET),
    "leaky.by_hand": (HANDLED, ("ERROR", f"gave up: {LEAKY_REDACTED}")),
    "leaky.by_hand.start_span": (HANDLED, ("ERROR", f"gave up: {LEAKY_REDACTED}")),
    "leaky.status": ([], ("ERROR", LEAKY_REDACTED)),
    "leaky.told": ([_leaky(TOLD_REDACTED, True)], _failed(TOLD_REDACTED)),
    "leaky.remembered": ([_leaky(TOLD_REDACTED, True)], _failed(TOLD_REDACTED)),
}


def _without_stack(attributes: Mapping[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in attributes.items() if key != STACKTRACE}


def _secrets_in(span: ReadableSpan) -> list[str]:
    """The texts of *span*'s status and event attributes that hold a secret of LEAKY."""
    texts = [span.status.description or ""] + [
        str(value) for event in span.events for value in (event.attributes or {}).values()
    ]
    return [text for text in texts if PASSWORD in text or TOKEN in text]


def redaction_run(provider: str, directory: Path) -> dict[str, Any]:
    """:func:`_exception_forms` on *provider*: each span's events and status, checked secret-free.

    No secret of the message reaches a recorded span (message, stack trace,
    status description) or the chrome trace.
    """
    with configured(provider, directory, exporters=["chrome", "memory"]) as telemetry:
        _exception_forms()
        assert telemetry.flush(10.0)
        assert telemetry.memory_exporter is not None
        memory = list(telemetry.memory_exporter.get_finished_spans())
        assert telemetry.trace_file is not None
        chrome = telemetry.trace_file.read_text()
    leaks = {span.name: _secrets_in(span) for span in memory if _secrets_in(span)}
    assert leaks == {}
    assert PASSWORD not in chrome
    assert TOKEN not in chrome
    assert TOLD_REDACTED in chrome
    return {
        name: (span["events"], span["status"]) for name, span in normalize_memory(memory).items()
    }


@pytest.mark.parametrize("provider", PROVIDERS)
def test_exceptions_are_recorded_redacted_however_the_span_records_them(
    tmp_path: Path, provider: str
) -> None:
    """``with span:``, ``use_span``, ``record_exception``/``set_status`` by hand, the current
    span: on either provider, for spans of ``get_tracer()`` and of ``start_span``, the
    exception's message, stack trace and status description are recorded redacted."""
    forms = redaction_run(provider, tmp_path)
    without_stacks = {
        name: (
            [
                (event, {k: v for k, v in attrs.items() if k != STACKTRACE})
                for event, attrs in events
            ],
            status,
        )
        for name, (events, status) in forms.items()
    }
    assert without_stacks == LEAKY_EXPECTED
    for name, (events, _) in forms.items():
        for _, attrs in events:
            stack = attrs[STACKTRACE]
            assert stack["last"] == f"{BATCH_ERROR}: {attrs['exception.message']}", name
            if name != "leaky.told":  # recorded where it was handed over, not raised
                assert "_exception_forms" in [fn for _, fn in stack["frames"]], (name, stack)


def test_providers_record_exceptions_redacted_alike(tmp_path: Path) -> None:
    """The same program records the same redacted exceptions on both providers, stacks included."""
    runs = {name: redaction_run(name, tmp_path / name) for name in PROVIDERS}
    assert runs["fast"] == runs["sdk"]


# ---------------------------------------------------------------------------
# Values at their edges: past the limits, changed after set, notes added later.


class _Items(list):  # type: ignore[type-arg]
    """A list subclass (the SDK records it as a tuple of its items at set time)."""


def edge_values(provider: str) -> dict[str, Any]:
    """Stamps of a leaf started past max_attributes, values changed after set, a later note."""
    np = pytest.importorskip("numpy")
    many = {f"metric.{i}": i for i in range(130)}
    array, items = np.zeros(2), _Items([1])
    with capture_spans("all", provider=provider) as captured:
        with iteration_scope(4):
            with managed_span("generation", "edge.many", attributes=many):
                pass
            with managed_span("generation", "edge.changed", attributes={"a": array}) as span:
                span.set_attribute("l", items)
            array[:] = 3
            items.append(2)
            span = asynctrace.get_tracer().start_span("edge.notes")
            try:
                raise BatchError("noted")
            except BatchError as exc:
                _add_note(exc, "before")
                span.record_exception(exc)
                _add_note(exc, "after")
            span.end()
        spans = {s.name: s for s in captured.spans}
    many_attrs = dict(spans["edge.many"].attributes or {})
    stack = (spans["edge.notes"].events[0].attributes or {})["exception.stacktrace"]
    return {
        "many.stamps": {k: many_attrs.get(k) for k in ("rl.bucket", "rl.iteration")},
        "many.count": (len(many_attrs), spans["edge.many"].dropped_attributes),
        "changed": _attrs(spans["edge.changed"].attributes),
        "notes": ("before" in stack, "after" in stack),
    }


NOTES = sys.version_info >= (3, 11)  # exception notes, and stack traces that show them


def _add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)`` where there are notes (3.11 on); nothing before."""
    if NOTES:
        exc.add_note(note)


def test_values_at_their_edges_agree_across_providers() -> None:
    """Stamps kept past the limit, values as at set time, notes as at record time: both alike."""
    fast, sdk = edge_values("fast"), edge_values("sdk")
    assert fast == sdk
    assert fast["many.stamps"] == {"rl.bucket": "productive", "rl.iteration": 4}
    stamps = {"rl.bucket": "productive", "rl.iteration": 4}
    assert fast["changed"] == {**stamps, "a": "[0. 0.]", "l": (1,)}
    assert fast["notes"] == ((True, False) if NOTES else (False, False))
