"""AReaL's ``perf_tracer`` API on asynctrace (``from asynctrace_contrib import areal``).

A drop-in for ``areal.utils.perf_tracer`` (AReaL 1.0.4): the same functions,
configured from the same ``perf_tracer:`` block, writing the same directory
layout (``<fileroot>/logs/<user>/<experiment>/<trial>/perf_tracer/traces-r{rank}.jsonl``
and ``.../session_tracer/sessions-r{rank}.jsonl``) with AReaL's field names,
and recording through asynctrace: scopes are asynctrace spans (so OTLP export,
``asynctrace goodput`` and ``report`` work on them), sessions are asynctrace
sessions (with AReaL's numeric ids).

Categories become span groups and goodput buckets by :data:`DEFAULT_CATEGORY_MAP`
(``compute`` is productive, ``sync`` idle, ``comm``/``io``/``scheduler``/``instr``
overhead, ``misc`` and unknown categories unbucketed umbrellas); pass
``category_map=`` to :func:`configure` to change it. A scope whose ``args``
hold ``global_step`` runs inside :func:`asynctrace.iteration_scope`, so its
span and everything under it carry ``rl.iteration``, and an unbucketed one is
the step ``asynctrace goodput`` reports.

Example:
    >>> from asynctrace_contrib import areal as perf_tracer
    >>> with perf_tracer.trace_scope("train.step", args={"global_step": 3}):
    ...     pass
"""

from __future__ import annotations

import sys
import types

from . import _global
from ._categories import (
    DEFAULT_CATEGORY_MAP,
    Category,
    CategoryLike,
    PerfTraceCategory,
)
from ._categories import (
    NAMESPACE as NAMESPACE,
)
from ._global import (
    atrace_scope,
    configure,
    get_session_tracer,
    get_tracer,
    instant,
    is_configured,
    reset,
    save,
    trace_perf,
    trace_scope,
)
from ._perf_tracer import PerfTracer
from ._session_context import session_context
from ._session_phases import (
    atrace_session_phase,
    trace_session,
    trace_session_event,
    trace_session_phase,
)
from ._session_tracer import SessionTraceEvent, SessionTracer
from ._sessions import (
    get_session_id,
    get_task_id,
    register_session,
    register_task,
    set_session_id,
    set_task_id,
)
from ._settings import PerfTracerConfig, SessionTracerConfig

__all__ = [
    "DEFAULT_CATEGORY_MAP",
    "GLOBAL_TRACER",
    "Category",
    "CategoryLike",
    "PerfTraceCategory",
    "PerfTracer",
    "PerfTracerConfig",
    "SessionTraceEvent",
    "SessionTracer",
    "SessionTracerConfig",
    "atrace_scope",
    "atrace_session_phase",
    "configure",
    "get_session_id",
    "get_session_tracer",
    "get_task_id",
    "get_tracer",
    "instant",
    "is_configured",
    "register_session",
    "register_task",
    "reset",
    "save",
    "session_context",
    "set_session_id",
    "set_task_id",
    "trace_perf",
    "trace_scope",
    "trace_session",
    "trace_session_event",
    "trace_session_phase",
]


class _Module(types.ModuleType):
    """This module, with ``GLOBAL_TRACER`` read from and written to where it lives."""

    @property
    def GLOBAL_TRACER(self) -> PerfTracer | None:
        """The configured tracer (AReaL's name), ``None`` until :func:`configure`.

        Assigning it (``perf_tracer.GLOBAL_TRACER = None`` in a test's teardown)
        sets the module's tracer, as in AReaL's module.
        """
        return _global.GLOBAL_TRACER

    @GLOBAL_TRACER.setter
    def GLOBAL_TRACER(self, tracer: PerfTracer | None) -> None:
        _global.GLOBAL_TRACER = tracer


sys.modules[__name__].__class__ = _Module


def __dir__() -> list[str]:
    """The module's names, ``GLOBAL_TRACER`` included."""
    return sorted({*globals(), "GLOBAL_TRACER"})
