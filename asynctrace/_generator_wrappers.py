"""Traced generators and async generators: the span is current only while the body runs.

No token is held across a ``yield``: the span is attached when the body
resumes and detached when it yields, so the caller's context between two
items is its own; the body's own context is kept from one resume to the next.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

from . import _scopes
from ._builtin_groups import PER_PROMPT as PER_PROMPT_GROUP
from ._span_context import attach, attach_context, current_context, detach, finish
from ._span_start import start
from ._state import GATE
from ._wrappers import PREFIX, compile_wrapper

# What the wrappers use lives in modules, read through them (``_scopes.SCOPES``,
# not a ContextVar of their own): a traced function pickled by value (cloudpickle:
# Ray, loky, Dask) then carries references to them, which pickle, and not the
# ContextVar, which does not.

F = TypeVar("F", bound=Callable[..., Any])

__all__ = ["asyncgen_wrapper", "generator_wrapper", "wrapper_names"]


# The body of a traced generator, one frame between the consumer and *fn*'s
# generator: the gate is read, and the span started, when iteration starts.
# Untraced, it delegates with ``yield from``; traced, it drives the body itself
# with the span current only while the body runs (attached around each resume,
# detached before the item is handed on, so no token is held across a
# ``yield``), and what the body made current itself (a span it opened across a
# ``yield``) is current again when it resumes, as without the decorator. Every
# name carries the prefix that _forwarding refuses in parameter names.
_GENERATOR_BODY = """\
    _at_gen = _at_fn({call})
    _at_on = _at_gate.enabled
    if not _at_on:
        return (yield from _at_gen)
    _at_checked = _at_ppg if _at_scopes.SCOPES.get().per_prompt else _at_group
    if _at_checked not in _at_on:
        if _at_gate.audit is not None:
            _at_gate.audit(_at_group)
        return (yield from _at_gen)
    _at_span = _at_start(_at_name, _at_group, _at_shape, _at_attrs, None)
    if _at_span is None:
        return (yield from _at_gen)
    _at_send = None
    _at_throw = None
    _at_body = None
    try:
        while True:
            _at_token = _at_attach(_at_span) if _at_body is None else _at_resume(_at_body)
            try:
                if _at_throw is not None:
                    _at_exc, _at_throw = _at_throw, None
                    _at_item = _at_gen.throw(_at_exc)
                else:
                    _at_item = _at_gen.send(_at_send)
            finally:
                if _at_token is not None:
                    _at_body = _at_current()
                _at_detach(_at_token, _at_group)
            try:
                _at_send = yield _at_item
            except _at_GeneratorExit:
                _at_token = _at_attach(_at_span) if _at_body is None else _at_resume(_at_body)
                try:
                    _at_gen.close()
                finally:
                    _at_detach(_at_token, _at_group)
                raise
            except _at_BaseException as _at_raised:  # throw(): forward into the body
                _at_throw = _at_raised
    except _at_StopIteration as _at_stop:
        _at_finish(_at_span, None, None)
        return _at_stop.value
    except _at_BaseException as _at_raised:
        _at_finish(_at_span, _at_type(_at_raised), _at_raised)
        raise
