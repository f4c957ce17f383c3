"""Carriers: W3C trace context across Ray calls, HTTP, subprocesses and env vars."""

from __future__ import annotations

import functools
import inspect
import os
import re
from collections.abc import Callable, Mapping, MutableMapping
from types import TracebackType
from typing import Any, Final, TypeVar, cast

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ._cm import SyncAndAsync
from ._errors import ConfigurationError, report_internal_error

__all__ = [
    "accepts_trace_context",
    "current_trace_carrier",
    "dispatch_with_trace_context",
    "extract_env",
    "inject_env",
    "remote_trace_context",
    "span_carrier",
]

_W3C: Final = TraceContextTextMapPropagator()
TRACEPARENT: Final = "traceparent"
TRACESTATE: Final = "tracestate"
ENV_TRACEPARENT: Final = "TRACEPARENT"
ENV_TRACESTATE: Final = "TRACESTATE"
CARRIER_KWARG: Final = "trace_carrier"
# A version-00 traceparent is 55 characters; later versions may append fields.
_MAX_TRACEPARENT: Final = 512
# W3C: at most 32 list members of at most 256 characters each.
_MAX_TRACESTATE: Final = 32 * 257

F = TypeVar("F", bound=Callable[..., Any])


def current_trace_carrier() -> dict[str, str]:
    """The current span context as a W3C carrier (``traceparent``/``tracestate``).

    An empty dict when there is no valid span context (nothing recording and
    no remote parent attached), so passing it on is always safe.

    Example:
        >>> current_trace_carrier()
        {}
    """
    try:
        return span_carrier(trace.get_current_span())
    except Exception as exc:
        report_internal_error(("current_trace_carrier",), exc)
        return {}


_HEX_BYTE: Final = tuple(f"{i:02x}" for i in range(256))


def _context_is_a_plain_tuple() -> bool:
    """Whether ``SpanContext`` is ``(trace_id, span_id, is_remote, flags, state, is_valid)``.

    Its properties cost a Python call each; unpacking the tuple is one C
    operation. Checked once, here; the properties are used if the layout ever
    differs.
    """
    state = trace.TraceState([("k", "v")])
    probe = trace.SpanContext(0xA, 0xB, True, trace.TraceFlags(1), state)
    return isinstance(probe, tuple) and tuple(probe) == (0xA, 0xB, True, 1, state, True)


PLAIN_CONTEXT: Final = _context_is_a_plain_tuple()


def span_carrier(span: trace.Span) -> dict[str, str]:
    """The W3C carrier that names *span* as the parent; ``{}`` if its context is invalid.

    For integrations that start a span without making it current (an HTTP
    client's request hook) and must send it as the parent.

    Example:
        >>> span_carrier(trace.INVALID_SPAN)
        {}
    """
    ctx = span.get_span_context()
    if PLAIN_CONTEXT and ctx.__class__ is trace.SpanContext:
        trace_id, span_id, _, flags, state, valid = ctx
    else:
        if not ctx.is_valid:
            return {}
        trace_id, span_id, flags = ctx.trace_id, ctx.span_id, ctx.trace_flags
        state, valid = ctx.trace_state, True
    if not valid:
        return {}
    try:  # int.to_bytes().hex(): about twice as fast as a format spec, on every request
        parent = f"{trace_id.to_bytes(16, 'big').hex()}-{span_id.to_bytes(8, 'big').hex()}"
        flags_hex = _HEX_BYTE[flags]
    except (AttributeError, OverflowError, TypeError, IndexError):  # not a plain W3C value
        parent, flags_hex = f"{trace_id:032x}-{span_id:016x}", f"{flags:02x}"
    carrier = {TRACEPARENT: f"00-{parent}-{flags_hex}"}
    if state:
        carrier[TRACESTATE] = state.to_header()
    return carrier


_KEY = r"(?:[a-z][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})"
_VALUE = r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
_MEMBER: Final = re.compile(rf"[ \t]*{_KEY}={_VALUE}[ \t]*")


