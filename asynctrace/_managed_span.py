"""``managed_span``: a leaf span of a group, the hot path, in one object.

No generator frame and no context-manager layers: entering starts and
attaches, leaving detaches, records an escaping exception and ends.
"""

from __future__ import annotations

import inspect
import logging
import sys
from types import TracebackType
from typing import Any, Final

from opentelemetry.trace import (
    INVALID_SPAN_CONTEXT,
    NonRecordingSpan,
    Span,
    SpanContext,
    TraceFlags,
)

from . import _span_start
from ._cm import SyncAndAsync
from ._errors import first_report, is_strict, report_internal_error
from ._fast import FastSpan, FastTracer
from ._fast._span import SPAN_TYPES
from ._group_types import Bucket
from ._live_span import LiveSpan, _live
from ._profiling import _PROFILER, ProfiledSpan
from ._scopes import SCOPES
from ._semconv import RL_ITERATION
from ._span_context import (
    _CONTEXT_VAR,
    _SPAN_KEY,
    _Context,
    mark_exit,
)
from ._span_noop import AMBIENT_SPAN, NOOP_CM, NoopSpanCM, Reentered, mark_refused, take_refused
from ._span_rules import (
    LEAF,
    PER_PROMPT_GROUP,
    Attributes,
    bad_group,
    named,
    site,
)
from ._span_start import _DONE, _new, _time_ns, span_attributes
from ._state import GATE

__all__ = ["ManagedSpan", "exited_elsewhere", "managed_span"]

_LOG = logging.getLogger("asynctrace")


