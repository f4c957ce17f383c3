"""Carriers: W3C trace context across Ray calls, HTTP, subprocesses and env vars."""

from __future__ import annotations

import functools
import inspect
import os
import re
from collections.abc import Callable, Mapping, MutableMapping
from contextvars import Token
from types import CoroutineType, TracebackType
from typing import Any, Final, TypeVar, cast

from opentelemetry import baggage, trace
from opentelemetry import context as otel_context

from ._baggage import ScopeValues, encode
from ._baggage import _count as count_refusal
from ._baggage import decode as decode_baggage
from ._cm import SyncAndAsync
from ._errors import ConfigurationError, report_internal_error
from ._fast._span import SPAN_TYPES
from ._scopes import SCOPES, ScopeState, leave_all
from ._span_context import _CONTEXT_VAR, _SPAN_KEY
from ._state import GATE

__all__ = [
    "accepts_trace_context",
    "current_trace_carrier",
    "dispatch_with_trace_context",
    "extract_env",
    "inject_env",
    "remote_trace_context",
    "span_carrier",
]

TRACEPARENT: Final = "traceparent"
TRACESTATE: Final = "tracestate"
BAGGAGE: Final = "baggage"
ENV_TRACEPARENT: Final = "TRACEPARENT"
ENV_TRACESTATE: Final = "TRACESTATE"
ENV_BAGGAGE: Final = "BAGGAGE"
CARRIER_KWARG: Final = "trace_carrier"
# nemo-lens's keyword (``traced_remote_call`` / ``ray_dispatch_with_context``),
# accepted too so that old and new actors interoperate during a migration.
LENS_CARRIER_KWARG: Final = "_otel_carrier"
_CARRIER_KWARGS: Final = (CARRIER_KWARG, LENS_CARRIER_KWARG)
# A version-00 traceparent is 55 characters; later versions may append fields.
_MAX_TRACEPARENT: Final = 512
# The combined tracestate OpenTelemetry's propagator reads (longer ones are discarded).
_MAX_TRACESTATE: Final = 8192

F = TypeVar("F", bound=Callable[..., Any])


_get_current = otel_context.get_current
_CoroutineType: Final = CoroutineType
_NO_SCOPES: Final = object()  # the scope key of a carrier made with propagate_scopes off
# The last carrier made and what it was made of: the OpenTelemetry context and the
# scope state, both immutable (a span made current, baggage set or a scope entered
# installs a new object), or _NO_SCOPES. A task's calls one after another under
# one parent (its HTTP requests, its Ray calls) all send the same carrier.
_last: tuple[object, object, dict[str, str]] = (object(), _NO_SCOPES, {})


def current_trace_carrier() -> dict[str, str]:
    """The current span context as a W3C carrier (``traceparent``/``tracestate``).

    No ``traceparent`` when there is no valid span context (nothing recording
    and no remote parent attached), so passing it on is always safe. With
    ``propagate_scopes`` on, a ``baggage`` entry carries the iteration,
    per-prompt, task and session scopes (under ``asynctrace.``) and the
    caller's own OpenTelemetry baggage, when there is any of either, with a
    span or without one (a per-prompt scope gates the far side's spans even
    when nothing records here); with it off, or with neither scopes nor
    baggage, the dict is empty when there is no span. Each call returns a
    new dict.

    Example:
        >>> current_trace_carrier()
        {}
    """
    global _last
    try:
        ctx = _get_current()
        scopes = SCOPES.get() if GATE.propagate_scopes else _NO_SCOPES
        last_ctx, last_scopes, carrier = _last
        if last_ctx is ctx and last_scopes is scopes:
            return carrier.copy()
        carrier = _span_fields(trace.get_current_span(ctx))
        if scopes is not _NO_SCOPES:
            value = _baggage_value(ctx)
            if value:
                carrier[BAGGAGE] = value
        _last = (ctx, scopes, carrier)
        return carrier.copy()
    except Exception as exc:
        report_internal_error(("current_trace_carrier",), exc)
        return {}


def _baggage_value(ctx: otel_context.Context) -> str:
    """The ``baggage`` value for *ctx*; ``""`` should making it fail (the carrier keeps
    its ``traceparent``: baggage the far side misses costs less than its parent)."""
    try:
        return encode(baggage.get_all(ctx))
    except Exception as exc:
        report_internal_error(("current_trace_carrier", "baggage"), exc)
        return ""