def _valid_tracestate(value: str) -> bool:
    """W3C tracestate syntax; an invalid header is discarded whole (W3C §3.3.1.1)."""
    members = [m for m in value.split(",") if m.strip(" \t")]
    return len(members) <= 32 and all(_MEMBER.fullmatch(m) for m in members)


def _clean_carrier(carrier: object) -> dict[str, str] | None:
    """Keep only well-typed, bounded W3C entries (keys case-insensitive)."""
    try:
        return _clean(carrier)
    except Exception:  # a hostile mapping: treat as no carrier
        return None


def _clean(carrier: object) -> dict[str, str] | None:
    if carrier is None or isinstance(carrier, (str, bytes)):
        return None
    getter = getattr(carrier, "get", None)
    if not callable(getter):
        return None
    items = getattr(carrier, "items", None)
    clean: dict[str, str] = {}
    for key, limit in ((TRACEPARENT, _MAX_TRACEPARENT), (TRACESTATE, _MAX_TRACESTATE)):
        value = getter(key)
        if value is None and isinstance(carrier, Mapping) and callable(items):
            for raw_key, raw_value in items():
                if isinstance(raw_key, str) and raw_key.lower() == key:
                    value = raw_value
                    break
        if isinstance(value, str) and value.isascii() and len(value) <= limit:
            if key == TRACESTATE and not _valid_tracestate(value):
                continue
            clean[key] = value
    return clean if TRACEPARENT in clean else None


def context_from_carrier(carrier: object) -> otel_context.Context | None:
    """The OTel context a carrier describes, or ``None`` if it is not valid W3C."""
    clean = _clean_carrier(carrier)
    if clean is None:
        return None
    try:
        extracted = trace.get_current_span(_W3C.extract(clean)).get_span_context()
    except Exception:
        return None
    if not extracted.is_valid:
        return None
    # Keep the caller's other context values (baggage, ...): only the span changes.
    return trace.set_span_in_context(trace.NonRecordingSpan(extracted), otel_context.get_current())


class remote_trace_context(SyncAndAsync["remote_trace_context"]):
    """Run a block under the span context of a W3C *carrier*.

    Attaches on enter and detaches on exit (``with`` and ``async with``). An
    empty, ``None`` or malformed carrier makes it a no-op: it never raises.

    Example:
        >>> with remote_trace_context({"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}):
        ...     pass
    """

    __slots__ = ("_ctx", "_token")

    def __init__(self, carrier: Mapping[str, str] | None) -> None:
        self._ctx = context_from_carrier(carrier)
        self._token: object | None = None

    @property
    def valid(self) -> bool:
        """Whether the carrier held a valid W3C span context."""
        return self._ctx is not None

    def __enter__(self) -> remote_trace_context:
        if self._ctx is not None:
            try:
                span = trace.get_current_span(self._ctx)
                ctx = trace.set_span_in_context(span, otel_context.get_current())
                self._token = otel_context.attach(ctx)
            except Exception as exc:
                report_internal_error(("remote_trace_context",), exc)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        token, self._token = self._token, None
        if token is not None:
            otel_context.detach(token)  # type: ignore[arg-type]


