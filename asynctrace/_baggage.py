"""Scopes in W3C Baggage: what a carrier sends of the scopes, and what it restores.

With ``propagate_scopes`` on, a carrier's ``baggage`` holds the iteration,
per-prompt, task and session scopes under the ``asynctrace.`` prefix, next to
the caller's own OpenTelemetry baggage entries (which pass through as they
are, encoded as OpenTelemetry's W3C baggage propagator encodes them). The
bucket scope is never sent: the far side runs on its own timeline, where the
caller's bucket would be counted against the wrong wall clock.

Received baggage is untrusted input: a header over 8,192 bytes is dropped
whole, entries past the 180th, entries over 4,096 bytes and entries that are
not W3C Baggage syntax are skipped, and each is counted
(:func:`carrier_stats`), never logged per request and never raised. Sent
baggage keeps to the same limits: an entry that would break one, or that
cannot be encoded, is left out, counted, and logged once per process
(without its value); the rest of the carrier is sent.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import quote, quote_plus, unquote, unquote_plus

from ._errors import logger
from ._forksafe import reinit_at_fork
from ._scopes import SCOPES, ScopeState
from ._session_record import redacted_name

__all__ = ["ScopeValues", "carrier_stats", "decode", "encode", "merge_baggage", "parse"]

PREFIX: Final = "asynctrace."
ITERATION_KEY: Final = "asynctrace.iteration"
PER_PROMPT_KEY: Final = "asynctrace.per_prompt"
TASK_KEY: Final = "asynctrace.task_id"
SESSION_KEY: Final = "asynctrace.session_id"

# W3C Baggage limits, as OpenTelemetry's W3C baggage propagator applies them.
MAX_HEADER: Final = 8192
MAX_MEMBER: Final = 4096
MAX_MEMBERS: Final = 180

# W3C Baggage: key = token (RFC 7230 tchar); value = *baggage-octet; then properties.
# No pattern here has two optional blank runs side by side (they backtrack quadratically
# over a long run of blanks): blanks are stripped first, then each part is matched alone.
_KEY: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VALUE: Final = re.compile(r"[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*")
_INT: Final = re.compile(r"-?[0-9]{1,19}")
# What an iteration or an integer task id may be: a 64-bit attribute, as iteration_scope takes.
_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
# A member that is just key=value (no blanks, no properties), in one match.
_SIMPLE: Final = re.compile(
    r"([!#$%&'*+\-.^_`|~0-9A-Za-z]+)=([\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*)"
)
# What encode() sends when the scopes are all there is, matched against "," + header:
# the members in encode()'s order, each optional, integer task ids, and session ids of
# unreserved characters (nothing to unquote). Each value is one the full parser accepts
# and reads the same way; any other header takes the full parser. Integers of up to 18
# digits are within int64 by their length alone; a 19-digit one is range-checked there.
_OWN: Final = re.compile(
    r"(?:,asynctrace\.iteration=(-?[0-9]{1,18}))?"
    r"(,asynctrace\.per_prompt=1)?"
    r"(?:,asynctrace\.task_id=(-?[0-9]{1,18}))?"
    r"(?:,asynctrace\.session_id=([-.0-9A-Z_a-z~]{1,1024}))?"
)

_counts_lock = threading.Lock()
reinit_at_fork(_counts_lock)  # a lock held at fork() is made new in the child
_counts = {
    "baggage_headers_dropped": 0,
    "baggage_entries_skipped": 0,
    "scope_values_skipped": 0,
    "baggage_entries_not_sent": 0,
    "traceparent_invalid": 0,
    "tracestate_dropped": 0,
    "carrier_values_not_str": 0,
    "carrier_not_read": 0,
}
_not_sent_logged = False  # the first entry left out of sent baggage is logged; no later one


def _count(name: str, n: int = 1) -> None:
    with _counts_lock:
        _counts[name] += n


def carrier_stats() -> dict[str, int]:
    """What carriers refused to read, and to send, since the process started.

    Received: ``baggage_headers_dropped``: whole ``baggage`` headers over
    8,192 bytes; ``baggage_entries_skipped``: entries past the 180th, over
    4,096 bytes, or not W3C Baggage syntax (non-ASCII text included);
    ``scope_values_skipped``: ``asynctrace.*`` entries whose value is not one
    a scope takes (an integer outside int64 included); ``traceparent_invalid``:
    carriers whose ``traceparent`` is not valid W3C, or repeated;
    ``tracestate_dropped``: carriers whose non-empty ``tracestate`` was
    discarded (not W3C, or its ``traceparent`` invalid or repeated);
    ``carrier_values_not_str``: values of
    ``traceparent``, ``tracestate`` or ``baggage`` that are not ``str``
    (bytes, say), which are not read; ``carrier_not_read``: carriers of a
    shape that is not read (text, bytes, a list of ``(name, value)`` pairs
    such as ASGI's ``scope["headers"]`` or gRPC metadata, an object without
    ``get``, one whose reading raised) and ``bytes`` keys naming one of the
    three headers, which are not read either (``None`` and an empty carrier
    are not counted).

    Sent: ``baggage_entries_not_sent``: entries left out of a carrier's
    ``baggage`` because they would break a W3C Baggage limit (4,096 bytes an
    entry, 180 entries, 8,192 bytes the header), or because their key or
    value cannot be encoded (its ``str()`` raises, or it holds a lone
    surrogate), counted each time the header is made (a scope entry once per
    scope state). The other entries, and ``traceparent``, are sent.

    Example:
        >>> sorted(carrier_stats())  # doctest: +NORMALIZE_WHITESPACE
        ['baggage_entries_not_sent', 'baggage_entries_skipped', 'baggage_headers_dropped',
         'carrier_not_read', 'carrier_values_not_str', 'scope_values_skipped',
         'traceparent_invalid', 'tracestate_dropped']
    """
    with _counts_lock:
        return dict(_counts)


def _not_sent(n: int, what: str, why: str = "") -> None:
    """Count *n* entries left out of sent baggage; log the first time only (no values).

    *why*: the reason, when it is not a W3C Baggage limit.
    """
    global _not_sent_logged
    with _counts_lock:
        _counts["baggage_entries_not_sent"] += n
        first, _not_sent_logged = not _not_sent_logged, True
    if first:
        logger.warning(
            "asynctrace: %s not sent in baggage: %s; carrier_stats()['baggage_entries_not_sent'] "
            "counts such entries, which are not logged again",
            what,
            why
            or f"W3C Baggage allows {MAX_MEMBER} bytes an entry, {MAX_MEMBERS} entries "
            f"and {MAX_HEADER} bytes the header",
        )


class ScopeValues:
    """The scope values one carrier brought (``None``: not sent)."""

    __slots__ = ("iteration", "per_prompt", "session_id", "task_id")

    def __init__(self) -> None:
        self.iteration: int | None = None
        self.per_prompt: bool | None = None
        self.task_id: int | str | None = None
        self.session_id: str | None = None

    def __bool__(self) -> bool:
        return not (
            self.iteration is None
            and self.per_prompt is None
            and self.task_id is None
            and self.session_id is None
        )

    def applied_to(self, state: ScopeState) -> ScopeState:
        """*state* with the values sent here in place of its own (its bucket kept)."""
        return ScopeState(
            state.bucket,
            state.per_prompt if self.per_prompt is None else self.per_prompt,
            state.iteration if self.iteration is None else self.iteration,
            state.task_id if self.task_id is None else self.task_id,
            state.session_id if self.session_id is None else self.session_id,
        )


_SCOPES_KEY: Final = "asynctrace.baggage"  # the scope members of a state, in its cache


def _scope_members(state: ScopeState) -> str:
    """The ``asynctrace.*`` members for *state*, made once per state (states are immutable)."""
    cache = state.cache
    members: str | None = cache.get(_SCOPES_KEY)
    if members is None:
        parts = []
        if state.iteration is not None:
            parts.append(f"{ITERATION_KEY}={int(state.iteration)}")
        if state.per_prompt:
            parts.append(f"{PER_PROMPT_KEY}=1")
        task_id = state.task_id
        if task_id is not None:
            if isinstance(task_id, str):  # redacted as the rl.task_id stamp is
                task_id = redacted_name(task_id)
            parts.append(f"{TASK_KEY}={quote(json.dumps(task_id), safe='')}")
        if state.session_id is not None:
            parts.append(f"{SESSION_KEY}={quote(state.session_id, safe='')}")
        kept: list[str] = []
        length = -1  # the first member has no comma before it
        for part in parts:
            if len(part) <= MAX_MEMBER and length + 1 + len(part) <= MAX_HEADER:
                kept.append(part)
                length += 1 + len(part)
        members = ",".join(kept)
        cache[_SCOPES_KEY] = members
        if len(kept) < len(parts):  # a long task or session id: once per state, as it is cached
            left_out = [p.partition("=")[0] for p in parts if p not in kept]
            _not_sent(len(left_out), ", ".join(left_out))
    return members


def encode(user: Mapping[str, object]) -> str:
    """The ``baggage`` value for the current scopes plus the caller's own entries *user*.

    Scope members come first, so the limits never push them out. A user
    entry under the ``asynctrace.`` prefix is replaced by the scopes; one that
    would break a limit is left out whole (W3C: never a partial member), and
    counted (``baggage_entries_not_sent``).
    """
    header = _scope_members(SCOPES.get())
    if not user:
        return header
    count = header.count(",") + 1 if header else 0
    length = len(header)
    parts = [header] if header else []
    left_out = unreadable = 0
    for key, value in user.items():
        try:
            name = str(key)
            if name.startswith(PREFIX):
                continue
            member = f"{quote_plus(name)}={quote_plus(str(value))}"
        except Exception:  # str() raises, or a lone surrogate cannot be encoded: this one only
            unreadable += 1
            continue
        added = len(member) + (1 if count else 0)
        if len(member) > MAX_MEMBER or count >= MAX_MEMBERS or length + added > MAX_HEADER:
            left_out += 1
            continue
        parts.append(member)
        count += 1
        length += added
    if left_out:
        _not_sent(left_out, f"{left_out} of your own entries")
    if unreadable:
        _not_sent(unreadable, f"{unreadable} of your own entries", _CANNOT_ENCODE)
    return ",".join(parts)


_CANNOT_ENCODE: Final = (
    "their key or value cannot be encoded (its str() raised, or it is not valid UTF-8 text)"
)


def merge_baggage(existing: Sequence[str], sent: str) -> str | None:
    """The ``baggage`` header for a request whose caller set its own: *existing*
    (the caller's header values) with the ``asynctrace.*`` members of *sent*
    (a carrier's ``baggage``, as :func:`current_trace_carrier` makes it) added.

    For HTTP clients that let a caller's own ``baggage`` header win over the
    carrier's. The caller's values are kept whole, combined in order (as HTTP
    combines repeated headers). A scope member is added after them unless the
    caller's header holds that key already (the caller's value wins), and only
    while the header stays within W3C Baggage's limits (180 members, 8,192
    bytes), over which a receiver drops the whole header. A member left out
    is counted in :func:`carrier_stats` (``baggage_entries_not_sent``).
    Returns ``None`` when nothing is added: the caller's headers go as set.

    Example:
        >>> merge_baggage(["a=1", "b=2"], "asynctrace.iteration=7,user=x")
        'a=1,b=2,asynctrace.iteration=7'
        >>> merge_baggage(["asynctrace.iteration=3"], "asynctrace.iteration=7") is None
        True
    """
    ours = [m for m in sent.split(",") if m.startswith(PREFIX)]
    if not ours:
        return None
    header = ",".join(existing)
    keys = set()
    count = 0
    for member in header.split(","):
        key = member.partition("=")[0].partition(";")[0].strip(" \t")
        if key:
            count += 1
            keys.add(key)
    length = len(header) if header.isascii() else len(header.encode("utf-8", "replace"))
    parts = [header] if header.strip(" \t") else []
    kept = len(parts)
    left_out = []
    for member in ours:
        key = member.partition("=")[0]
        if key in keys:
            continue
        added = len(member) + (1 if parts else 0)
        if count >= MAX_MEMBERS or length + added > MAX_HEADER:
            left_out.append(key)
            continue
        parts.append(member)
        count += 1
        length += added
    if left_out:
        _not_sent(len(left_out), ", ".join(left_out))
    return ",".join(parts) if len(parts) > kept else None


def decode(values: list[str]) -> tuple[dict[str, str], ScopeValues]:
    """Read received ``baggage`` header values (combined in order, as HTTP combines them).

    Returns the caller's own entries (decoded as OpenTelemetry's propagator
    decodes them) and the scope values. Never raises; what is refused is
    counted.
    """
    header = ",".join(values) if len(values) != 1 else values[0]
    own = _OWN.fullmatch("," + header) if header else None
    if own is not None:  # the common header, in one match
        scopes = ScopeValues()
        iteration, per_prompt, task, session = own.groups()
        if iteration is not None:
            scopes.iteration = int(iteration)  # 18 digits at most: within int64
        if per_prompt is not None:
            scopes.per_prompt = True
        if task is not None:
            scopes.task_id = int(task)
        scopes.session_id = session
        return {}, scopes
    return parse(header)


def parse(header: str) -> tuple[dict[str, str], ScopeValues]:
    """:func:`decode` of one combined header, member by member (no fast path)."""
    user: dict[str, str] = {}
    scopes = ScopeValues()
    if not header:
        return user, scopes
    if len(header) > MAX_HEADER or (
        not header.isascii() and len(header.encode("utf-8", "replace")) > MAX_HEADER
    ):
        _count("baggage_headers_dropped")
        return user, scopes
    members = header.split(",")
    skipped = 0
    seen = 0
    for raw in members:
        if seen >= MAX_MEMBERS:  # past the limit: each non-empty member is counted, not read
            if raw.strip(" \t"):
                skipped += 1
            continue
        simple = _SIMPLE.fullmatch(raw) if len(raw) <= MAX_MEMBER else None
        if simple is not None:  # name=value without blanks or properties: what most members are
            seen += 1
            name, value = simple.groups()
            if name.startswith(PREFIX):
                _scope_value(scopes, name, value)
            elif "%" in name or "+" in name or "%" in value or "+" in value:
                key = unquote_plus(name) if "%" in name or "+" in name else name
                user[key.strip()] = (
                    unquote_plus(value) if "%" in value or "+" in value else value
                ).strip()
            else:  # neither holds a blank: nothing to decode or strip
                user[name] = value
            continue
        member = raw.strip(" \t")
        if not member:
            continue
        # Dropped before the 180 are counted, as OpenTelemetry's propagator drops them:
        # a non-ASCII or over-long entry does not push a later valid one out.
        if len(member) > MAX_MEMBER or not member.isascii():
            skipped += 1
            continue
        seen += 1
        name, sep, rest = member.partition("=")
        name = name.rstrip(" \t")
        value, semicolon, properties = rest.partition(";")
        value = value.strip(" \t")
        if (
            not sep
            or _KEY.fullmatch(name) is None
            or _VALUE.fullmatch(value) is None
            # every ";" opens a property, which needs a key ("k=v;" is not a member)
            or (semicolon and not all(map(_property, properties.split(";"))))
        ):
            skipped += 1
            continue
        if name.startswith(PREFIX):
            _scope_value(scopes, name, value)
            continue
        rest = rest.strip(" \t")
        # unquote_plus only where there is something to decode (most entries are plain)
        key = unquote_plus(name) if "%" in name or "+" in name else name
        user[key.strip()] = (unquote_plus(rest) if "%" in rest or "+" in rest else rest).strip()
    if skipped:
        _count("baggage_entries_skipped", skipped)
    return user, scopes


def _property(text: str) -> bool:
    """Whether *text* is one W3C Baggage property, ``OWS key OWS [ "=" OWS value ] OWS``.

    Stripped and split before anything is matched, so that no pattern meets a
    run of blanks it could split two ways: linear in the length of *text*.
    """
    key, sep, value = text.strip(" \t").partition("=")
    return _KEY.fullmatch(key.rstrip(" \t")) is not None and (
        not sep or _VALUE.fullmatch(value.lstrip(" \t")) is not None
    )


def _int64(text: str) -> int | None:
    """*text* as a decimal integer that fits int64 (as a scope takes it), else ``None``."""
    if _INT.fullmatch(text) is None:
        return None
    number = int(text)
    return number if _INT64_MIN <= number <= _INT64_MAX else None


def _scope_value(scopes: ScopeValues, name: str, raw: str) -> None:
    """Set one ``asynctrace.*`` value on *scopes*; one a scope cannot take is counted."""
    ok = False
    try:
        if name == ITERATION_KEY:
            iteration = _int64(raw)
            if iteration is not None:
                scopes.iteration, ok = iteration, True
        elif name == PER_PROMPT_KEY:
            if raw in ("1", "0"):
                scopes.per_prompt, ok = raw == "1", True
        elif name == TASK_KEY:
            task = _task_id(unquote(raw, errors="strict"))
            if task is not None:
                scopes.task_id, ok = task, True
        elif name == SESSION_KEY:
            session = unquote(raw, errors="strict")
            if session:
                scopes.session_id, ok = session, True
    except (ValueError, UnicodeDecodeError):
        ok = False
    if not ok:
        _count("scope_values_skipped")


def _task_id(text: str) -> int | str | None:
    """A task id sent as JSON: an integer within int64 or a string, nothing else."""
    if _INT.fullmatch(text):
        return _int64(text)
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        try:
            value: Any = json.loads(text)
        except ValueError:
            return None
        return value if isinstance(value, str) else None
    return None