_HEX_BYTE: Final = tuple(f"{i:02x}" for i in range(256))
# The last trace id formatted, and its hex: requests of one step share a trace,
# so the carrier of each formats only its own span id. (A tuple swapped whole:
# threads see either the old pair or the new one.)
_last_trace: list[tuple[int, str]] = [(0, "")]


def _baggage_key() -> Any:
    """OpenTelemetry's context key for baggage, if it is where ``get_all`` reads it.

    ``baggage.set_baggage`` copies the whole baggage for every entry it adds, so
    a carrier's 180 entries, set one by one, copy 16,000 entries; with the key,
    they are set in one step. ``None`` (checked once, here) keeps the public calls.
    """
    key = getattr(baggage, "_BAGGAGE_KEY", None)
    if key is None:
        return None
    try:
        probe = otel_context.set_value(key, {"k": "v"}, otel_context.Context())
        return key if dict(baggage.get_all(probe)) == {"k": "v"} else None
    except Exception:
        return None


_BAGGAGE: Final = _baggage_key()


def _with_baggage(entries: Mapping[str, str], ctx: otel_context.Context) -> otel_context.Context:
    """*ctx* with *entries* added to its baggage, as ``set_baggage`` for each would add them."""
    if _BAGGAGE is None:
        for key, value in entries.items():
            ctx = baggage.set_baggage(key, value, ctx)
        return ctx
    merged = dict(baggage.get_all(ctx))
    merged.update(entries)
    return otel_context.set_value(_BAGGAGE, merged, ctx)


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
    client's request hook) and must send it as the parent. With
    ``propagate_scopes`` on, the current scopes travel in ``baggage`` too,
    as with :func:`current_trace_carrier`.

    Example:
        >>> span_carrier(trace.INVALID_SPAN)
        {}
    """
    carrier = _span_fields(span)
    if carrier and GATE.propagate_scopes:
        value = current_trace_carrier().get(BAGGAGE)  # the current scopes and baggage
        if value:
            carrier[BAGGAGE] = value
    return carrier


def _span_fields(span: trace.Span) -> dict[str, str]:
    """``traceparent``/``tracestate`` naming *span*; ``{}`` if its context is invalid."""
    if span.__class__ in SPAN_TYPES:  # a fast-provider span: its fields, no SpanContext made
        try:
            trace_id, span_id = span._trace_id, span._span_id  # type: ignore[attr-defined]
            flags, state = span._flags & _FLAGS_SENT, span._state  # type: ignore[attr-defined]
        except AttributeError:  # a managed_span() object not entered, or not sampled
            other = getattr(span, "_other", None)
            return {} if other is None else _span_fields(other)
        valid = True
    else:
        get_context = getattr(span, "get_span_context", None)
        if get_context is None:  # not a span (a context manager handed in by mistake)
            return {}
        ctx = get_context()
        if PLAIN_CONTEXT and ctx.__class__ is trace.SpanContext:
            trace_id, span_id, _, flags, state, valid = ctx
        else:
            if not ctx.is_valid:
                return {}
            trace_id, span_id, flags = ctx.trace_id, ctx.span_id, ctx.trace_flags
            state, valid = ctx.trace_state, True
        flags &= _FLAGS_SENT
    if not valid:
        return {}
    try:  # int.to_bytes().hex(): about twice as fast as a format spec, on every request
        last = _last_trace[0]
        if last[0] == trace_id:
            trace_hex = last[1]
        else:
            trace_hex = trace_id.to_bytes(16, "big").hex()
            _last_trace[0] = (trace_id, trace_hex)
        parent = f"{trace_hex}-{span_id.to_bytes(8, 'big').hex()}"
        flags_hex = _HEX_BYTE[flags]
    except (AttributeError, OverflowError, TypeError, IndexError):  # not a plain W3C value
        parent, flags_hex = f"{trace_id:032x}-{span_id:016x}", f"{flags:02x}"
    carrier = {TRACEPARENT: f"00-{parent}-{flags_hex}"}
    if state:
        carrier[TRACESTATE] = state.to_header()
    return carrier


_KEY = r"(?:[a-z][_0-9a-z\-*/]{0,255}|[a-z0-9][_0-9a-z\-*/]{0,240}@[a-z][_0-9a-z\-*/]{0,13})"
_VALUE = r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
_MEMBER: Final = re.compile(rf"({_KEY})=({_VALUE})")
# OpenTelemetry's pattern, less the optional whitespace around it, which is stripped first:
# a future version's "-..." and a trailing blank run could otherwise split a long run of
# blanks two ways, and backtrack quadratically over it.
_TRACEPARENT: Final = re.compile(
    r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-[^\r\n]*)?"
)
# Read, version 00: the sampled flag, plus the random flag of Trace Context Level 2 (which
# a Level 1 reader ignores); every other bit is reserved and is not kept. A later
# version: the sampled flag only, which is all the spec lets a reader of 00 parse.
_FLAGS_00: Final = 0x03
_FLAGS_LATER: Final = 0x01
# Sent: the sampled flag only. Level 1 (which carriers follow) has no other flag, and a
# vendor must set the bits it does not define to zero.
_FLAGS_SENT: Final = 0x01
_FLAGS: Final = tuple(trace.TraceFlags(i) for i in range(4))
_NAMES: Final = {TRACEPARENT: 0, TRACESTATE: 1, BAGGAGE: 2}
_HEADER_NAMES: Final = (TRACEPARENT, TRACESTATE, BAGGAGE)
_BYTE_NAMES: Final = frozenset(name.encode() for name in _HEADER_NAMES)
# The common value (version 00, flags 00 to 0f, nothing around it), matched
# without groups: parse_traceparent's quick path.
_TRACEPARENT_00: Final = re.compile(r"00-[0-9a-f]{32}-[0-9a-f]{16}-0[0-9a-f]")
_FLAGS_00_BY_HEX: Final = {f"0{d:x}": _FLAGS[d & _FLAGS_00] for d in range(16)}
_new_tuple: Final = tuple.__new__
_NO_STATE: Final = trace.DEFAULT_TRACE_STATE


def parse_traceparent(value: str) -> trace.SpanContext | None:
    """The remote span context of one ``traceparent`` value; ``None`` if it is not valid.

    W3C Trace Context Level 1: lower-case hex only; version ``ff``, all-zero
    ids and a version-00 value with anything after its flags are invalid; a
    later version is read for its first four fields, which must end the value
    or be followed by ``-``. Leading and trailing spaces and tabs are allowed.
    """
    if len(value) == 55 and PLAIN_CONTEXT and _TRACEPARENT_00.fullmatch(value) is not None:
        trace_id, span_id = int(value[3:35], 16), int(value[36:52], 16)
        if not trace_id or not span_id:
            return None
        # SpanContext(trace_id, span_id, True, flags) without its checks, which the
        # match and the test above have made (PLAIN_CONTEXT: its tuple layout is known).
        flags_00 = _FLAGS_00_BY_HEX[value[53:]]
        return _new_tuple(trace.SpanContext, (trace_id, span_id, True, flags_00, _NO_STATE, True))
    if len(value) > _MAX_TRACEPARENT:
        return None
    match = _TRACEPARENT.fullmatch(value.strip(" \t"))
    if match is None:
        return None
    version, trace_hex, span_hex, flags_hex, rest = match.groups()
    if version == "ff" or (version == "00" and rest):
        return None
    trace_id, span_id = int(trace_hex, 16), int(span_hex, 16)
    if not trace_id or not span_id:
        return None
    flags = int(flags_hex, 16) & (_FLAGS_00 if version == "00" else _FLAGS_LATER)
    return trace.SpanContext(trace_id, span_id, True, _FLAGS[flags])


def parse_tracestate(values: list[str]) -> trace.TraceState | None:
    """The ``tracestate`` of one or more header values, combined in order; ``None`` to discard.

    Empty members (and empty headers) are skipped, spaces and tabs around
    members allowed. The whole tracestate is discarded when a member is not
    W3C syntax, a key repeats, there are more than 32 members, or the
    combined value is over 8,192 characters (OpenTelemetry's limit).
    """
    if len(values) > 1 and sum(map(len, values)) + len(values) - 1 > _MAX_TRACESTATE:
        return None
    pairs: list[tuple[str, str]] = []
    seen: set[str] = set()
    for header in values:
        if len(header) > _MAX_TRACESTATE:
            return None
        for raw in header.split(","):
            member = raw.strip(" \t")
            if not member:
                continue
            match = _MEMBER.fullmatch(member)
            if match is None:
                return None
            key = match.group(1)
            if key in seen or len(pairs) == 32:
                return None
            seen.add(key)
            pairs.append((key, match.group(2)))
    return trace.TraceState(pairs) if pairs else None


def read_carrier(carrier: object) -> tuple[list[str], list[str], list[str]] | None:
    """The ``traceparent``, ``tracestate`` and ``baggage`` values of *carrier*, in order.

    Header names are matched case-insensitively and every value is kept, so a
    repeated header is seen as repeated: a plain mapping (keys differing in
    case count as repeats), a multi-value mapping (``getall``, ``get_all`` or
    ``getlist``), or anything with ``get``. Only ``str`` values (subclasses
    included, read as plain ``str``) are read; any other value of one of the
    three headers but ``None`` is counted (``carrier_values_not_str``), and so
    is a ``bytes`` key naming one of them (``carrier_not_read``). ``None``
    for what is not a carrier, counted (``carrier_not_read``) unless it is
    ``None``: text, bytes, a list of pairs, an object without ``get``.
    """
    if carrier is None:
        return None
    if isinstance(carrier, (str, bytes, bytearray)):
        count_refusal("carrier_not_read")
        return None
    found: tuple[list[str], list[str], list[str]] = ([], [], [])
    if type(carrier) is dict or (
        isinstance(carrier, Mapping)
        and not hasattr(carrier, "getall")
        and not hasattr(carrier, "getlist")
    ):
        for key, value in carrier.items():
            if key.__class__ is str or isinstance(key, str):
                if 7 <= len(key) <= 11:
                    index = _NAMES.get(key)
                    if index is None:
                        index = _NAMES.get(key.lower())
                    if index is not None:
                        if value.__class__ is str:
                            found[index].append(value)
                        else:
                            _other_value(found[index], value)
            elif isinstance(key, (bytes, bytearray)) and bytes(key).lower() in _BYTE_NAMES:
                count_refusal("carrier_not_read")  # ASGI's raw header names, say: not read
        return found
    many: Callable[[str], Any] | None = None
    for method in ("getall", "get_all"):  # multidict, email.message.Message: (name, default)
        bound = getattr(carrier, method, None)
        if callable(bound):
            many = functools.partial(bound, default=None) if method == "getall" else bound
            break
    else:
        getlist = getattr(carrier, "getlist", None)  # starlette's Headers
        if callable(getlist):
            many = getlist
    if many is not None:
        for index, name in enumerate(_HEADER_NAMES):
            for value in many(name) or ():
                if value.__class__ is str:
                    found[index].append(value)
                else:
                    _other_value(found[index], value)
        return found
    getter = getattr(carrier, "get", None)
    if not callable(getter):
        count_refusal("carrier_not_read")  # a list of (name, value) pairs, say
        return None
    for index, name in enumerate(_HEADER_NAMES):
        value = getter(name)
        if value.__class__ is str:
            found[index].append(value)
        else:
            _other_value(found[index], value)
    return found


def _other_value(values: list[str], value: object) -> None:
    """Append a ``str`` subclass's text to *values*, as a plain ``str`` (its methods are
    not called); count any other value (bytes, say) and leave it out. ``None`` is what a
    ``get`` gives for a header that is not there: not counted."""
    if isinstance(value, str):
        values.append(str.__str__(value))
    elif value is not None:
        count_refusal("carrier_values_not_str")


class _Remote:
    """What one carrier holds: a span context, the caller's baggage, the scope values."""

    __slots__ = ("baggage", "scopes", "span_context")

    def __init__(self, carrier: object, *, scopes: bool) -> None:
        self.span_context: trace.SpanContext | None = None
        self.baggage: dict[str, str] | None = None
        self.scopes: ScopeValues | None = None
        found = read_carrier(carrier)
        if found is None:
            return
        parents, states, bags = found
        if len(parents) == 1:  # two traceparent headers are invalid: a new trace
            span_context = parse_traceparent(parents[0])
            if span_context is None:
                count_refusal("traceparent_invalid")
            elif states:
                state = parse_tracestate(states)
                if state is not None:
                    span_context = trace.SpanContext(
                        span_context.trace_id,
                        span_context.span_id,
                        True,
                        span_context.trace_flags,
                        state,
                    )
                elif _not_empty(states):
                    count_refusal("tracestate_dropped")
            self.span_context = span_context
        elif parents:
            count_refusal("traceparent_invalid")
        # W3C: tracestate goes with a valid traceparent only (with none, it is not looked at)
        if parents and states and self.span_context is None and _not_empty(states):
            count_refusal("tracestate_dropped")
        if bags and scopes:
            user, values = decode_baggage(bags)
            self.baggage = user or None
            self.scopes = values or None


