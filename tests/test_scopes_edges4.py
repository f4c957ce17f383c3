"""Scope, wait and decorator edges: saved poll methods, task-id range, decoration checks.

A ``PollWait.poll`` saved in a local counts on one wait (before or after its
first call, and on the next wait after ``end()``); ``task_scope`` refuses
integers a 64-bit attribute cannot hold; ``trace_fn`` refuses classes, group
names not in normal form and attributes OpenTelemetry would refuse; a wait's
category attribute is its own; an efficiency-bucket pattern can only end in
``/*``; a group's description is a str; built-ins get their arguments as given.
"""

from __future__ import annotations

import contextlib
import enum
import functools
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

import asynctrace as at
from asynctrace import Bucket, ConfigurationError, trace_fn, umbrella_trace_fn
from asynctrace.testing import capture_spans

_WAIT = "rl.idle.buffer_starvation"


def _waits(captured: Any) -> list[tuple[Any, Any]]:
    return [
        (s.attributes.get("rl.idle.polls"), s.attributes.get("asynctrace.truncated"))
        for s in captured.by_name(_WAIT)
    ]


# --- PollWait.poll saved in a local -------------------------------------------------


def test_a_poll_saved_before_the_first_call_makes_one_span() -> None:
    """``poll = wait.poll`` before polling: one span with every poll, none left open."""
    with capture_spans("all") as captured:
        wait = at.start_efficiency_span("idle/buffer_starvation")
        poll = wait.poll
        counts = [poll() for _ in range(1000)]
        assert counts[:3] == [1, 2, 3]
        assert counts[-1] == 1000
        assert wait.polls == 1000
        wait.end()
        assert wait.polls == 0
    assert _waits(captured) == [(1000, None)]


def test_a_saved_poll_counts_on_the_next_wait_after_end() -> None:
    """Saved after the first call, the same poll starts and counts the reused wait's next wait."""
    with capture_spans("all") as captured:
        wait = at.start_efficiency_span("idle/buffer_starvation")
        wait.poll()
        poll = wait.poll
        for _ in range(9):
            poll()
        wait.end()
        wait.end()  # a second end, with no poll since: nothing
        assert [poll() for _ in range(50)][-1] == 50
        wait.end()
        with wait:  # the context manager, polled through the attribute
            wait.poll()
    assert _waits(captured) == [(10, None), (50, None), (1, None)]


# --- task_scope: the 64-bit range ---------------------------------------------------


try:
    import numpy as np
except ImportError:  # not in every test session: its cases are left out there
    np = None
_NUMPY_BAD = [] if np is None else [np.uint64(2**64 - 1)]
_NUMPY_GOOD = [] if np is None else [(np.int64(5), 5)]
_NUMPY_ATTRIBUTE = (
    [] if np is None else [({"ids": np.int64(3)}, "'ids' has a value of type int64")]
)


class _Task(enum.IntEnum):
    FIRST = 7


@pytest.mark.parametrize("bad", [2**63, -(2**63) - 1, -(2**70), *_NUMPY_BAD])
def test_task_scope_refuses_ints_outside_64_bits(bad: Any) -> None:
    """An id no attribute (nor the baggage carrier) can hold fails at the scope, naming it."""
    with pytest.raises(ConfigurationError, match=r"task_scope\(task_id\)") as info:
        at.task_scope(bad)
    assert repr(bad) in str(info.value)
    assert "2**63 - 1" in str(info.value)


@pytest.mark.parametrize(
    ("task_id", "stamped"),
    [
        (2**63 - 1, 2**63 - 1),
        (-(2**63), -(2**63)),
        (2**40, 2**40),
        *_NUMPY_GOOD,
        (_Task.FIRST, 7),
        ("item-3", "item-3"),
    ],
)
def test_task_ids_in_range_are_stamped_and_encode(task_id: Any, stamped: Any) -> None:
    """The range's ends, numpy ints and IntEnum members (plain ints) stamp and encode to OTLP."""
    with capture_spans() as captured:
        with at.task_scope(task_id), at.managed_span("reward", "r"):
            pass
    span = captured.spans[0]
    value = span.attributes["rl.task_id"]
    assert value == stamped
    assert type(value) is type(stamped)
    encode_spans([span]).SerializeToString()


# --- decoration checks --------------------------------------------------------------


@pytest.mark.parametrize("decorator", [trace_fn, umbrella_trace_fn])
def test_decorating_a_class_is_refused(decorator: Any) -> None:
    """A class would be replaced by a function: refused, pointing at __init__ or a factory."""

    class Model:
        def __init__(self, n: int) -> None:
            self.n = n

    with pytest.raises(ConfigurationError, match=r"'.*Model' is a class.*__init__"):
        decorator("reward")(Model)

    class Traced:  # decorating __init__ keeps the class a class
        @decorator("reward", "init")
        def __init__(self, n: int) -> None:
            self.n = n

    with capture_spans() as captured:
        made = Traced(3)

    assert isinstance(made, Traced)
    assert captured.names() == ["init"]