def _signature_with_carrier(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    params = list(signature.parameters.values())
    if CARRIER_KWARG in signature.parameters:
        return signature
    extra = inspect.Parameter(
        CARRIER_KWARG,
        inspect.Parameter.KEYWORD_ONLY,
        default=None,
        annotation="Mapping[str, str] | None",
    )
    if params and params[-1].kind is inspect.Parameter.VAR_KEYWORD:
        params.insert(len(params) - 1, extra)
    else:
        params.append(extra)
    return signature.replace(parameters=params)


def _take_carrier(kwargs: dict[str, Any], keep: bool) -> Any:
    return kwargs.get(CARRIER_KWARG) if keep else kwargs.pop(CARRIER_KWARG, None)


def accepts_trace_context(fn: F) -> F:
    """Let *fn* accept a ``trace_carrier=`` keyword and run under that context.

    Works on functions and methods, sync and async. The wrapper's
    ``inspect.signature`` shows the extra keyword, so signature checks such as
    Ray's accept the call. Called without a carrier, *fn* runs as before.

    Example:
        >>> @accepts_trace_context
        ... def run_rollouts(batch):
        ...     return len(batch)
        >>> run_rollouts([1, 2], trace_carrier={})
        2
    """
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise ConfigurationError(
            f"accepts_trace_context({fn.__qualname__}): generator functions are not supported; "
            "open remote_trace_context(carrier) inside the generator instead"
        )
    takes_carrier = False  # the function declares trace_carrier itself: pass it through
    try:
        takes_carrier = CARRIER_KWARG in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        pass

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            carrier = (
                kwargs.get(CARRIER_KWARG) if takes_carrier else kwargs.pop(CARRIER_KWARG, None)
            )
            if not carrier:
                return await fn(*args, **kwargs)
            with remote_trace_context(carrier):
                return await fn(*args, **kwargs)

        wrapper: Callable[..., Any] = async_wrapper
    else:

        @functools.wraps(fn)
        def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
            carrier = (
                kwargs.get(CARRIER_KWARG) if takes_carrier else kwargs.pop(CARRIER_KWARG, None)
            )
            if not carrier:
                return fn(*args, **kwargs)
            with remote_trace_context(carrier):
                return fn(*args, **kwargs)

        wrapper = sync_wrapper
    signature = _signature_with_carrier(fn)
    if signature is not None:
        wrapper.__signature__ = signature  # type: ignore[attr-defined]
        # Ray (and others) call inspect.unwrap() before reading a signature;
        # following __wrapped__ would hide the extra keyword, so keep the
        # original under another name.
        wrapper.__asynctrace_wrapped__ = fn  # type: ignore[attr-defined]
        del wrapper.__wrapped__  # type: ignore[attr-defined]
    return cast("F", wrapper)


def dispatch_with_trace_context(fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn(*args, trace_carrier=current_trace_carrier(), **kwargs)``.

    The call-site half of :func:`accepts_trace_context`, e.g. for
    ``actor.method.remote``.

    Example:
        >>> dispatch_with_trace_context(lambda x, trace_carrier: (x, trace_carrier), 1)
        (1, {})
    """
    return fn(*args, trace_carrier=current_trace_carrier(), **kwargs)


def inject_env(env: MutableMapping[str, str] | None = None) -> MutableMapping[str, str]:
    """Put the current trace context into ``TRACEPARENT``/``TRACESTATE`` of *env*.

    *env* defaults to a copy of ``os.environ``. Stale values are removed when
    there is no valid span context, so a child never inherits an old parent.
    Returns *env*, ready for ``subprocess.run(..., env=...)``.

    Example:
        >>> env = inject_env({"PATH": "/usr/bin"})
        >>> "TRACEPARENT" in env
        False
    """
    target: MutableMapping[str, str] = dict(os.environ) if env is None else env
    carrier = current_trace_carrier()
    for env_key, key in ((ENV_TRACEPARENT, TRACEPARENT), (ENV_TRACESTATE, TRACESTATE)):
        if key in carrier:
            target[env_key] = carrier[key]
        else:
            target.pop(env_key, None)
    return target


def extract_env(environ: Mapping[str, str] | None = None) -> remote_trace_context:
    """The trace context carried in ``TRACEPARENT``/``TRACESTATE`` (default ``os.environ``).

    Returns a :class:`remote_trace_context`: ``with extract_env(): ...`` runs
    the block under the parent process's span. Missing or malformed values
    make it a no-op.

    Example:
        >>> with extract_env({}):
        ...     pass
    """
    source = os.environ if environ is None else environ
    carrier: dict[str, str] = {}
    try:
        parent = source.get(ENV_TRACEPARENT)
        state = source.get(ENV_TRACESTATE)
    except Exception:
        parent = state = None
    if isinstance(parent, str):
        carrier[TRACEPARENT] = parent
        if isinstance(state, str):
            carrier[TRACESTATE] = state
    return remote_trace_context(carrier)
