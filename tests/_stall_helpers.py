"""What the stall tests share: no watchdog left between tests, and a measurement taken again
when a loaded machine spoiled it."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from asynctrace import _stalls

T = TypeVar("T")


def watchdogs() -> list[threading.Thread]:
    """The watchdog threads alive now."""
    return [t for t in threading.enumerate() if t.name == "asynctrace-loop-watchdog"]


def no_watchdog_now() -> None:
    """Stop every monitor and wait for its watchdog thread to end."""
    _stalls.stop_all(timeout_s=10.0)
    for thread in watchdogs():
        thread.join(10.0)


def within_tries(attempt: Callable[[int], T], tries: int = 3) -> T:
    """``attempt(0)``, then again (up to *tries* in all) while it fails a check.

    CI runs four test workers on two cores: any thread, the watchdog or the
    loop, can be kept off the CPU for a few hundred milliseconds, and a stall
    is then missed or measured late. A check that fails is an assertion, or
    the unpacking of the one stall expected (``ValueError``); a defect that
    shows in every try fails the test. What must never happen even once (a
    forked child that hangs, say) fails at once, with ``pytest.fail``.
    """
    for n in range(tries - 1):
        try:
            return attempt(n)
        except (AssertionError, ValueError):
            no_watchdog_now()
    return attempt(tries - 1)


@pytest.fixture(autouse=True)
def no_watchdog_left() -> Iterator[None]:
    """Each test starts and ends with every watchdog stopped and its thread gone.

    A watchdog of an earlier test (of any file) leaves a while after its loop
    closed; the tests count watchdog threads by name.
    """
    no_watchdog_now()
    yield
    _stalls.stop_all()
