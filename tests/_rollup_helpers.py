"""Trace events for the rollup tests, and a clean set of step callbacks around each test."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

import asynctrace as at

TRACE = "0" * 31 + "1"


def span_event(name: str, sid: int, parent: int | None, ts: Any, dur: Any, **args: Any) -> Any:
    """A complete ("X") trace event of span *sid* under *parent* (None: a root)."""
    fields: dict[str, Any] = {"trace_id": TRACE, "span_id": f"{sid:016x}", **args}
    if parent is not None:
        fields["parent_span_id"] = f"{parent:016x}"
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "args": fields}


@pytest.fixture(autouse=True)
def no_step_callbacks() -> Iterator[None]:
    """The step goodput callbacks a test registered are removed after it."""
    yield
    for fn in at._goodput.callbacks():
        at.remove_step_goodput(fn)