def _not_empty(states: list[str]) -> bool:
    """Whether *states* hold a member: anything but blanks and commas."""
    return any(value.strip(" \t,") for value in states)


def context_from_carrier(carrier: object) -> otel_context.Context | None:
    """The OTel context a carrier describes, or ``None`` if it is not valid W3C."""
    try:
        remote = _Remote(carrier, scopes=False)
    except Exception:  # a hostile mapping: treat as no carrier
        return None
    if remote.span_context is None:
        return None
    # Keep the caller's other context values (baggage, ...): only the span changes.
    return trace.set_span_in_context(
        trace.NonRecordingSpan(remote.span_context), otel_context.get_current()
    )


class remote_trace_context(SyncAndAsync["remote_trace_context"]):
    """Run a block under the span context of a W3C *carrier*.

    Attaches on enter and detaches on exit (``with`` and ``async with``). An
    empty, ``None`` or malformed carrier makes it a no-op: it never raises.
    With ``propagate_scopes`` on, the scopes the carrier's ``baggage`` brings
    (iteration, per-prompt, task and session) are entered for the block too,
    and the sender's own baggage entries are put in the OpenTelemetry context.

    Example:
        >>> with remote_trace_context({"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}):
        ...     pass
    """

    __slots__ = ("_open", "_remote", "_scope_state", "_scope_token", "_token")

    def __init__(self, carrier: Mapping[str, str] | None) -> None:
        self._remote: _Remote | None = None
        self._token: object | None = None
        self._scope_token: Token[ScopeState] | None = None
        self._scope_state: ScopeState | None = None
        self._open = False
        try:
            if not carrier:
                return
            self._remote = _Remote(carrier, scopes=GATE.propagate_scopes)
        except Exception:  # a hostile mapping, or a truth value that raises: no carrier
            count_refusal("carrier_not_read")
            self._remote = None

    @property
    def valid(self) -> bool:
        """Whether the carrier held a valid W3C span context."""
        remote = self._remote
        return remote is not None and remote.span_context is not None

    def __enter__(self) -> remote_trace_context:
        if self._open:  # its one token would be overwritten: the first entry's context leaks
            raise RuntimeError("remote_trace_context is already entered; make one per block")
        self._open = True
        remote = self._remote
        if remote is None:
            return self
        try:
            var = _CONTEXT_VAR
            if var is not None and remote.span_context is not None and not remote.baggage:
                # set_span_in_context and attach without their layers (as _spans.attach)
                values = var.get().copy()
                values[_SPAN_KEY] = trace.NonRecordingSpan(remote.span_context)
                self._token = var.set(otel_context.Context(values))
            elif remote.span_context is not None or remote.baggage:
                ctx = otel_context.get_current()
                if remote.span_context is not None:
                    ctx = trace.set_span_in_context(
                        trace.NonRecordingSpan(remote.span_context), ctx
                    )
                if remote.baggage:
                    ctx = _with_baggage(remote.baggage, ctx)
                self._token = otel_context.attach(ctx)
            if remote.scopes is not None:
                state = self._scope_state = remote.scopes.applied_to(SCOPES.get())
                self._scope_token = SCOPES.set(state)
        except Exception as exc:
            report_internal_error(("remote_trace_context",), exc)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._open = False
        scope_token, self._scope_token = self._scope_token, None
        if scope_token is not None and self._scope_state is not None:
            leave_all(scope_token, self._scope_state)
        token, self._token = self._token, None
        if token is not None:
            var = _CONTEXT_VAR
            if var is None:  # OpenTelemetry's runtime context is not its ContextVar one
                otel_context.detach(token)  # type: ignore[arg-type]
                return
            try:
                var.reset(token)  # type: ignore[arg-type]
            except Exception:  # a token of another context, or used already: OpenTelemetry's
                otel_context.detach(token)  # type: ignore[arg-type]  # detach logs it


