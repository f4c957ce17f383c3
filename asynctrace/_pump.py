"""Helpers for what every rollout pump does: per-dispatch umbrellas and starved polls."""

from __future__ import annotations

import asyncio
import inspect
import math
import numbers
import time
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager, nullcontext
from contextvars import Token
from types import TracebackType
from typing import Any

import anyio

from ._backend import asyncio_loop
from ._builtin_groups import EFFICIENCY as EFFICIENCY_GROUP
from ._builtin_groups import PER_PROMPT
from ._cm import DONE, Done, SyncAndAsync
from ._efficiency import gate_open as _gate_open  # (under the names the wait paths read)
from ._efficiency_table import lookup as _lookup
from ._efficiency_table import validate_category as _validate_category
from ._errors import ConfigurationError, report_internal_error
from ._poll_wait import start_efficiency_span
from ._scopes import _INT64_MAX, _INT64_MIN, SCOPES, ScopeState, check_step, leave
from ._semconv import RL_EFFICIENCY_CATEGORY, RL_IDLE_POLLS
from ._span_context import finish
from ._span_noop import NOOP_CM
from ._span_rules import EFFICIENCY, Attributes, named
from ._span_start import start
from ._spans import umbrella_span
from ._state import GATE

__all__ = ["dispatch_scope", "wait_until"]

RL_ATTEMPT = "rl.rollout.attempt"
RL_TARGET_STEP = "rl.target_step"


class dispatch_scope(SyncAndAsync[Any]):
    """One dispatch attempt of a per-prompt rollout: a per-prompt scope plus its umbrella.

    Enters :class:`per_prompt_scope` (so everything inside is gated on
    ``per_prompt`` and unbucketed: dispatches overlap) and opens an umbrella span
    carrying ``rl.rollout.attempt`` (0 for a first try, > 0 for a retry whose
    earlier tokens were discarded) and, when given, ``rl.target_step`` (the
    training step the rollout is generated for; pumps run on their own clock,
    so they carry this instead of ``rl.iteration``: an enclosing
    :class:`iteration_scope` does not reach inside). ``with`` and ``async with``;
    yields the span.

    Example:
        >>> async def dispatch(prompt, attempt, step):
        ...     async with dispatch_scope(attempt=attempt, target_step=step):
        ...         ...  # generate, score, push
    """

    __slots__ = (
        "_attempt",
        "_attributes",
        "_cleared",
        "_name",
        "_span",
        "_state",
        "_target",
        "_token",
    )

    def __init__(
        self,
        name: str = "rl.rollout.dispatch",
        *,
        attempt: int = 0,
        target_step: int | None = None,
        attributes: Attributes | None = None,
    ) -> None:
        # A plain int in range takes no call; anything else is checked (and converted).
        if attempt.__class__ is not int or not 0 <= attempt <= _INT64_MAX:
            attempt = check_step(attempt, "dispatch_scope(attempt)", least=0)
        if target_step is not None and (
            target_step.__class__ is not int or not _INT64_MIN <= target_step <= _INT64_MAX
        ):
            target_step = check_step(target_step, "dispatch_scope(target_step)")
        self._name = name
        self._attempt = attempt
        self._target = target_step
        self._attributes = attributes
        self._token: Token[ScopeState] | None = None
        self._state: ScopeState | None = None
        # The entry that cleared an enclosing iteration (token, state), if there was one.
        self._cleared: tuple[Token[ScopeState], ScopeState] | None = None
        # The umbrella is made at each entry: the gate is read then, and an exited
        # scope can be entered again.
        self._span: AbstractContextManager[Any] = NOOP_CM

    def __enter__(self) -> Any:
        # per_prompt_scope's entry, inline (this runs once per dispatch)
        if self._token is not None:
            raise RuntimeError("dispatch_scope is already entered")
        under = SCOPES.get()
        if under.iteration is not None:
            # No iteration inside: a pump runs on its own clock, and the dispatch carries
            # the target step instead. Cleared as an entry of its own, so that scopes
            # exited out of order (see _scopes.leave) put back None, not the step.
            cleared = ScopeState(
                under.bucket, under.per_prompt, None, under.task_id, under.session_id
            )
            cleared._under_iteration = under
            self._cleared = (SCOPES.set(cleared), cleared)
            under = cleared
        self._state = state = ScopeState(under.bucket, True, None, under.task_id, under.session_id)
        state._under_per_prompt = under  # see _scopes.leave: an exit out of order
        self._token = SCOPES.set(state)
        try:
            self._span = span = self._umbrella() if PER_PROMPT in GATE.enabled else NOOP_CM
            return span.__enter__()
        except BaseException:
            self._leave()
            raise

    def _umbrella(self) -> AbstractContextManager[Any]:
        """The umbrella of an entry with ``per_prompt`` on; untraced if its attributes are bad."""
        try:
            attrs: dict[str, Any] = dict(self._attributes) if self._attributes else {}
        except Exception as exc:  # not a mapping: reported once, as the span helpers do
            report_internal_error(("start", PER_PROMPT), exc, named(self._name))
            return NOOP_CM
        attrs[RL_ATTEMPT] = self._attempt
        if self._target is not None:
            attrs[RL_TARGET_STEP] = self._target
        return umbrella_span(PER_PROMPT, self._name, attributes=attrs)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Done:
        span, self._span = self._span, NOOP_CM
        try:
            span.__exit__(exc_type, exc, tb)
        finally:
            self._leave()
        return DONE

    __aexit__ = __exit__  # type: ignore[assignment]  # DONE: awaited, it finishes at once

    def _leave(self) -> None:
        token, self._token = self._token, None
        cleared, self._cleared = self._cleared, None
        try:
            if token is not None and self._state is not None:
                leave("per_prompt", token, self._state)
        finally:
            if cleared is not None:
                leave("iteration", *cleared)


