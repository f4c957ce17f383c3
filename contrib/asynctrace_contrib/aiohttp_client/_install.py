"""The global layer: every ClientSession created while instrumented gets one of ours."""

from __future__ import annotations

import functools
import inspect
import os
import threading
from typing import Any

import aiohttp

from ._middleware import client_middleware
from ._otel_aiohttp import has_otel_config, is_otel_init, otel_aiohttp_active
from ._trace_config import trace_config

__all__ = ["instrument_aiohttp_client", "uninstrument_aiohttp_client"]

_HAS_MIDDLEWARES = "middlewares" in inspect.signature(aiohttp.ClientSession.__init__).parameters

_install_lock = threading.Lock()


def _new_lock_in_child() -> None:
    """A lock another thread held at ``fork()`` would stay held in the child: a new one."""
    global _install_lock
    _install_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_lock_in_child)

# What instrument_aiohttp_client put on aiohttp.ClientSession. A wrapper of ours stays
# installed, inert, when another instrumentation wrapped the method after it (taking it
# off would take theirs off too): the next instrument call turns it back on.
_layers: tuple[aiohttp.TraceConfig, Any] | None = None  # (trace config, middleware) while on
_installed_init: Any = None  # our __init__ wrapper, once installed
_original_init: Any = None  # what it wraps
_installed_request: Any = None  # our _request wrapper (aiohttp >= 3.12)
_original_request: Any = None


def instrument_aiohttp_client(**options: Any) -> None:
    """Trace every ``aiohttp.ClientSession`` created from now on.

    Idempotent: a second call changes nothing (call
    :func:`uninstrument_aiohttp_client` first to change options). Sessions
    created before this call are not covered. On aiohttp >= 3.12, a request
    passing its own ``middlewares=`` keeps its session's asynctrace
    middleware, appended last. Takes the keyword arguments of
    :func:`trace_config`.

    Example:
        >>> instrument_aiohttp_client(record_request_headers=["x-request-id"])
        >>> uninstrument_aiohttp_client()
    """
    global _layers, _installed_init, _original_init, _installed_request, _original_request
    with _install_lock:
        if _layers is not None:
            return
        config = trace_config(**options)
        middleware = client_middleware(**options) if _HAS_MIDDLEWARES else None
        cls = aiohttp.ClientSession
        if not _in_chain(_own(cls, "__init__"), _installed_init):
            _original_init = _own(cls, "__init__")
            _installed_init = _session_init(_original_init)
            cls.__init__ = _installed_init  # type: ignore[method-assign]
        if _HAS_MIDDLEWARES and not _in_chain(_own(cls, "_request"), _installed_request):
            _original_request = _own(cls, "_request")
            _installed_request = _with_session_layer(_original_request)
            cls._request = _installed_request  # type: ignore[method-assign]
        _layers = (config, middleware)


def _own(cls: type, name: str) -> Any:
    """The attribute *name* as set on *cls* (a descriptor stays one), else as inherited."""
    return vars(cls).get(name, getattr(cls, name))


def _in_chain(method: Any, wrapper: Any) -> bool:
    """Whether *wrapper* is *method* or wrapped by it (``__wrapped__``, as functools and
    wrapt set it)."""
    if wrapper is None:
        return False
    for _ in range(100):  # a cycle of __wrapped__ would never end
        if method is wrapper:
            return True
        method = getattr(method, "__wrapped__", None)
        if method is None:
            return False
    return False


def _session_init(original: Any) -> Any:
    """The ``ClientSession.__init__`` wrapper: one layer of ours on every new session.

    When *original* is OpenTelemetry's wrapper and its instrumentor was turned
    off since (it can only take its wrapper off the class when that wrapper is
    on top, and ours is), it is stepped over: OpenTelemetry's ``uninstrument()``
    takes effect. So it is too when OpenTelemetry's instrumentor, turned on
    again, wrapped ours and has added its trace config already.
    """
    otel_beneath = is_otel_init(original)

    @functools.wraps(original)
    def __init__(self: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> None:
        init = original
        if otel_beneath:
            while is_otel_init(init) and (
                not otel_aiohttp_active() or has_otel_config(kwargs.get("trace_configs") or ())
            ):
                init = init.__wrapped__
        layers = _layers
        if layers is not None:
            config, middleware = layers
            chain = tuple(kwargs.get("middlewares") or ())
            configs = list(kwargs.get("trace_configs") or ())
            if not any(getattr(layer, "asynctrace", False) for layer in (*chain, *configs)):
                if middleware is not None and not configs and not otel_aiohttp_active():
                    kwargs["middlewares"] = (*chain, middleware)  # one layer of ours, at most
                else:
                    # Other trace configs run before any middleware: ours goes first among
                    # them, so the request is handled once (OpenTelemetry's stands aside).
                    kwargs["trace_configs"] = [config, *configs]
        init(self, *args, **kwargs)

    return __init__


def _with_session_layer(original: Any) -> Any:
    """Wrap ``ClientSession._request`` so a request's own ``middlewares=`` keep ours.

    aiohttp runs a request's ``middlewares=`` instead of the session's, so a
    session's asynctrace layer is appended to them (last, as on the session),
    unless they hold one already. A plain function returning the coroutine:
    a request without ``middlewares=`` pays one call and one lookup. Only a
    session that has an asynctrace middleware is affected, so the wrapper
    needs no switch when left installed, inert.
    """

    @functools.wraps(original)
    def _request(self: aiohttp.ClientSession, *args: Any, **kwargs: Any) -> Any:
        chain = kwargs.get("middlewares")
        if chain is not None:
            kwargs["middlewares"] = _keep_session_layer(self, tuple(chain))
        return original(self, *args, **kwargs)

    return _request


def _keep_session_layer(session: aiohttp.ClientSession, chain: tuple[Any, ...]) -> Any:
    """*chain*, with the session's asynctrace middleware appended if it has one and *chain* not."""
    if any(getattr(layer, "asynctrace", False) for layer in chain):
        return chain
    for layer in getattr(session, "_middlewares", None) or ():
        if getattr(layer, "asynctrace", False):
            return (*chain, layer)
    return chain


def uninstrument_aiohttp_client() -> None:
    """Undo :func:`instrument_aiohttp_client`: new sessions get no layer of asynctrace's.

    The original ``__init__`` (and ``_request``) is put back when asynctrace's
    wrapper is still the outermost. When another instrumentation (OpenTelemetry's
    ``AioHttpClientInstrumentor``) wrapped it since, putting the original back
    would remove that one too: asynctrace's wrapper stays beneath it, passing
    sessions through untouched, and the next :func:`instrument_aiohttp_client`
    turns it back on. Sessions created while instrumented keep their layer.

    Example:
        >>> uninstrument_aiohttp_client()
    """
    global _layers, _installed_init, _original_init, _installed_request, _original_request
    with _install_lock:
        if _layers is None:
            return
        _layers = None
        cls = aiohttp.ClientSession
        if _installed_init is not None and vars(cls).get("__init__") is _installed_init:
            original = _original_init
            # OpenTelemetry's wrapper beneath ours, its instrumentor off since: what its
            # uninstrument() would have put back, had ours not been on top.
            while is_otel_init(original) and not otel_aiohttp_active():
                original = original.__wrapped__
            cls.__init__ = original  # type: ignore[method-assign]
            _installed_init = _original_init = None
        if _installed_request is not None and vars(cls).get("_request") is _installed_request:
            cls._request = _original_request  # type: ignore[method-assign]
            _installed_request = _original_request = None