def _signature_with_carrier(fn: Callable[..., Any]) -> inspect.Signature | None:
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    params = list(signature.parameters.values())
    missing = [name for name in _CARRIER_KWARGS if name not in signature.parameters]
    if not missing:
        return signature
    extra = [
        inspect.Parameter(
            name,
            inspect.Parameter.KEYWORD_ONLY,
            default=None,
            annotation="Mapping[str, str] | None",
        )
        for name in missing
    ]
    if params and params[-1].kind is inspect.Parameter.VAR_KEYWORD:
        params[len(params) - 1 : len(params) - 1] = extra
    else:
        params.extend(extra)
    return signature.replace(parameters=params)


def _no_carrier(carrier: object) -> bool:
    """Whether *carrier* holds nothing to read: ``None``, empty, or an object whose truth
    value raises (a numpy array, say), which is not a carrier either."""
    try:
        return not carrier
    except Exception:
        return True


def _carrier_of(kwargs: dict[str, Any], declared: frozenset[str]) -> Any:
    """The carrier passed under either keyword; a keyword *fn* declares stays in *kwargs*."""
    carrier = None
    for name in _CARRIER_KWARGS:
        if name in kwargs:
            value = kwargs[name] if name in declared else kwargs.pop(name)
            if _no_carrier(carrier):
                carrier = value
    return carrier