class ManagedSpan(FastSpan, SyncAndAsync[Span]):
    """A fast-provider span of :func:`managed_span` / :func:`~asynctrace.umbrella_span`.

    The object is both the context manager and (once entered, if sampled) the
    span: ``__enter__`` starts it in place, makes it current and returns it;
    ``__exit__`` detaches it and ends it. One object per span instead of two.
    Like the spans it stands for, it is entered once; entering it again yields
    the shared disabled span.
    """

    __slots__ = ("_bucket", "_group", "_other", "_shape", "_token")
    _bucket: Bucket | None
    _group: str
    _other: Any  # a LiveSpan (reconfigured since), the non-recording span, or None
    _shape: int
    _token: Any

    def __enter__(self) -> Span:
        if self._token is not None:
            return self._refuse()
        try:
            tracer = GATE.tracer
            var = _CONTEXT_VAR  # not None: _managed makes ManagedSpan objects only then
            if tracer.__class__ is not FastTracer or var is None:  # reconfigured since
                self._token = _DONE
                live = self._other = _live(
                    self._group, self._name, self._shape, self._attributes, self._bucket
                )
                return live.__enter__()
            group, shape, user = self._group, self._shape, self._attributes
            state = SCOPES.get()  # span_attributes' cached case, inline
            entry = state.cache.get(group if shape == LEAF else (shape, group))
            if (
                entry is None
                or entry[2] != _span_start._generation
                or self._bucket is not None
                or user
            ):
                attrs = span_attributes(group, shape, user, self._bucket)
            else:
                attrs = entry[0].copy()
            context = var.get()  # the parent comes from it, and the new context copies it
            span = tracer.start_owned(self._name, context, attrs, self)
            if span is not self:
                self._other = span  # not sampled: a non-recording span carries the context on
            values = context.copy()  # set_span_in_context, without its layers
            values[_SPAN_KEY] = span
            self._token = var.set(_Context(values))
            return span
        except Exception as exc:
            report_internal_error(("start", site(self._group)), exc, named(self._name))
            return AMBIENT_SPAN

    def _refuse(self) -> Span:
        """A second ``with`` on this object: the disabled span, and its exit will do nothing."""
        report_internal_error(
            ("reenter", site(self._group)),
            RuntimeError("this managed_span() was entered already; make a new one"),
        )
        # Nested on itself (its exit comes before ours): open, or open as a LiveSpan
        # (reconfigured since: _token is _DONE, _other the LiveSpan until the exit).
        if self._token is not _DONE or self._other.__class__ in (LiveSpan, Reentered):
            other = self._other
            if other.__class__ is Reentered:
                other.count += 1
            else:
                self._other = Reentered(other)
            mark_refused(self)
        return AMBIENT_SPAN

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        token = self._token
        other = self._other
        if other is not None:
            if other.__class__ is Reentered:  # a `with` on an object already entered
                if other.count and take_refused(self):
                    other.count -= 1
                    return  # the exit of that refused entry: the span goes on
                reentered, other = other, other.previous
                # The first entry's exit: refused entries still open (in other tasks)
                # keep the marker, with nothing left under it to exit again.
                self._other = reentered if reentered.count else other
                reentered.previous = None
            if other.__class__ is LiveSpan:  # the reconfigured path of __enter__
                if self._other is other:
                    self._other = None
                other.__exit__(exc_type, exc, tb)
                return
        if token is None or token is _DONE:
            if token is _DONE:  # already exited: by another thread that entered it too?
                self._unstick()
            return  # never entered (entering failed), or already exited
        self._token = _DONE
        try:
            _CONTEXT_VAR.reset(token)  # type: ignore[union-attr]
        except Exception as err:  # a token of another context
            self._unstick()
            exited_elsewhere(self._group, err)
        if other is not None:
            return  # the non-recording span: nothing to end
        if exc_type is not None:
            try:
                mark_exit(self, exc_type, exc)
            except Exception as err:  # the span still ends
                report_internal_error(("exit", "FastSpan"), err)
        try:  # FastSpan.end: the claim inline, the hand-over shared
            opened = self._tracer._provider._open
            if (
                opened.pop(self._span_id, None) is not None or self._reclaim()
                if opened.get(self._span_id) is self  # (not another trace's span of its id)
                else self._reclaim()  # forgotten, or its id taken: claimed by its token
            ):
                self.finish(_time_ns())
        except Exception as err:
            report_internal_error(("end", "FastSpan"), err)

    def _unstick(self) -> None:
        """Take this span, ending, out of the current context if it is still current there.

        Only an object entered from two threads at once (which is not supported)
        gets here with work to do: the other thread's exit took the token. Its
        parent stands in for it, rebuilt from the ids the span recorded.
        """
        try:
            var = _CONTEXT_VAR
            if var is None:
                return
            current = var.get()
            if current.get(_SPAN_KEY) is not self:
                return
            values = dict(current)
            if self._parent_id:
                values[_SPAN_KEY] = NonRecordingSpan(
                    SpanContext(
                        self._trace_id,
                        self._parent_id,
                        self._parent_remote,
                        TraceFlags(self._flags),
                        self._state,
                    )
                )
            else:
                del values[_SPAN_KEY]
            var.set(_Context(values))
        except Exception as err:
            report_internal_error(("unstick", site(self._group)), err)

    # Before __enter__, or not sampled (or reconfigured since), the object is no span
    # of its own: these answer for it without raising.

    def get_span_context(self) -> SpanContext:
        """The span's context; before entering, or if not sampled, the one it stands for."""
        try:
            return FastSpan.get_span_context(self)
        except AttributeError:  # never started: no ids
            other = self._other
            if other is not None and hasattr(other, "get_span_context"):
                return other.get_span_context()  # type: ignore[no-any-return]
            return INVALID_SPAN_CONTEXT

    def __repr__(self) -> str:
        try:
            return FastSpan.__repr__(self)
        except AttributeError:  # never started: no ids
            state = "not entered" if self._token is None else "not recording"
            return f"<ManagedSpan {self._name!r} {state}>"


SPAN_TYPES.add(ManagedSpan)

_WRAPPER_FILE: Final = "<asynctrace wrapper of "  # compile_wrapper's file names
_GENERATOR: Final = inspect.CO_GENERATOR | inspect.CO_ASYNC_GENERATOR
_LOOKED_UP: Final = 32  # frames looked at for a traced generator's wrapper