@pytest.mark.parametrize("group", ["Reward", " reward", "reward ", "REWARD"])
@pytest.mark.parametrize("decorator", [trace_fn, umbrella_trace_fn])
def test_a_group_name_not_in_normal_form_is_refused(group: str, decorator: Any) -> None:
    """The span helpers compare names exactly: a decorator refuses what registration refuses."""
    with pytest.raises(ConfigurationError, match=r"not in normal form; use 'reward'") as info:
        decorator(group)
    assert repr(group) in str(info.value)


@pytest.mark.parametrize(
    ("attributes", "named"),
    [
        ({"": 1}, "''"),
        ({"cfg": object()}, "'cfg' has a value of type object"),
        ({"cfg": {"a": 1}}, "'cfg' has a value of type dict"),
        *_NUMPY_ATTRIBUTE,
        ({"mix": [1, "a"]}, "'mix' has a list of int, str"),
        ({"mix": [True, 1]}, "'mix' has a list of bool, int"),
        ({"nested": [[1]]}, "'nested' has a list of list"),
    ],
)
@pytest.mark.parametrize("decorator", [trace_fn, umbrella_trace_fn])
def test_attributes_opentelemetry_refuses_fail_at_decoration(
    attributes: dict[str, Any], named: str, decorator: Any
) -> None:
    """Empty keys and values that are no attribute value fail once, naming key and type."""
    with pytest.raises(ConfigurationError, match=r"\(attributes\): ") as info:
        decorator("reward", attributes=attributes)
    assert named in str(info.value)


def test_valid_attributes_record_without_warnings(caplog: pytest.LogCaptureFixture) -> None:
    """Scalars and homogeneous sequences (None allowed among them) record as given, silently."""
    attributes = {"s": "x", "b": True, "i": 3, "f": 0.5, "t": ("a", "b"), "l": [1, None, 2]}
    traced = trace_fn("reward", "scored", attributes=attributes)(lambda: 1)
    with caplog.at_level(logging.WARNING), capture_spans() as captured:
        for _ in range(3):
            traced()
    recorded = dict(captured.spans[0].attributes)
    assert {key: recorded[key] for key in attributes} == {
        **attributes,
        "t": ("a", "b"),
        "l": (1, None, 2),
    }
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


@pytest.mark.parametrize("enabled", [True, False])
def test_a_builtin_gets_its_arguments_as_given(enabled: bool) -> None:
    """A partial of a C callable is not passed its text signature's defaults (``imag=0``)."""
    traced = trace_fn("reward", "parse")(functools.partial(complex))
    with capture_spans("all" if enabled else "") as captured:
        assert traced("1+2j") == 1 + 2j
        assert traced(1, 2) == 1 + 2j
    assert captured.names() == (["parse", "parse"] if enabled else [])


# --- waits: category attribute, bucket patterns ------------------------------------


def test_the_category_attribute_is_the_waits_own() -> None:
    """A caller's ``rl.efficiency.category`` cannot contradict the name and bucket."""
    fake = {"rl.efficiency.category": "wasted/x", "why": "weights"}
    with capture_spans() as captured:
        with at.efficiency_span("idle/refit_bubble", attributes=fake):
            pass
        wait = at.start_efficiency_span("idle/buffer_starvation", attributes=fake)
        wait.poll()
        wait.end()
    for span, category in zip(
        captured.spans, ["idle/refit_bubble", "idle/buffer_starvation"], strict=True
    ):
        assert span.attributes["rl.efficiency.category"] == category
        assert span.attributes["rl.bucket"] == "idle"
        assert span.attributes["why"] == "weights"


@pytest.mark.parametrize("pattern", ["stall*", "*", "gpu/*/wait", "stall/**", "*/wait"])
def test_a_bucket_pattern_other_than_a_trailing_slash_star_is_refused(pattern: str) -> None:
    """A '*' anywhere but a trailing '/*' would be an exact key nothing matches."""
    with pytest.raises(ConfigurationError, match=r"set_efficiency_bucket\(category\)") as info:
        at.set_efficiency_bucket(pattern, Bucket.WASTED)
    assert repr(pattern) in str(info.value)
    assert "'/*'" in str(info.value)


# --- group descriptions -------------------------------------------------------------


@pytest.mark.parametrize("description", [None, 3, b"bytes"])
def test_a_group_description_must_be_a_str(description: Any) -> None:
    """A description ``asynctrace groups`` could not print is refused, naming the group."""
    group = at.SpanGroup("edges4_described", Bucket.OVERHEAD, description=description)
    with pytest.raises(ConfigurationError, match=r"group 'edges4_described': description="):
        at.register_span_groups("edges4", [group])
    assert "edges4_described" not in at.registered_span_groups()


