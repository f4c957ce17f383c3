"""An SDK provider's span processors: asynctrace's put first and taken off again,
flushed and shut down on a helper thread bounded by a deadline."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from .._config_checks import MAX_WAIT_S as _MAX_WAIT_S  # a longer wait raises OverflowError
from .._errors import report_internal_error
from .._forksafe import reinit_at_fork
from .._own_threads import leaving_signals

__all__ = ["add_first", "flush_sdk_provider", "remove", "shutdown_sdk_provider"]

logger = logging.getLogger("asynctrace")


def _processors_of(provider: Any) -> tuple[Any, ...] | None:
    """The span processors of an SDK provider, in order; ``None`` if they cannot be read.

    The SDK keeps them in a tuple, ``_active_span_processor._span_processors``,
    replaced whole under ``_active_span_processor._lock`` (every version since 1.0).
    """
    processors = getattr(
        getattr(provider, "_active_span_processor", None), "_span_processors", None
    )
    return processors if isinstance(processors, tuple) else None


_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()))


def add_first(provider: Any, processors: list[Any]) -> None:
    """Put *processors* before those *provider* has already (the user's).

    The SDK's multi-processor calls its processors in turn and does not catch:
    one that raises in ``on_start`` or ``on_end`` stops the ones after it. Where
    the processors cannot be reached, they are added the public way, after.
    """
    multi = getattr(provider, "_active_span_processor", None)
    lock = getattr(multi, "_lock", None)
    if _processors_of(provider) is not None and isinstance(lock, _LOCK_TYPES):
        with lock:  # add_span_processor replaces the tuple under this lock too
            multi._span_processors = (*processors, *multi._span_processors)  # type: ignore[union-attr]
        return
    for processor in processors:
        provider.add_span_processor(processor)


def remove(provider: Any, processors: tuple[Any, ...]) -> None:
    """Take *processors* off *provider* again (the user's, which keeps running).

    Left on it, they would run, stopped, for every later span, and pile up
    over reconfigurations. Where the processors cannot be reached (they were
    added the public way), they stay.
    """
    multi = getattr(provider, "_active_span_processor", None)
    lock = getattr(multi, "_lock", None)
    if not processors or _processors_of(provider) is None or not isinstance(lock, _LOCK_TYPES):
        return
    ours = {id(processor) for processor in processors}
    with lock:  # add_span_processor replaces the tuple under this lock too
        multi._span_processors = tuple(  # type: ignore[union-attr]
            p
            for p in multi._span_processors  # type: ignore[union-attr]
            if id(p) not in ours
        )


def _run_within(run: Callable[[], None], name: str, timeout_s: float) -> None:
    """*run* on a daemon helper thread, waited for at most *timeout_s*.

    Where no thread can be started (Python 3.12 refuses one in an ``atexit``
    hook, where shutdown runs), *run* runs here, unbounded: better late than
    never run.
    """
    helper = threading.Thread(target=leaving_signals(run), name=name, daemon=True)
    try:
        helper.start()
    except RuntimeError:
        run()
        return
    helper.join(min(max(0.0, timeout_s), _MAX_WAIT_S))


# The flush helper still running for each provider (by id: the helper holds the provider,
# so the id is not reused while it runs). One at a time: a user's processor whose flush
# hangs keeps one thread, not one per flush().
_flushing: dict[int, threading.Thread] = {}
# Re-entrant, with its holder noted: a signal handler (or a GC finalizer) that flushes on
# the thread holding it (inside Thread.start(), which waits on an Event, where handlers
# run) must not wait for that thread, which cannot go on until the handler returns.
_flushing_lock = threading.RLock()
_flushing_holder: int | None = None  # the thread inside _flush_once's section, if any
reinit_at_fork(_flushing_lock)  # held at fork(): new in the child


def _forget_helpers() -> None:
    """In a forked child: none of the parent's helpers, nobody inside the section."""
    global _flushing_holder
    _flushing.clear()
    _flushing_holder = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_helpers)


def _flush_once(run: Callable[[], None], key: int, deadline: float) -> bool:
    """*run* on this provider's flush helper, waited for until *deadline*; ``False`` when
    it did not finish.

    While an earlier flush's helper is still running (a processor's
    ``force_flush`` hangs), no other is started: this flush waits for that one,
    within its own deadline, and then starts its own; it never stacks a second.
    A flush that interrupted one on its own thread (a signal handler's, a GC
    finalizer's) while that one looks up or starts the helper returns ``False``
    at once: the interrupted flush goes on only once it has returned.
    """
    global _flushing_holder
    me = threading.get_ident()
    while True:
        if _flushing_holder == me:
            return False  # re-entered: waiting here would wait for this very thread
        with _flushing_lock:  # re-entrant: one interrupting the lines before the note passes
            try:
                _flushing_holder = me
                running = _flushing.get(key)
                if running is not None and running.is_alive():
                    helper = None
                else:
                    running = None
                    helper = threading.Thread(
                        target=leaving_signals(_clearing(run, key)),
                        name="asynctrace-flush",
                        daemon=True,
                    )
                    _flushing[key] = helper
                    try:
                        helper.start()
                    except RuntimeError:  # no new thread in an atexit hook: run here, unbounded
                        del _flushing[key]
                        helper = None
            finally:
                _flushing_holder = None
        if running is None:
            break
        if running is threading.current_thread():
            return False  # a flush from inside the helper's own: it cannot wait for itself
        running.join(min(max(0.0, deadline - time.monotonic()), _MAX_WAIT_S))
        if running.is_alive():
            return False  # the earlier flush still hangs: this one is not done either
    if helper is None:
        run()
        return True
    helper.join(min(max(0.0, deadline - time.monotonic()), _MAX_WAIT_S))
    return not helper.is_alive()


def _clearing(run: Callable[[], None], key: int) -> Callable[[], None]:
    """*run*, then this provider's entry of :data:`_flushing` taken off (the helper's own)."""

    def helper() -> None:
        try:
            run()
        finally:
            with _flushing_lock:
                if _flushing.get(key) is threading.current_thread():
                    del _flushing[key]

    return helper


def flush_sdk_provider(provider: Any, deadline: float, skip: tuple[Any, ...] = ()) -> bool:
    """The provider's flush on a helper thread, waited for until *deadline*.

    The processors in *skip* (asynctrace's, flushed already) are left out
    when the provider's processors can be read: flushed from this helper,
    an exporter that flushes from its own ``export`` would wait for itself.
    With none left (no processor of the user's), no helper is started. At
    most one helper per provider runs at a time (:func:`_flush_once`).
    """
    left = max(0.0, deadline - time.monotonic())
    processors = _processors_of(provider)
    skipped = {id(processor) for processor in skip}
    if processors is not None and all(id(p) in skipped for p in processors):
        return True  # asynctrace's own only, flushed already
    result: list[bool] = []

    def run() -> None:
        try:
            if processors is None:
                result.append(bool(provider.force_flush(int(left * 1000))))
                return
            ok = True
            for processor in processors:
                if id(processor) in skipped:
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    ok = False
                    break
                ok = processor.force_flush(int(remaining * 1000)) is not False and ok
            result.append(ok)
        except Exception as exc:
            report_internal_error(("flush", "provider"), exc)
            result.append(False)

    return _flush_once(run, id(provider), deadline) and bool(result) and result[0]


def shutdown_sdk_provider(provider: Any, deadline: float, added: tuple[Any, ...]) -> bool:
    """``provider.shutdown()`` on a helper thread, waited for until *deadline*.

    ``False`` when it did not finish: the helper (a daemon thread) is
    abandoned with the processors still shutting down, which are named in one
    warning. What ``shutdown`` raised is raised here.
    """
    outcome: list[Exception | None] = []
    ours = {id(processor) for processor in added}
    processors = _processors_of(provider)
    others = [p for p in processors or () if id(p) not in ours]

    def run() -> None:
        try:
            provider.shutdown()
        except Exception as exc:  # a user's span processor raised in its shutdown()
            outcome.append(exc)
        else:
            outcome.append(None)

    if processors is not None and not others:  # asynctrace's own, stopped already: quick
        run()
    else:  # a user's processor answers within a moment even when the budget is spent
        _run_within(run, "asynctrace-shutdown", max(deadline - time.monotonic(), 0.05))
    if not outcome:
        logger.warning(
            "asynctrace: the tracer provider's shutdown did not finish within the shutdown "
            "timeout; abandoned with its span processors still shutting down (%s)",
            ", ".join(type(p).__name__ for p in others) or "unknown",
        )
        return False
    if outcome[0] is not None:
        raise outcome[0]
    return True
