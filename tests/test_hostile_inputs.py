"""Fuzz targets for what comes from outside: carriers, baggage, span-group specs, config, env.

Each target feeds arbitrary input to one entry point and checks that it never
raises anything but the error it documents (``ConfigurationError`` for
configuration, nothing at all for carriers), never hangs, and that what it
accepts is well formed. Budgets: ``tests/_budget.py`` (``nox -s fuzz``).
"""

from __future__ import annotations

import contextlib
import math
import warnings
from typing import Any

import _fuzz
import pytest
from _budget import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import trace

import asynctrace as at
from asynctrace import ConfigurationError, TelemetryConfig
from asynctrace._baggage_in import decode
from asynctrace._config_env import ENV_VARS
from asynctrace._settings import resolve
from asynctrace.testing import capture_spans


def _budget(quick: int, fuzz: int) -> settings:
    """The settings of one target: *quick* examples in the suite, *fuzz* in ``nox -s fuzz``."""
    return settings(
        max_examples=examples(quick, fuzz),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow],
    )


TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"

# -- carriers: traceparent, tracestate and baggage --------------------------------

_hexes = st.text("0123456789abcdefABCDEF-", max_size=60)
_traceparents = st.one_of(
    st.just(f"00-{TRACE}-{PARENT}-01"),
    st.builds(lambda v, f: f"{v}-{TRACE}-{PARENT}-{f}", st.text(max_size=3), st.text(max_size=3)),
    _hexes,
    st.text(max_size=80),
)
_member_names = st.sampled_from(
    [
        "asynctrace.iteration",
        "asynctrace.per_prompt",
        "asynctrace.task_id",
        "asynctrace.session_id",
        "user",
        "k",
    ]
)
_member_values = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.sampled_from(["1", "0", "true", "false", "", "%20", "%zz", "i:7", "s:7", "1e9"]),
    st.text(max_size=20),
)
_members = st.builds(
    lambda n, v, p: f"{n}={v}{p}", _member_names, _member_values, st.text(max_size=6)
)
_baggages = st.one_of(
    st.lists(_members | st.text(max_size=20), max_size=6).map(",".join),
    st.text(max_size=200),
    st.just("k=" + "v" * 9000),
)
_tracestates = st.one_of(
    st.lists(
        st.builds(lambda k, v: f"{k}={v}", st.text(max_size=8), st.text(max_size=8)), max_size=40
    ).map(",".join),
    st.text(max_size=100),
)
_keys = st.sampled_from(["traceparent", "tracestate", "baggage", "TRACEPARENT", "Baggage"])
_carriers = st.one_of(
    st.fixed_dictionaries(
        {"traceparent": _traceparents},
        optional={"tracestate": _tracestates, "baggage": _baggages},
    ),
    st.dictionaries(_keys | st.text(max_size=12), _traceparents | _baggages | st.binary()),
    st.none(),
    st.lists(st.text(max_size=5), max_size=3),
)


@pytest.mark.fuzz
def test_fuzz_carriers_with_baggage_never_raise_and_set_only_well_typed_scopes() -> None:
    """Any carrier, propagate_scopes on: no exception; scopes restored have their own types."""
    with capture_spans("all", propagate_scopes=True) as captured:

        @_budget(300, 25_000)
        @given(_carriers)
        def check(carrier: Any) -> None:
            with at.remote_trace_context(carrier) as remote:
                context = trace.get_current_span().get_span_context()
                assert context.is_valid == remote.valid
                iteration = at.current_iteration()
                task = at.current_task_id()
                session = at.current_session_id()
                assert iteration is None or type(iteration) is int
                assert task is None or type(task) in (int, str)
                assert session is None or type(session) is str
                assert isinstance(at.in_per_prompt_scope(), bool)
                with at.managed_span("reward", "inside"):
                    sent = at.current_trace_carrier()
                assert all(isinstance(v, str) and v.isascii() for v in sent.values())
            assert not trace.get_current_span().get_span_context().is_valid
            captured.clear()

        _fuzz.run(check)


@pytest.mark.fuzz
@_fuzz.target
@_budget(300, 15_000)
@given(st.lists(_baggages, max_size=3))
def test_fuzz_baggage_decode(values: list[str]) -> None:
    """Received baggage values of any shape decode to str entries and typed scopes."""
    user, scopes = decode(values)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in user.items())
    assert scopes.iteration is None or type(scopes.iteration) is int
    assert scopes.per_prompt is None or type(scopes.per_prompt) is bool


@pytest.mark.fuzz
def test_fuzz_scopes_round_trip_through_a_carrier() -> None:
    """Any iteration, task and per-prompt scope comes back whole on the other side."""
    with capture_spans("all", propagate_scopes=True) as captured:

        @_budget(200, 30_000)
        @given(
            st.integers(0, 2**62),
            st.none() | st.integers(0, 2**62) | st.text(max_size=20),
            st.booleans(),
        )
        def check(iteration: int, task: int | str | None, per_prompt: bool) -> None:
            with contextlib.ExitStack() as scopes:
                scopes.enter_context(at.iteration_scope(iteration))
                if per_prompt:
                    scopes.enter_context(at.per_prompt_scope())
                if task is not None:
                    scopes.enter_context(at.task_scope(task))
                scopes.enter_context(at.umbrella_span("job", "caller"))
                carrier = at.current_trace_carrier()
            with at.remote_trace_context(carrier):
                assert at.current_iteration() == iteration
                assert at.current_task_id() == task
                assert at.in_per_prompt_scope() == per_prompt
            captured.clear()

        _fuzz.run(check)


