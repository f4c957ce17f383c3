"""``ContextThread``: a ``threading.Thread`` that runs in the context of the code that made it.

A raw ``threading.Thread`` starts with an empty context: no active span, no
scope. This one captures the caller's context as it is made and enters a
copy of it around ``run()``, whatever ``run`` resolves to.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import threading
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["ContextThread"]

_T = TypeVar("_T", bound="ContextThread")

# Inside a ContextThread's captured context: the thread whose run() entered it.
_ENTERED: contextvars.ContextVar[object] = contextvars.ContextVar(
    "asynctrace_context_thread", default=None
)


def _enter(thread: Any, run: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    _ENTERED.set(thread)  # in the fresh copy only
    return run(thread, *args, **kwargs)


def _in_captured_context(run: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap a ``run`` method so that it runs in a copy of the thread's captured context.

    The outermost ``run`` enters the context; a ``super().run()`` inside it
    (already in that context, marked by ``_ENTERED``) calls straight through,
    so changes the outer ``run`` made to the context reach the inner one. An
    object with no captured context (not made by ``ContextThread.__new__``)
    runs as it is.
    """

    @functools.wraps(run)
    def run_in_context(self: Any, *args: Any, **kwargs: Any) -> Any:
        captured = getattr(self, "_asynctrace_context", None)
        if captured is None or _ENTERED.get() is self:
            return run(self, *args, **kwargs)
        return captured.copy().run(_enter, self, run, args, kwargs)

    run_in_context._asynctrace_wrapped = True  # type: ignore[attr-defined]
    return run_in_context


class _Entered:
    """A started thread's ``run``, as its class resolves it, entered in the captured context.

    Set on the instance by :meth:`ContextThread.start`, so whatever ``run`` is
    (a plain method, one a class-based decorator made, one set on the
    instance) runs in the context; taken off again when it returns.
    """

    __slots__ = ("resolved", "thread")

    def __init__(self, thread: ContextThread, resolved: Callable[[], Any]) -> None:
        self.thread = thread
        self.resolved = resolved

    def __call__(self) -> Any:
        thread = self.thread
        try:
            if _ENTERED.get() is thread:  # entered already
                return self.resolved()
            context = thread._asynctrace_context.copy()
            return context.run(self._entered)
        finally:
            if thread.__dict__.get("run") is self:
                del thread.__dict__["run"]  # no cycle left through the instance
            self.resolved = _nothing

    def _entered(self) -> Any:
        _ENTERED.set(self.thread)  # in the fresh copy only
        return self.resolved()


def _nothing() -> None:
    return None


class ContextThread(threading.Thread):
    """A ``threading.Thread`` that runs in the context of the code that created it.

    The active span and every scope (iteration, bucket, per-prompt) are
    captured when the thread object is made (in ``__new__``, so a subclass
    whose ``__init__`` calls ``threading.Thread.__init__`` directly is
    covered) and are current inside ``run()``: the one a subclass (or a mixin
    listed before this class) defines, one a class-based decorator wraps, or
    one set on the instance before ``start()``.

    Example:
        >>> from asynctrace import iteration_scope, current_iteration
        >>> out = []
        >>> with iteration_scope(2):
        ...     t = ContextThread(target=lambda: out.append(current_iteration()))
        >>> t.start(); t.join(); out
        [2]
    """

    _asynctrace_context: contextvars.Context

    def __new__(cls: type[_T], *args: Any, **kwargs: Any) -> _T:
        self = super().__new__(cls)
        self._asynctrace_context = contextvars.copy_context()
        return self

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # The run() this class resolves to (its own, or a mixin's) gets the context when
        # called directly too, unless it is already wrapped. Only plain functions: any
        # other run is entered by start() (see _Entered).
        run = inspect.getattr_static(cls, "run", None)
        if inspect.isfunction(run) and not getattr(run, "_asynctrace_wrapped", False):
            cls.run = _in_captured_context(run)  # type: ignore[method-assign]

    def start(self) -> None:
        """Start the thread; its ``run()``, whatever it resolves to, runs in the context."""
        own = self.__dict__
        before = own.get("run", _nothing)  # a run set on the instance, if any
        entered = before if isinstance(before, _Entered) else _Entered(self, self.run)
        own["run"] = entered
        try:
            super().start()
        except BaseException:  # not started (twice, or no thread to be had): as it was
            if own.get("run") is entered and entered is not before:
                if before is _nothing:
                    del own["run"]
                else:
                    own["run"] = before
            raise

    @_in_captured_context
    def run(self) -> None:
        """Run the thread's target inside the captured context."""
        super().run()