def _take_carrier(kwargs: dict[str, Any], keep: bool) -> Any:
    return kwargs.get(CARRIER_KWARG) if keep else kwargs.pop(CARRIER_KWARG, None)


def accepts_trace_context(fn: F) -> F:
    """Let *fn* accept a ``trace_carrier=`` keyword and run under that context.

    Works on functions and methods, sync and async. The wrapper's
    ``inspect.signature`` shows the extra keyword, so signature checks such as
    Ray's accept the call. Called without a carrier, *fn* runs as before.
    nemo-lens's keyword, ``_otel_carrier=``, is accepted as well, so a caller
    still on lens (``ray_dispatch_with_context``) reaches an asynctrace actor
    during a migration; when both are given, the first non-empty one of
    ``trace_carrier`` and ``_otel_carrier`` wins.

    Example:
        >>> @accepts_trace_context
        ... def run_rollouts(batch):
        ...     return len(batch)
        >>> run_rollouts([1, 2], trace_carrier={})
        2
        >>> run_rollouts([1, 2], _otel_carrier={})
        2
    """
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise ConfigurationError(
            f"accepts_trace_context({fn.__qualname__}): generator functions are not supported; "
            "open remote_trace_context(carrier) inside the generator instead"
        )
    # keywords the function declares itself are passed through
    declared: frozenset[str] = frozenset()
    try:
        declared = frozenset(inspect.signature(fn).parameters) & frozenset(_CARRIER_KWARGS)
    except (TypeError, ValueError):
        pass

    if inspect.iscoroutinefunction(fn):

        @functools.wraps(fn)
        async def async_wrapper(*args: Any, **kwargs: Any) -> Any:
            carrier = _carrier_of(kwargs, declared)
            if _no_carrier(carrier):
                return await fn(*args, **kwargs)
            with remote_trace_context(carrier):
                return await fn(*args, **kwargs)

        wrapper: Callable[..., Any] = async_wrapper
    else:

        @functools.wraps(fn)
        def sync_wrapper(*args: Any, **kwargs: Any) -> Any:
            carrier = _carrier_of(kwargs, declared)
            if _no_carrier(carrier):
                return fn(*args, **kwargs)
            remote = remote_trace_context(carrier)
            with remote:
                result = fn(*args, **kwargs)
            # An object with ``async def __call__``, or an async def under a decorator
            # that is not async-aware: its body runs when awaited, under the carrier too.
            if result.__class__ is _CoroutineType:
                return _awaited_in(remote, result)
            return result

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


