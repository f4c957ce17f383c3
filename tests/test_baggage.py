"""Received baggage: the one-match reading of asynctrace's own header agrees with the full parser.

``decode`` reads the header ``encode`` writes for the scopes alone with one
regular-expression match; any other header goes member by member through
``parse``. Both must give the same entries, the same scope values and the
same counts for every header, near misses included.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import _fuzz
import pytest
from _budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from asynctrace import _baggage_in, _baggage_out, carrier_stats
from asynctrace._baggage_in import ScopeValues, _property, decode, parse
from asynctrace._baggage_out import encode
from asynctrace._scopes import SCOPES, ScopeState

_INTS = st.integers(-(2**70), 2**70).map(str) | st.sampled_from(["", "0", "-0", "+1", "1e3", "07"])
_TEXT = st.text(
    st.characters(codec="ascii") | st.sampled_from("-._~%20 \t;=,é"), min_size=0, max_size=12
)
_MEMBERS = st.one_of(
    st.builds("asynctrace.iteration={}".format, _INTS),
    st.builds("asynctrace.per_prompt={}".format, st.sampled_from(["1", "0", "2", "", "true"])),
    st.builds("asynctrace.task_id={}".format, _INTS | _TEXT),
    st.builds("asynctrace.session_id={}".format, _TEXT),
    st.builds(
        "{}={}".format,
        st.sampled_from(["user", "asynctrace.other", " a", "k%21", "k%20", "+k", "%09x", "a+b"]),
        _TEXT,
    ),
    _TEXT,
)


def _parsed(
    header: str, read: Callable[[str], tuple[dict[str, str], ScopeValues]] = parse
) -> tuple[dict[str, str], tuple[object, ...], dict[str, int]]:
    """*read* (``parse`` by default) of *header*: its entries, scope values and counts."""
    before = carrier_stats()
    user, scopes = read(header)
    after = carrier_stats()
    return user, _fields(scopes), {k: after[k] - before[k] for k in before}


def _fields(scopes: ScopeValues) -> tuple[object, ...]:
    return scopes.iteration, scopes.per_prompt, scopes.task_id, scopes.session_id


@pytest.mark.fuzz
@_fuzz.target
@settings(max_examples=examples(400, 20_000), deadline=None)
@given(st.lists(_MEMBERS, max_size=5), st.sampled_from([",", ", ", ",,"]))
def test_fuzz_decode_agrees_with_the_full_parser(members: list[str], comma: str) -> None:
    """Any header built of scope members, near misses and user entries reads alike both ways."""
    header = comma.join(members)
    fast = _parsed(header, lambda text: decode([text]))
    full = _parsed(header)
    assert fast == full  # entries, scope values and counts
    assert [type(value) for value in fast[1]] == [type(value) for value in full[1]]


def test_the_header_encode_writes_comes_back_whole() -> None:
    """Every subset of the scopes, as encode() writes it, decodes to the values sent."""
    for iteration in (None, 0, 412, -(2**63)):
        for per_prompt in (False, True):
            for task in (None, 7, -3, "text id"):
                for session in (None, "0-ab12-1", "s p/a%ce"):
                    state = ScopeState(None, per_prompt, iteration, task, session)
                    token = SCOPES.set(state)
                    try:
                        header = encode({})
                    finally:
                        SCOPES.reset(token)
                    user, scopes = decode([header])
                    assert user == {}
                    assert _fields(scopes) == (
                        iteration,
                        True if per_prompt else None,
                        task,
                        session,
                    ), header


@pytest.mark.fuzz
@_fuzz.target
@settings(max_examples=examples(300, 20_000), deadline=None)
@given(st.lists(_MEMBERS, max_size=8))
def test_fuzz_plain_members_read_as_the_general_path_reads_them(members: list[str]) -> None:
    """A member read in one match (key=value, no blanks) reads as the general path reads it.

    Blanks around a member are ignored (W3C), and a member with them always
    takes the general path: the same members, padded, must give the same.
    """
    plain = _parsed(",".join(members))
    padded = _parsed(",".join(f" {m}\t" for m in members))
    assert plain == padded


def test_entries_past_the_limit_are_counted_not_read() -> None:
    """The 181st member on is skipped and counted; empty members are not members."""
    header = ",".join(f"k{i}=v" for i in range(400)) + ",, ,"
    user, _, counted = _parsed(header)
    assert list(user) == [f"k{i}" for i in range(180)]
    assert counted["baggage_entries_skipped"] == 220


@pytest.mark.parametrize(
    ("header", "kept"),
    [
        ("a=1,k=v;,b=2", {"a": "1", "b": "2"}),  # ";" with no property after it
        ("k=v;;p", {}),  # an empty property between two
        ("k=v; ", {}),
        ("k=v;p", {"k": "v;p"}),  # properties are kept in the value, as OpenTelemetry keeps them
        ("k=v; p = 1", {"k": "v; p = 1"}),
    ],
)
def test_a_semicolon_opens_a_property_that_needs_a_key(header: str, kept: dict[str, str]) -> None:
    """W3C Baggage: ``member = key OWS "=" OWS value *( OWS ";" OWS property )``, and a
    property has a key: a member with an empty one is invalid, skipped and counted."""
    user, _, counted = _parsed(header)
    assert user == kept
    assert counted["baggage_entries_skipped"] == (0 if kept.get("k") else 1)


@pytest.mark.parametrize("key", ["found", "not found"])
def test_received_entries_join_the_baggage_as_set_baggage_would_add_them(
    key: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In one step with OpenTelemetry's baggage key, else one ``set_baggage`` per entry."""
    from opentelemetry import baggage

    from asynctrace import _carriers

    assert _carriers._BAGGAGE is not None  # this OpenTelemetry has the key where it reads it
    if key == "not found":
        monkeypatch.setattr(_carriers, "_BAGGAGE", None)
    base = baggage.set_baggage("kept", "1", baggage.set_baggage("k1", "old"))
    entries = {f"k{i}": str(i) for i in range(300)}
    one_by_one = base
    for name, value in entries.items():
        one_by_one = baggage.set_baggage(name, value, one_by_one)
    joined = _carriers._with_baggage(entries, base)
    assert dict(baggage.get_all(joined)) == dict(baggage.get_all(one_by_one))
    assert dict(baggage.get_all(base)) == {"k1": "old", "kept": "1"}  # the caller's is unchanged