"""


def generator_wrapper(
    fn: F, group: str, span_name: str, shape: int, attrs: dict[str, Any] | None
) -> F:
    """Build the generator function ``wrapper(<fn's parameters>)`` around *fn*.

    With *fn*'s own parameters, a call with bad arguments raises at the call,
    as calling *fn* would, not at the first ``next()``; and the wrapper is
    still a generator function (frameworks such as FastAPI and pytest look).
    The gate is read, and the span started, when iteration starts;
    ``send``, ``throw`` and ``close`` reach *fn*'s body.
    """

    def source(params: str, call: str) -> str:
        return f"def {PREFIX}wrapper({params}):\n" + _GENERATOR_BODY.format(call=call)

    return compile_wrapper(fn, source, wrapper_names(fn, group, span_name, shape, attrs))


def wrapper_names(
    fn: Callable[..., Any], group: str, span_name: str, shape: int, attrs: dict[str, Any] | None
) -> dict[str, Any]:
    """What a compiled traced wrapper reads, by name without the prefix: the call and
    coroutine wrappers (:mod:`asynctrace._decorators`) and the generator ones alike."""
    return {
        "fn": fn,
        "gate": GATE,
        "ppg": PER_PROMPT_GROUP,
        "scopes": _scopes,
        "group": group,
        "name": span_name,
        "shape": shape,
        "attrs": attrs,
        "start": start,
        "attach": attach,
        "resume": attach_context,
        "current": current_context,
        "detach": detach,
        "finish": finish,
        "type": type,
        "BaseException": BaseException,
        "GeneratorExit": GeneratorExit,
        "StopIteration": StopIteration,
    }


# The body of a traced async generator. Async generators cannot ``yield from``,
# so the driving loop is the wrapper's own body. Every name it uses, locals and
# builtins alike, carries the prefix that _forwarding refuses in parameter
# names, so a parameter (``type``, say) can shadow none of them.
_ASYNCGEN_BODY = """\
    _at_agen = _at_fn({call})
    # The first asend made with the event loop's hooks off: the loop then knows
    # only this wrapper, whose closing closes *fn*'s generator, and never closes
    # that generator itself, concurrently (as it would at shutdown_asyncgens).
    _at_hooks = _at_get_hooks()
    _at_set_hooks(None, None)
    try:
        _at_next = _at_agen.asend(None)
    finally:
        _at_set_hooks(*_at_hooks)
    _at_on = _at_gate.enabled
    _at_span = None
    if _at_on:
        _at_checked = _at_ppg if _at_scopes.SCOPES.get().per_prompt else _at_group
        if _at_checked in _at_on:
            _at_span = _at_start(_at_name, _at_group, _at_shape, _at_attrs, None)
        elif _at_gate.audit is not None:
            _at_gate.audit(_at_group)
    _at_body = None
    _at_send = None
    _at_throw = None
    try:
        while True:
            # The span is current only while the body runs; no token is held
            # across the yield below. The body's own context (a span it opened
            # across a yield) is kept from one resume to the next.
            _at_token = None
            if _at_span is not None:
                _at_token = _at_attach(_at_span) if _at_body is None else _at_resume(_at_body)
            try:
                if _at_throw is not None:
                    _at_exc, _at_throw = _at_throw, None
                    _at_item = await _at_agen.athrow(_at_exc)
                elif _at_next is not None:
                    _at_item = await _at_next
                    _at_next = None
                else:
                    _at_item = await _at_agen.asend(_at_send)
            except _at_StopAsyncIteration:
                break
            finally:
                if _at_token is not None:
                    _at_body = _at_current()
                    _at_detach(_at_token, _at_group)
            try:
                _at_send = yield _at_item
            except _at_GeneratorExit:
                _at_token = None
                if _at_span is not None:
                    _at_token = _at_attach(_at_span) if _at_body is None else _at_resume(_at_body)
                try:
                    await _at_agen.aclose()
                finally:
                    _at_detach(_at_token, _at_group)
                raise
            except _at_BaseException as _at_raised:  # athrow(): forward into the body
                _at_throw = _at_raised
    except _at_BaseException as _at_raised:
        if _at_span is not None:
            _at_finish(_at_span, _at_type(_at_raised), _at_raised)
        raise
    if _at_span is not None:
        _at_finish(_at_span, None, None)
"""


def asyncgen_wrapper(
    fn: F, group: str, span_name: str, shape: int, attrs: dict[str, Any] | None
) -> F:
    """Build the async generator function ``wrapper(<fn's parameters>)`` around *fn*.

    With *fn*'s own parameters, a call with bad arguments raises at the call,
    as calling *fn* would, before any span starts; the wrapper is still an
    async generator function. The gate is read, and the span started, when
    iteration starts; ``asend``, ``athrow`` and ``aclose`` reach *fn*'s body.
    """

    def source(params: str, call: str) -> str:
        return f"async def {PREFIX}wrapper({params}):\n" + _ASYNCGEN_BODY.format(call=call)

    names = {
        **wrapper_names(fn, group, span_name, shape, attrs),
        "get_hooks": sys.get_asyncgen_hooks,
        "set_hooks": sys.set_asyncgen_hooks,
        "StopAsyncIteration": StopAsyncIteration,
    }
    return compile_wrapper(fn, source, names)