def _is_real(value: object) -> bool:
    """A real number that is not a bool (``True`` seconds is a mistake, not 1 s)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _sleep_here() -> Callable[[float], Awaitable[None]]:
    """The calling task's sleep: asyncio's own on an asyncio (or uvloop) loop, else anyio's.

    anyio's looks up the backend at every call, about 1.5 us a poll (3.11).
    A trio task that runs as a guest of an asyncio loop gets anyio's.
    """
    return asyncio.sleep if asyncio_loop() is not None else anyio.sleep


def _record_cut_first_check(category: str, started_ns: int, exc: BaseException) -> None:
    """The wait of a first check that the timeout cut short: one span from that check's
    start, with one poll, ended with ERROR (as a wait that times out later ends)."""
    if not _gate_open():
        return
    try:
        name, bucket = _lookup(category)
        attrs: Attributes = {RL_EFFICIENCY_CATEGORY: category, RL_IDLE_POLLS: 1}
        span = start(name, EFFICIENCY_GROUP, EFFICIENCY, attrs, bucket, started_ns)
    except Exception as err:  # never raise on the span path
        report_internal_error(("wait_until",), err)
        return
    if span is not None:
        finish(span, type(exc), exc)


async def wait_until(
    ready: Callable[[], bool | Awaitable[bool]],
    *,
    interval_s: float = 0.005,
    category: str = "idle/buffer_starvation",
    timeout_s: float | None = None,
) -> int:
    """Poll *ready* every *interval_s* until it is true; one coalesced wait span.

    Returns at once (and records nothing) if *ready* is already true; otherwise
    every starved poll is counted on one :class:`PollWait` span of *category*
    (``rl.idle.polls``), ended when the wait ends. A *timeout_s* that passes
    during the first check (an async predicate) records the wait too: one
    span from that check's start, with one poll, ended with ERROR. Works on
    asyncio, uvloop and trio. Returns the number of starved polls, whether
    telemetry is on or off.
    *timeout_s* counts on the event loop's clock (trio's ``MockClock`` too).

    Raises:
        ConfigurationError: *interval_s*, *timeout_s* or *category* is not
            one that is accepted, whether telemetry is on or off.
        TimeoutError: *timeout_s* passed before *ready* became true (the wait
            span ends with ERROR).

    Example:
        >>> async def next_batch(buffer, size):
        ...     await wait_until(lambda: len(buffer) >= size)
        ...     return [buffer.pop() for _ in range(size)]
    """
    # NaN fails both tests: a timer of NaN seconds fires at once, a busy wait. An
    # infinite interval would never poll again.
    if not _is_real(interval_s) or not 0 < interval_s < math.inf:
        raise ConfigurationError(
            f"wait_until(interval_s): expected a finite number of seconds > 0, got {interval_s!r}"
        )
    if timeout_s is not None and (not _is_real(timeout_s) or not timeout_s >= 0):
        raise ConfigurationError(
            f"wait_until(timeout_s): expected a number of seconds >= 0 or None, got {timeout_s!r}"
        )
    _validate_category(category, "wait_until(category)")

    async def check() -> bool:
        result = ready()
        if result is True or result is False:  # the common case: a plain predicate
            return result
        if inspect.isawaitable(result):
            result = await result
        return bool(result)

    # Without a timeout there is nothing to cancel: no cancel scope (it costs a task
    # hook per poll on asyncio). With one, the first check is timed too (an async
    # predicate may take its time), and the wait gets what is left of the same
    # deadline, on the same (the backend's) clock.
    if timeout_s is None:
        if await check():
            return 0
        timeout: AbstractContextManager[object] = nullcontext()
    else:
        started_ns = time.time_ns()  # the span's clock, should the timeout cut this check
        try:
            with anyio.fail_after(timeout_s) as first:
                if await check():
                    return 0
        except TimeoutError as exc:
            if first.cancelled_caught:  # the timeout's, not one the predicate raised
                _record_cut_first_check(category, started_ns, exc)
            raise
        timeout = anyio.fail_after(max(0.0, first.deadline - anyio.current_time()))
    sleep = _sleep_here()
    # The count is the loop's own: the span's count (0 when the wait is not
    # recorded) must not change what the caller sees.
    polls = 1
    with start_efficiency_span(category) as wait:
        wait.poll()
        with timeout:  # inside the span: a timeout ends it as an error
            while True:
                await sleep(interval_s)
                if await check():
                    return polls
                polls += 1
                wait.poll()
