"""Received baggage: the one-match reading of asynctrace's own header agrees with the full parser.

``decode`` reads the header ``encode`` writes for the scopes alone with one
regular-expression match; any other header goes member by member through
``parse``. Both must give the same entries, the same scope values and the
same counts for every header, near misses included.
"""

from __future__ import annotations

from collections.abc import Callable

import _fuzz
import pytest
from _budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from asynctrace import carrier_stats
from asynctrace._baggage import ScopeValues, decode, encode, parse
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

    from asynctrace import _propagation

    assert _propagation._BAGGAGE is not None  # this OpenTelemetry has the key where it reads it
    if key == "not found":
        monkeypatch.setattr(_propagation, "_BAGGAGE", None)
    base = baggage.set_baggage("kept", "1", baggage.set_baggage("k1", "old"))
    entries = {f"k{i}": str(i) for i in range(300)}
    one_by_one = base
    for name, value in entries.items():
        one_by_one = baggage.set_baggage(name, value, one_by_one)
    joined = _propagation._with_baggage(entries, base)
    assert dict(baggage.get_all(joined)) == dict(baggage.get_all(one_by_one))
    assert dict(baggage.get_all(base)) == {"k1": "old", "kept": "1"}  # the caller's is unchanged