def exited_elsewhere(group: object, err: Exception) -> None:
    """A span's exit could not reset its context token: it was entered in another context.

    Expected, and only logged at debug level, when the exit runs under a traced
    generator (a span the body held across a ``yield``, the generator resumed or
    closed in another task or thread): the wrapper restores the body's context
    around each resume and detaches it in the context that made the token, so
    no context keeps the span. Otherwise (a block exited in another thread) the
    context it was entered in may still hold the span: logged once per *group*
    (raised in strict mode). The span is recorded either way.
    """
    if _under_traced_generator():
        _LOG.debug(
            "asynctrace: a span of group %r held across a yield ended in another context "
            "than it started in (its traced generator was resumed there)",
            site(group),
        )
        return
    if is_strict():
        raise err
    where = ("detach", site(group))
    if not first_report(where):
        return
    try:
        _LOG.warning(
            "asynctrace: a span exited in another context than it was entered in, at %s "
            "(another thread, or a generator resumed in another task); the span is recorded, "
            "but the context it was entered in may still hold it as the current span "
            "(further failures here are not logged)",
            where,
            exc_info=err,
        )
    except Exception:  # pragma: no cover - logging itself broken
        pass


def _under_traced_generator() -> bool:
    """Whether this runs in a generator that a traced generator's wrapper resumed."""
    try:
        frame = sys._getframe(2)
    except ValueError:  # no caller that deep
        return False
    for _ in range(_LOOKED_UP):
        back = frame.f_back
        if back is None:
            return False
        if frame.f_code.co_flags & _GENERATOR and back.f_code.co_filename.startswith(
            _WRAPPER_FILE
        ):
            return True
        frame = back
    return False


def _managed(
    group: str,
    name: str,
    shape: int,
    attributes: Attributes | None,
    bucket: Bucket | None,
    profile: bool,
    current: int | None,
) -> LiveSpan | ManagedSpan | ProfiledSpan:
    """The context manager of an enabled span: a :class:`ManagedSpan` on the fast provider.

    With *profile* (a span that asks), it is profiled if its step is scheduled
    or requested: its own ``rl.iteration``, else *current*, the scope's.
    Checked here, with no call of its own: asking costs a set lookup.
    """
    span: LiveSpan | ManagedSpan
    if GATE.tracer.__class__ is not FastTracer or _CONTEXT_VAR is None:
        span = _live(group, name, shape, attributes, bucket)
    else:
        span = _new(ManagedSpan)
        span._group = group
        span._name = name
        span._shape = shape
        span._attributes = attributes  # type: ignore[assignment]  # the caller's, until __enter__
        span._bucket = bucket
        span._token = span._other = None
        span._end = 0  # not started: not recording, setters ignored (until __enter__)
    if profile and (profiler := _PROFILER[0]) is not None:
        iteration = attributes.get(RL_ITERATION) if attributes else None
        if iteration is None:
            iteration = current
        try:
            scheduled = iteration in profiler._steps
        except TypeError:  # an rl.iteration no set holds (a list): no step of the schedule
            scheduled = False
        if scheduled or profiler._request.pending is not None:
            return ProfiledSpan(span, profiler, iteration)
    return span


def managed_span(
    group: str,
    name: str,
    *,
    attributes: Attributes | None = None,
    bucket: Bucket | None = None,
    profile: bool = False,
) -> LiveSpan | ManagedSpan | NoopSpanCM | ProfiledSpan:
    """Open a *leaf* span of *group*, current for the block.

    Usable with ``with`` and ``async with``; yields the span. The leaf is
    tagged ``rl.bucket`` with, in order of precedence: *bucket*, the innermost
    :class:`bucket_scope`, the group's bucket. When the group is disabled it
    yields a shared non-recording span that carries the parent context, so
    ``span.set_attribute(...)`` is always safe. With *profile*, the block is
    profiled if its step is scheduled in the ``profiler`` configuration.

    Example:
        >>> with managed_span("policy_update", "train.optimizer_step") as span:
        ...     span.set_attribute("train.lr", 1e-5)
    """
    enabled = GATE.enabled
    if not enabled:
        return NOOP_CM
    try:  # free unless it raises (a group no set can hold: a list)
        if group not in enabled and PER_PROMPT_GROUP not in enabled:
            if GATE.audit is not None:  # off whatever the scopes: they are not read
                GATE.audit(group)
            return NOOP_CM
        state = SCOPES.get()
        if (PER_PROMPT_GROUP if state.per_prompt else group) not in enabled:
            if GATE.audit is not None:
                GATE.audit(group)
            return NOOP_CM
    except Exception as exc:
        bad_group(group, exc)
        return NOOP_CM
    return _managed(group, name, LEAF, attributes, bucket, profile, state.iteration)