def _awaited_in(remote: remote_trace_context, body: Any) -> Any:
    """A coroutine that awaits *body* inside *remote* (entered again, for the await).

    Named as *body* (a task's repr, a stall span's coroutine name). Closed
    before it starts (a task cancelled at once), it closes *body* too, which
    would otherwise warn that it was never awaited (as ``bind_context``'s).
    """
    from ._threads import _Unstarted  # here: _threads imports this module

    wrapped: CoroutineType[Any, Any, Any] = cast("Any", _in_remote(remote, _Unstarted(body)))
    wrapped.__name__, wrapped.__qualname__ = body.__name__, body.__qualname__
    return wrapped


async def _in_remote(remote: remote_trace_context, pending: Any) -> Any:
    body = pending.coro  # taken here only, once
    pending.coro = None
    with remote:
        return await body


def dispatch_with_trace_context(
    fn: Callable[..., Any], /, *args: Any, carrier_kwarg: str = CARRIER_KWARG, **kwargs: Any
) -> Any:
    """Call ``fn(*args, trace_carrier=current_trace_carrier(), **kwargs)``.

    The call-site half of :func:`accepts_trace_context`, e.g. for
    ``actor.method.remote``. ``carrier_kwarg="_otel_carrier"`` sends the
    carrier under nemo-lens's keyword instead, for an actor still wrapped by
    lens's ``traced_remote_call``.

    Example:
        >>> dispatch_with_trace_context(lambda x, trace_carrier: (x, trace_carrier), 1)
        (1, {})
        >>> dispatch_with_trace_context(
        ...     lambda x, _otel_carrier: (x, _otel_carrier), 1, carrier_kwarg="_otel_carrier"
        ... )
        (1, {})
    """
    if carrier_kwarg not in _CARRIER_KWARGS:
        raise ConfigurationError(
            f"dispatch_with_trace_context: carrier_kwarg={carrier_kwarg!r} is not accepted; "
            f"use one of {', '.join(map(repr, _CARRIER_KWARGS))}"
        )
    kwargs[carrier_kwarg] = current_trace_carrier()
    return fn(*args, **kwargs)


