"""One ``trace_scope``: the iteration scope and the span; the disabled scope."""

from __future__ import annotations

import numbers
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final

import asynctrace

from ._categories import CategoryLike, _areal_category, _category
from ._values import _attributes, _warn_once

if TYPE_CHECKING:
    from ._perf_tracer import PerfTracer


class _NullContext:
    """The disabled scope: nothing, with and async with."""

    def __enter__(self) -> _NullContext:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    async def __aenter__(self) -> _NullContext:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


_NULL: Final = _NullContext()


def _integral(step: Any) -> int | None:
    """*step* as the int it stands for (numpy's integers), or ``None`` (a bool, a float,
    text: no ``rl.iteration``)."""
    if isinstance(step, bool) or not isinstance(step, numbers.Integral):
        return None
    try:
        return int(step)
    except Exception:  # an Integral whose int() raises: no iteration, never into the host
        return None


class _Scope:
    """One ``trace_scope``: the iteration scope (for ``global_step``), then the span.

    ``args`` are read on entry and again on exit, as AReaL copies them when the
    scope ends: a key the block adds or changes in the same dict is recorded
    (``global_step`` set in the block stamps no ``rl.iteration``: that is fixed
    on entry; a key the block removes stays recorded).
    """

    __slots__ = (
        "_args",
        "_category",
        "_entry",
        "_live",
        "_name",
        "_profile",
        "_scope",
        "_span",
        "_tracer",
    )

    def __init__(
        self,
        tracer: PerfTracer,
        name: str,
        category: CategoryLike,
        args: dict[str, Any] | None,
        profile: bool = False,
    ) -> None:
        self._tracer = tracer
        self._name = name
        self._category = category
        self._args = args
        self._profile = profile
        self._scope: Any = None
        self._span: Any = None
        self._live: Any = None
        self._entry: dict[str, Any] | None = None

    def __enter__(self) -> _Scope:
        args = self._args
        step = args.get("global_step") if args else None
        if step is not None:
            if step.__class__ is not int:  # numpy's integers too, as AReaL profiles them
                step = _integral(step)
            if step is not None:
                self._scope = scope = asynctrace.iteration_scope(step)
                scope.__enter__()
        category = self._category
        group, bucket = self._tracer.bucket_of(_category(category))
        attributes = _attributes(args, _areal_category(category))
        profile = self._profile
        if bucket is None:
            span = asynctrace.umbrella_span(
                group, self._name, attributes=attributes, profile=profile
            )
        else:
            span = asynctrace.managed_span(
                group, self._name, attributes=attributes, bucket=bucket, profile=profile
            )
        self._live = span.__enter__()
        self._span = span
        if args:  # what exit compares with: a shallow copy (values by identity first)
            self._entry = dict(args)
        return self

    def _update(self, args: dict[str, Any], entry: dict[str, Any] | None) -> None:
        """Set the attributes of ``args`` keys added or changed in the block."""
        try:
            now = _attributes(args) or {}
            changed = {
                key: value
                for key, value in now.items()
                if entry is None or key not in entry or entry[key] is not args.get(key)
            }
            if changed:
                self._live.set_attributes(changed)
        except Exception as exc:  # never into the host
            _warn_once("scope-args", "perf_tracer: args changed in a scope not recorded: %r", exc)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        span, self._span = self._span, None
        scope, self._scope = self._scope, None
        try:
            if span is not None:
                args = self._args
                if args is not None:  # changed in the block? (values by identity first)
                    entry = self._entry
                    if entry is None:
                        if args:
                            self._update(args, None)
                    else:
                        try:
                            same = args == entry
                        except Exception:  # a changed value whose == raises (numpy)
                            same = False
                        if not same:
                            self._update(args, entry)
                span.__exit__(exc_type, exc, tb)
        finally:
            if scope is not None:
                scope.__exit__(exc_type, exc, tb)

    async def __aenter__(self) -> _Scope:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)
