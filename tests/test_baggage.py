"""Received baggage: the one-match reading of asynctrace's own header agrees with the full parser.

``decode`` reads the header ``encode`` writes for the scopes alone with one
regular-expression match; any other header goes member by member through
``parse``. Both must give the same entries, the same scope values and the
same counts for every header, near misses included.
"""

from __future__ import annotations

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
    st.builds("{}={}".format, st.sampled_from(["user", "asynctrace.other", " a", "k%21"]), _TEXT),
    _TEXT,
)


def _fields(scopes: ScopeValues) -> tuple[object, ...]:
    return scopes.iteration, scopes.per_prompt, scopes.task_id, scopes.session_id


@pytest.mark.fuzz
@_fuzz.target
@settings(max_examples=examples(400, 20_000), deadline=None)
@given(st.lists(_MEMBERS, max_size=5), st.sampled_from([",", ", ", ",,"]))
def test_fuzz_decode_agrees_with_the_full_parser(members: list[str], comma: str) -> None:
    """Any header built of scope members, near misses and user entries reads alike both ways."""
    header = comma.join(members)
    before = carrier_stats()
    user, scopes = decode([header])
    counted = carrier_stats()
    full_user, full_scopes = parse(header)
    after = carrier_stats()
    assert user == full_user
    assert _fields(scopes) == _fields(full_scopes)
    assert all(
        type(a) is type(b) for a, b in zip(_fields(scopes), _fields(full_scopes), strict=True)
    )
    # what decode counted is what parse counts for the same header
    assert {k: counted[k] - before[k] for k in before} == {
        k: after[k] - counted[k] for k in before
    }


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