# The property grammar as one pattern: what ``_property`` must accept, on short text only
# (its two blank runs side by side backtrack quadratically over a long run of blanks).
_GRAMMAR = re.compile(
    r"[ \t]*[!#$%&'*+\-.^_`|~0-9A-Za-z]+[ \t]*"
    r"(?:=[ \t]*[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*)?[ \t]*"
)


@pytest.mark.fuzz
@_fuzz.target
@settings(max_examples=examples(400, 20_000), deadline=None)
@given(st.text(st.sampled_from(' \t=k-v;"\\é,%x'), max_size=12))
def test_fuzz_a_property_is_read_as_the_w3c_grammar_reads_it(text: str) -> None:
    """``OWS key OWS [ "=" OWS value ] OWS``: blanks stripped first, then matched part by
    part, accepts what the grammar's one pattern accepts."""
    assert _property(text) == (_GRAMMAR.fullmatch(text) is not None)


@pytest.mark.parametrize(
    ("member", "valid"),
    [
        ("a=b;k" + " " * 100_000 + "x", False),  # blanks between a key and what cannot follow
        ("a=b;k" + "\t " * 50_000 + "x", False),
        ("a=b;k=" + " " * 100_000 + "x", True),  # blanks after "=": a property with a value
        ("a=b;k" + " " * 100_000 + "=" + " " * 100_000 + "\x7f", False),
        ("a=b;k" + " " * 100_000 + "=" + " " * 100_000, True),
        ("a=b;" + " " * 100_000, False),  # no key
    ],
    ids=["blanks-then-key", "tabs-then-key", "blanks-then-value", "both", "empty-value", "no-key"],
)
def test_a_property_with_a_long_run_of_blanks_is_read_in_linear_time(
    member: str, valid: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run of blanks in a property is read once, however long: with the limits raised so
    that 100,000 blanks reach the check, it returns at once (a pattern that could split
    the run two ways takes minutes here) and the member is skipped or read as W3C says."""
    import time

    monkeypatch.setattr(_baggage_in, "MAX_HEADER", 10**7)
    monkeypatch.setattr(_baggage_in, "MAX_MEMBER", 10**7)
    start = time.thread_time()
    user, _, counted = _parsed(member)
    assert time.thread_time() - start < 5.0  # a hang, not a speed: linear is milliseconds
    assert user == ({"a": member[2:].rstrip(" ")} if valid else {})
    assert counted["baggage_entries_skipped"] == (0 if valid else 1)


@pytest.mark.parametrize("read", ["fast", "full"])
@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("9223372036854775807", 2**63 - 1),
        ("-9223372036854775808", -(2**63)),
        ("922337203685477580", 922337203685477580),  # 18 digits: the one-match path
        ("-000000000000000007", -7),
        ("9223372036854775808", None),  # 2**63: past what a scope takes
        ("-9223372036854775809", None),
        ("9999999999999999999", None),
        ("99999999999999999999", None),  # 20 digits
    ],
)
def test_integers_outside_int64_are_refused_and_counted(
    read: str, text: str, kept: int | None
) -> None:
    """An iteration or integer task id outside int64 (what ``iteration_scope`` refuses, and
    what no OTLP attribute holds) is not restored, and is counted; the limits are read."""
    header = f"asynctrace.iteration={text},asynctrace.task_id={text}"
    reader: Callable[[str], tuple[dict[str, str], ScopeValues]] = (
        (lambda h: decode([h])) if read == "fast" else parse
    )
    user, values, counted = _parsed(header, reader)
    assert user == {}
    assert values == (kept, None, kept, None)
    assert counted["scope_values_skipped"] == (0 if kept is not None else 2)


def test_a_remote_iteration_outside_int64_never_reaches_a_span() -> None:
    """Through a real carrier: the far side's span has no ``rl.iteration`` for it."""
    import asynctrace as at
    from asynctrace import managed_span, remote_trace_context
    from asynctrace.testing import capture_spans

    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    carrier = {"traceparent": parent, "baggage": "asynctrace.iteration=9999999999999999999"}
    before = carrier_stats()["scope_values_skipped"]
    with capture_spans("all", propagate_scopes=True) as captured:
        with remote_trace_context(carrier):
            assert at.current_iteration() is None
            with managed_span("reward", "far"):
                pass
    assert "rl.iteration" not in (captured.spans[-1].attributes or {})
    assert carrier_stats()["scope_values_skipped"] == before + 1


def _encoded(state: ScopeState, user: dict[str, object]) -> str:
    token = SCOPES.set(state)
    try:
        return encode(user)
    finally:
        SCOPES.reset(token)


def test_entries_left_out_of_sent_baggage_are_counted_and_logged_once(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What would break a W3C Baggage limit is left out, counted each time a header is made
    (a scope entry once per scope state), and logged once per process, without a value."""
    import logging

    monkeypatch.setattr(_baggage_out, "_not_sent_logged", False)
    secret = "S3CRET"
    user: dict[str, object] = {f"k{i}": "v" for i in range(200)}
    user["big"] = secret * 1000  # over 4,096 bytes
    user["padded"] = "  spaced  "
    state = ScopeState(None, False, 3, secret * 1000, None)  # a task id over 4,096 bytes
    before = carrier_stats()["baggage_entries_not_sent"]
    with caplog.at_level(logging.WARNING, logger="asynctrace"):
        sent = _encoded(state, user)
        again = _encoded(state, user)  # the scope entries are cached on the state
    assert sent == again
    members = sent.split(",")
    assert members[0] == "asynctrace.iteration=3"
    assert len(members) == 180
    # task id: once (cached); "big" twice; past the 180th (k179..k199, padded): 22 twice
    assert carrier_stats()["baggage_entries_not_sent"] == before + 1 + 2 * 23
    (record,) = [r for r in caplog.records if "not sent in baggage" in r.getMessage()]
    assert secret not in record.getMessage()
    assert "baggage_entries_not_sent" in record.getMessage()


def test_the_scope_entries_sent_keep_to_the_header_limit() -> None:
    """Scope entries that each fit but together pass 8,192 bytes: the last that would pass
    it is left out and counted, and the far side reads the rest (instead of a header it
    must drop whole)."""
    state = ScopeState(None, True, -(2**63), "t" * 4060, "s" * 4074)
    before = carrier_stats()["baggage_entries_not_sent"]
    header = _encoded(state, {})
    assert len(header) <= _baggage_out.MAX_HEADER
    assert carrier_stats()["baggage_entries_not_sent"] == before + 1
    user, values, counted = _parsed(header, lambda h: decode([h]))
    assert user == {}
    assert values == (-(2**63), True, "t" * 4060, None)
    assert not any(counted.values())


def test_a_value_s_surrounding_blanks_do_not_travel() -> None:
    """Sent as OpenTelemetry's propagator sends it, read as it reads it: the blanks
    around a value are stripped on the far side."""
    header = _encoded(ScopeState(None, False, None, None, None), {"padded": "  a b  ", "p": "+"})
    assert header == "padded=++a+b++,p=%2B"
    assert parse(header)[0] == {"padded": "a b", "p": "+"}