def test_groups_import_reports_a_bad_description_in_one_line(tmp_path: Path) -> None:
    """``asynctrace groups --import`` says what is wrong rather than crash in the table."""
    (tmp_path / "edges4_desc.py").write_text(
        "import asynctrace as at\n"
        "at.register_span_groups('mylib', [at.SpanGroup('tokenize', at.Bucket.OVERHEAD,"
        " description=None)])\n"
    )
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    done = subprocess.run(
        [sys.executable, "-m", "asynctrace", "groups", "--import", "edges4_desc"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    assert done.returncode == 2, done.stdout
    assert "Traceback" not in done.stderr, done.stderr
    assert "ConfigurationError" in done.stderr
    assert "description=None" in done.stderr


def test_a_bucket_scope_gives_no_bucket_to_a_span_of_the_efficiency_group() -> None:
    """A span of the efficiency group with no category (``trace_fn("efficiency")``) has no
    bucket, inside a bucket scope too: no caller makes a wait productive."""
    from asynctrace import Bucket, bucket_scope, trace_fn
    from asynctrace.testing import capture_spans

    @trace_fn("efficiency")
    def waits() -> None:
        pass

    with capture_spans("all") as captured:
        waits()
        with bucket_scope(Bucket.PRODUCTIVE):
            waits()
    assert [dict(s.attributes or {}).get("rl.bucket") for s in captured.spans] == [None, None]


# --- PollWait: a BaseException in the span start, and two threads ---------------------


def test_a_keyboard_interrupt_in_the_first_poll_leaves_the_poller_usable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Ctrl-C landing while the first poll opens the span propagates from that poll
    alone: a saved poll and wait.poll both go on, and the waits are recorded."""
    import asynctrace._poll_wait as eff

    real = eff._start_wait
    calls: list[str] = []

    def interrupted_once(category: str, attributes: Any) -> Any:
        calls.append(category)
        if len(calls) == 1:
            raise KeyboardInterrupt
        return real(category, attributes)

    monkeypatch.setattr(eff, "_start_wait", interrupted_once)
    with capture_spans("all") as captured:
        wait = at.start_efficiency_span("idle/buffer_starvation")
        poll = wait.poll
        with pytest.raises(KeyboardInterrupt):
            poll()
        assert wait.polls == 0  # no wait opened
        assert poll() == 1
        assert wait.poll() == 2
        wait.end()
        assert poll() == 1  # the saved poll opens the next wait
        wait.end()

        def in_a_generator() -> Any:
            yield poll()  # a dead poller would be a RuntimeError here

        assert list(in_a_generator()) == [1]
        wait.end()
    assert _waits(captured) == [(2, None), (1, None), (1, None)]


def test_two_threads_first_polls_raise_nothing_and_share_the_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A second thread polling while the first opens the span gets a count, not
    ValueError; both count on one wait, and the poller goes on."""
    import threading

    import asynctrace._poll_wait as eff

    real = eff._start_wait
    inside, second_done = threading.Event(), threading.Event()

    def slow_start(category: str, attributes: Any) -> Any:
        if not inside.is_set():
            inside.set()
            second_done.wait(10)  # the second thread's poll happens now
        return real(category, attributes)

    monkeypatch.setattr(eff, "_start_wait", slow_start)
    with capture_spans("all") as captured:
        wait = at.start_efficiency_span("idle/buffer_starvation")
        results: dict[str, Any] = {}

        def first() -> None:
            try:
                results["first"] = wait.poll()
            except BaseException as exc:  # what the caller would see
                results["first"] = exc

        thread = threading.Thread(target=first)
        thread.start()
        assert inside.wait(10)
        try:
            results["second"] = wait.poll()
        except BaseException as exc:
            results["second"] = exc
        second_done.set()
        thread.join(10)
        assert results == {"second": 1, "first": 2}
        assert wait.poll() == 3
        wait.end()
        assert wait.poll() == 1
        wait.end()
    assert _waits(captured) == [(3, None), (1, None)]


@pytest.mark.parametrize("category", ["gpu*wait", "idle/*", "*", "idle/gpu*"])
def test_a_category_with_a_star_is_refused_by_spans_too(category: str) -> None:
    """A '*' is no part of a category: the span calls refuse it (a no-op, or the
    ConfigurationError under strict mode) as set_efficiency_bucket does, naming it."""
    with pytest.raises(ConfigurationError, match=r"efficiency category: ") as info:
        at.efficiency_bucket(category)
    assert repr(category) in str(info.value)
    assert "no '*'" in str(info.value)
    with pytest.raises(ConfigurationError, match=r"set_efficiency_bucket\(category\)"):
        at.set_efficiency_bucket(category.replace("/*", "/x*"), Bucket.IDLE)
    with capture_spans("all") as captured:  # reported (raised in strict mode), no span
        with contextlib.suppress(ConfigurationError), at.efficiency_span(category):
            pass
        with contextlib.suppress(ConfigurationError):
            wait = at.start_efficiency_span(category)
            wait.poll()
            wait.end()
    assert captured.spans == []


def test_a_prefix_pattern_is_still_accepted() -> None:
    at.set_efficiency_bucket("stall4/*", Bucket.IDLE)
    try:
        assert at.efficiency_bucket("stall4/disk") is Bucket.IDLE
    finally:
        at.set_efficiency_bucket("stall4/*", None)