# -- span-group specs -----------------------------------------------------------

_tokens = st.sampled_from(
    ["default", "per_step", "all", "Generation", " reward ", "per_prompt", "job", "STEP", ""]
)
_specs = st.one_of(
    st.lists(_tokens | st.text(max_size=10), max_size=8).map(",".join),
    st.text(max_size=60),
    st.lists(_tokens, max_size=4),
    st.none() | st.integers() | st.lists(st.integers(), max_size=2),
)


@pytest.mark.fuzz
@_fuzz.target
@_budget(300, 30_000)
@given(_specs)
def test_fuzz_span_group_specs(spec: Any) -> None:
    """A spec resolves to registered groups, idempotently, or fails naming what is known."""
    known = set(at.registered_span_groups())
    try:
        resolved = at.resolve_span_groups(spec)
    except ConfigurationError as exc:
        message = str(exc)
    else:
        assert resolved <= known
        assert at.resolve_span_groups(",".join(sorted(resolved)) or "") == resolved
        return
    assert "span_groups" in message or "known" in message, message


# -- configuration mappings and environment values --------------------------------

_KEYS = [f.name for f in TelemetryConfig.__dataclass_fields__.values()]
_odd_numbers = st.sampled_from(
    [0, -1, 1, 2**63, 10**30, 1e308, math.inf, -math.inf, math.nan, 0.5, True, False]
)
_odd_strings = st.sampled_from(
    ["", " ", "1", "0", "true", "yes", "off", "chrome,memory", "all", "~", "a\x00b", "\udcff"]
)
_values = st.one_of(
    _odd_numbers,
    _odd_strings,
    st.text(max_size=20),
    st.none(),
    st.lists(_odd_strings | st.text(max_size=6), max_size=3),
    st.dictionaries(st.text(max_size=8), _odd_numbers | _odd_strings, max_size=3),
)
_mappings = st.dictionaries(
    st.sampled_from(_KEYS) | st.text(max_size=10), _values, max_size=6
).map(lambda m: {**m, "exporters": ["memory"]} if "exporters" not in m else m)


def _names_a_key(message: str, names: set[str]) -> bool:
    head = message.split(":", 1)[0].strip()
    root = head.split(".", 1)[0].split("[", 1)[0]
    return head in names or root in names or head in ("telemetry", "config")


@pytest.mark.fuzz
@_fuzz.target
@_budget(300, 7_500)
@given(_mappings, st.integers(-2, 4), st.integers(-1, 4))
def test_fuzz_config_mappings(mapping: dict[str, Any], rank: int, world_size: int) -> None:
    """Any mapping: a valid configuration or a ConfigurationError naming the key; nothing else."""
    names = {*mapping, "rank", "world_size", "role", "span_groups", "max_export_batch_size"}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = TelemetryConfig.from_mapping(mapping)
            resolve(config, rank=rank, world_size=world_size, environ={})
    except ConfigurationError as exc:
        message = str(exc)
    else:
        return
    assert _names_a_key(message, names), message


_env_values = st.one_of(_odd_strings, st.text(max_size=20), _odd_numbers.map(str))
_environs = st.dictionaries(
    st.sampled_from(
        [*ENV_VARS, "OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_SCHEDULE_DELAY", "OTEL_SDK_DISABLED"]
    ),
    _env_values,
    max_size=6,
)


@pytest.mark.fuzz
@_fuzz.target
@_budget(300, 12_000)
@given(_environs)
def test_fuzz_env_values(environ: dict[str, str]) -> None:
    """Any ASYNCTRACE_* values: a configuration or a ConfigurationError naming the variable."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            config = TelemetryConfig.from_env(environ)
            resolve(config, environ=environ)
    except ConfigurationError as exc:
        message = str(exc)
    else:
        return
    named = {*environ, *ENV_VARS.values(), "span_groups", "max_export_batch_size"}
    assert _names_a_key(message, named) or any(var in message for var in environ), message


@pytest.mark.parametrize("provider", ["fast", "sdk"])
def test_group_names_made_up_per_span_keep_the_bucket_rules_bounded(provider: str) -> None:
    """In a per-prompt scope any group name passes the gate (per_prompt decides): 5,000
    names made up per span are all recorded and leave the rules lookup and the
    scope state's own cache bounded."""
    from asynctrace import _scopes, _span_start

    with capture_spans("per_prompt", provider=provider) as captured:
        with at.per_prompt_scope():
            for i in range(5_000):
                with at.managed_span(f"made-up-{i}", "leaf"):
                    pass
            state_cache = len(_scopes.SCOPES.get().cache)
    assert len(captured.by_name("leaf")) == 5_000
    assert len(_span_start._RULES) <= _span_start._MAX_RULES
    assert 0 < state_cache <= _span_start._MAX_SHAPES
