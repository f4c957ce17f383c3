"""``flush(timeout_s)`` and ``shutdown(timeout_s)`` refuse what is not a number of seconds.

``max(0.0, nan)`` is ``0.0``: a NaN timeout read as "do not wait" abandoned a
healthy exporter's queue at shutdown, and every later ``shutdown()`` said
``False``. A string raised a bare ``TypeError`` naming no argument.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

import asynctrace as at
from asynctrace.export import read_chrome_trace

BAD = [math.nan, "1", True, [1.0], complex(1, 0)]


def _running(tmp_path: Path) -> at.Telemetry:
    return at.configure(
        {
            "enabled": True,
            "span_groups": "all",
            "exporters": ["chrome"],
            "output_dir": str(tmp_path),
        }
    )


def _spans(tmp_path: Path) -> list[str]:
    return [e["name"] for e in read_chrome_trace(tmp_path / "traces-r0.jsonl").complete_events()]


@pytest.mark.parametrize("value", BAD, ids=repr)
def test_a_bad_shutdown_timeout_is_refused_and_nothing_is_abandoned(
    tmp_path: Path, value: Any
) -> None:
    """The call raises naming the argument; telemetry keeps running, and a later shutdown
    writes every span."""
    telemetry = _running(tmp_path)
    for i in range(300):
        with at.managed_span("generation", f"s{i}"):
            pass
    with pytest.raises(at.ConfigurationError, match=r"^timeout_s: .* is not accepted; accepted"):
        telemetry.shutdown(value)
    with pytest.raises(at.ConfigurationError, match=r"^timeout_s: "):
        at.shutdown(value)
    assert at.current_telemetry() is telemetry
    with at.managed_span("generation", "after"):
        pass
    assert telemetry.shutdown() is True
    names = _spans(tmp_path)
    assert len(names) == 301
    assert names[-1] == "after"
    assert sum(s.dropped + s.failed for s in telemetry.stats().values()) == 0


@pytest.mark.parametrize("value", BAD, ids=repr)
def test_a_bad_flush_timeout_is_refused_running_or_not(tmp_path: Path, value: Any) -> None:
    """Refused on the handle and by the module function, with telemetry on and after it."""
    telemetry = _running(tmp_path)
    with pytest.raises(at.ConfigurationError, match=r"^timeout_s: "):
        telemetry.flush(value)
    with pytest.raises(at.ConfigurationError, match=r"^timeout_s: "):
        at.flush(value)
    assert telemetry.shutdown() is True
    with pytest.raises(at.ConfigurationError, match=r"^timeout_s: "):
        at.flush(value)
    with pytest.raises(at.ConfigurationError, match=r"^timeout_s: "):
        telemetry.flush(value)


def test_negative_infinite_and_huge_timeouts_are_accepted(tmp_path: Path) -> None:
    """A negative wait waits not at all; inf and an int past a float's range as long as a
    wait can: no OverflowError."""
    telemetry = _running(tmp_path)
    with at.managed_span("generation", "one"):
        pass
    assert isinstance(telemetry.flush(-1), bool)
    assert telemetry.flush(math.inf) is True
    assert telemetry.flush(10**400) is True
    assert telemetry.shutdown(math.inf) is True
    assert _spans(tmp_path) == ["one"]