_ENV_PAIRS: Final = ((ENV_TRACEPARENT, TRACEPARENT), (ENV_TRACESTATE, TRACESTATE))
_ENV_PAIRS_SCOPES: Final = (*_ENV_PAIRS, (ENV_BAGGAGE, BAGGAGE))


def inject_env(env: MutableMapping[str, str] | None = None) -> MutableMapping[str, str]:
    """Put the current trace context into ``TRACEPARENT``/``TRACESTATE`` of *env*.

    *env* defaults to a copy of ``os.environ``. Stale values are removed when
    there is no valid span context, so a child never inherits an old parent.
    With ``propagate_scopes`` on, ``BAGGAGE`` carries the scopes (and is
    removed likewise when there are none); with it off, ``BAGGAGE`` is left
    as it is. Returns *env*, ready for ``subprocess.run(..., env=...)``.

    Example:
        >>> env = inject_env({"PATH": "/usr/bin"})
        >>> "TRACEPARENT" in env
        False
    """
    target: MutableMapping[str, str] = dict(os.environ) if env is None else env
    carrier = current_trace_carrier()
    # BAGGAGE is asynctrace's only with propagate_scopes on; else it is the caller's own
    pairs = _ENV_PAIRS_SCOPES if GATE.propagate_scopes else _ENV_PAIRS
    for env_key, key in pairs:
        if key in carrier:
            target[env_key] = carrier[key]
        else:
            target.pop(env_key, None)
    return target


def extract_env(environ: Mapping[str, str] | None = None) -> remote_trace_context:
    """The trace context carried in ``TRACEPARENT``/``TRACESTATE`` (default ``os.environ``).

    Returns a :class:`remote_trace_context`: ``with extract_env(): ...`` runs
    the block under the parent process's span (and, with ``propagate_scopes``
    on, in the scopes ``BAGGAGE`` carries). Missing or malformed values make
    it a no-op (a value that is not ``str`` is counted, as in any carrier).

    Example:
        >>> with extract_env({}):
        ...     pass
    """
    source = os.environ if environ is None else environ
    carrier: dict[str, object] = {}
    try:
        parent = source.get(ENV_TRACEPARENT)
        state = source.get(ENV_TRACESTATE)
        bag = source.get(ENV_BAGGAGE)
    except Exception:
        parent = state = bag = None
    # Whatever is there goes to the carrier, where a value that is not text is counted
    if parent is not None:
        carrier[TRACEPARENT] = parent
        if state is not None:
            carrier[TRACESTATE] = state
    if bag is not None:
        carrier[BAGGAGE] = bag
    return remote_trace_context(cast("dict[str, str]", carrier))
