"""Scopes entered and exited by hand, in any order: each field holds the value of
the latest scope of that field still open, or, with none open, its value before."""

from __future__ import annotations

import contextvars
import itertools
import random
from typing import Any

import pytest

from asynctrace import (
    Bucket,
    bucket_scope,
    current_bucket,
    current_iteration,
    current_session_id,
    current_task_id,
    in_per_prompt_scope,
    iteration_scope,
    per_prompt_scope,
    session_scope,
    task_scope,
)
from asynctrace._scopes import SCOPES, _link


def _fields() -> dict[str, Any]:
    return {
        "iteration": current_iteration(),
        "bucket": current_bucket(),
        "per_prompt": in_per_prompt_scope(),
        "task_id": current_task_id(),
        "session_id": current_session_id(),
    }


_BASE = {
    "iteration": None,
    "bucket": None,
    "per_prompt": False,
    "task_id": None,
    "session_id": None,
}


def _make(rng: random.Random) -> tuple[str, Any]:
    """A scope of a random kind, with the field it sets."""
    kind = rng.randrange(5)
    if kind == 0:
        return "iteration", iteration_scope(rng.randrange(3))  # repeated values on purpose
    if kind == 1:
        return "bucket", bucket_scope(rng.choice([Bucket.IDLE, Bucket.OVERHEAD]))
    if kind == 2:
        return "per_prompt", per_prompt_scope()
    if kind == 3:
        return "task_id", task_scope(rng.randrange(3))
    return "session_id", session_scope()


def _expected(open_scopes: list[tuple[str, Any, Any]]) -> dict[str, Any]:
    """The model: per field, the value of the latest scope of it still open."""
    expected = dict(_BASE)
    for field, _scope, value in open_scopes:  # in entry order: later ones win
        expected[field] = value
    return expected


def _run_random_sequence(seed: int) -> None:
    rng = random.Random(seed)
    open_scopes: list[tuple[str, Any, Any]] = []
    for _ in range(60):
        if open_scopes and (len(open_scopes) >= 6 or rng.random() < 0.45):
            field, scope, _value = open_scopes.pop(rng.randrange(len(open_scopes)))
            scope.__exit__(None, None, None)
        else:
            field, scope = _make(rng)
            open_scopes.append((field, scope, scope.__enter__()))
        assert _fields() == _expected(open_scopes), (seed, [(f, v) for f, _s, v in open_scopes])
    while open_scopes:
        _field, scope, _value = open_scopes.pop(rng.randrange(len(open_scopes)))
        scope.__exit__(None, None, None)
        assert _fields() == _expected(open_scopes)
    assert _fields() == _BASE


@pytest.mark.parametrize("seed", range(200))
def test_random_entries_and_exits_match_the_latest_open_scope(seed: int) -> None:
    """Random interleavings of all five scopes, exited in random order, with repeated values."""
    contextvars.copy_context().run(_run_random_sequence, seed)


def test_pipelined_steps_each_see_their_own_iteration() -> None:
    """Step n+1's scope opens before step n's closes: each step sees its own number."""

    def run() -> list[int | None]:
        seen: list[int | None] = []
        previous = None
        for step in range(1, 50):
            scope = iteration_scope(step)
            scope.__enter__()
            if previous is not None:
                previous.__exit__(None, None, None)
            seen.append(current_iteration())
            previous = scope
        assert previous is not None
        previous.__exit__(None, None, None)
        seen.append(current_iteration())
        return seen

    assert contextvars.copy_context().run(run) == [*range(1, 50), None]


def test_a_long_pipeline_keeps_no_chain_of_finished_steps() -> None:
    """What a scope keeps to exit out of order stays as long as the open scopes."""

    def depth() -> int:
        count, state = 0, SCOPES.get()
        while (link := _link(state)) is not None:
            count, state = count + 1, link[1]
        return count

    def run() -> list[int]:
        depths = []
        previous = None
        for step in range(1000):
            scope = iteration_scope(step)
            scope.__enter__()
            if previous is not None:
                previous.__exit__(None, None, None)
            depths.append(depth())
            previous = scope
        return depths

    assert max(contextvars.copy_context().run(run)) <= 2


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_every_exit_order_of_three_scopes_leaves_nothing_behind(order: tuple[int, ...]) -> None:
    """Two iteration scopes around a bucket scope, exited in every order."""

    def run() -> list[tuple[int | None, Bucket | None]]:
        scopes: list[Any] = [
            iteration_scope(1),
            bucket_scope(Bucket.IDLE),
            iteration_scope(2),
        ]
        values = [1, Bucket.IDLE, 2]
        for scope in scopes:
            scope.__enter__()
        states = []
        remaining = [0, 1, 2]
        for index in order:
            scopes[index].__exit__(None, None, None)
            remaining.remove(index)
            iterations = [values[i] for i in remaining if i != 1]
            bucket = Bucket.IDLE if 1 in remaining else None
            expected = (iterations[-1] if iterations else None, bucket)
            assert (current_iteration(), current_bucket()) == expected
            states.append((current_iteration(), current_bucket()))
        return states

    assert contextvars.copy_context().run(run)[-1] == (None, None)


def test_equal_values_out_of_order_keep_the_open_one() -> None:
    """Two open scopes of the same value: the first exiting leaves the second's value."""

    def run() -> tuple[object, object]:
        first, second = iteration_scope(4), iteration_scope(4)
        first.__enter__()
        second.__enter__()
        first.__exit__(None, None, None)
        during = current_iteration()
        second.__exit__(None, None, None)
        return during, current_iteration()

    assert contextvars.copy_context().run(run) == (4, None)


def test_nested_blocks_inside_out_of_order_scopes_restore_exactly() -> None:
    """A ``with`` block opened after an out-of-order exit restores what it found."""

    def run() -> None:
        outer, inner = iteration_scope(1), task_scope("t")
        outer.__enter__()
        inner.__enter__()
        outer.__exit__(None, None, None)
        with iteration_scope(9):
            assert (current_iteration(), current_task_id()) == (9, "t")
        assert (current_iteration(), current_task_id()) == (None, "t")
        inner.__exit__(None, None, None)
        assert (current_iteration(), current_task_id()) == (None, None)

    contextvars.copy_context().run(run)


def test_dispatch_scopes_exited_out_of_order_each_see_their_own_per_prompt_state() -> None:
    """A dispatch scope links its entry as per_prompt_scope does: pipelined dispatches
    crossing a bucket scope leave the bucket of the one still open."""
    import asynctrace as at

    def run() -> list[tuple[bool, at.Bucket | None]]:
        seen = []
        first = at.dispatch_scope()
        first.__enter__()
        bucket = at.bucket_scope(at.Bucket.IDLE)
        bucket.__enter__()
        second = at.dispatch_scope()
        second.__enter__()
        first.__exit__(None, None, None)  # out of order: the bucket and second stay
        seen.append((at.in_per_prompt_scope(), at.current_bucket()))
        second.__exit__(None, None, None)
        seen.append((at.in_per_prompt_scope(), at.current_bucket()))
        bucket.__exit__(None, None, None)
        seen.append((at.in_per_prompt_scope(), at.current_bucket()))
        return seen

    assert contextvars.copy_context().run(run) == [
        (True, at.Bucket.IDLE),
        (False, at.Bucket.IDLE),
        (False, None),
    ]
