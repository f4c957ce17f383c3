"""Pickles made by an earlier release still load: the names they refer to are kept."""

from __future__ import annotations

import pickle

import pytest

from asynctrace import _group_types, _scope_snapshot, _session_phase


@pytest.mark.parametrize(
    ("module", "name", "now"),
    [
        ("asynctrace._sessions", "_fresh_phase", _session_phase._fresh_phase),
        ("asynctrace._groups", "Bucket", _group_types.Bucket),
        ("asynctrace._groups", "SpanGroup", _group_types.SpanGroup),
        ("asynctrace._threads", "_ScopeSnapshot", _scope_snapshot.ScopeSnapshot),
        ("asynctrace._threads", "_run_in_snapshot", _scope_snapshot.run_in_snapshot),
        ("asynctrace._threads", "_run_in_snapshot_kw", _scope_snapshot.run_in_snapshot_kw),
    ],
)
def test_an_earlier_releases_pickled_name_loads(module: str, name: str, now: object) -> None:
    """A phase copy or a process pool's task refers to its function or class by module and
    name (pickle's GLOBAL): the earlier release's names load as today's objects."""
    reference = b"c" + module.encode() + b"\n" + name.encode() + b"\n."
    assert pickle.loads(reference) is now
