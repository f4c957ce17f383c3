"""Scopes sent in W3C Baggage: what a carrier's ``baggage`` holds.

With ``propagate_scopes`` on, a carrier's ``baggage`` holds the iteration,
per-prompt, task and session scopes under the ``asynctrace.`` prefix, next to
the caller's own OpenTelemetry baggage entries (which pass through as they
are, encoded as OpenTelemetry's W3C baggage propagator encodes them). The
bucket scope is never sent: the far side runs on its own timeline, where the
caller's bucket would be counted against the wrong wall clock. Sent baggage
keeps to the W3C limits: an entry that would break one, or that cannot be
encoded, is left out, counted, and logged once per process (without its
value); the rest of the carrier is sent.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Final
from urllib.parse import quote, quote_plus

from ._carrier_stats import _counts, _counts_lock
from ._errors import logger
from ._scopes import SCOPES, ScopeState
from ._session_names import redacted_name

__all__ = [
    "ITERATION_KEY",
    "MAX_HEADER",
    "MAX_MEMBER",
    "MAX_MEMBERS",
    "PER_PROMPT_KEY",
    "PREFIX",
    "SESSION_KEY",
    "TASK_KEY",
    "encode",
    "merge_baggage",
]

PREFIX: Final = "asynctrace."
ITERATION_KEY: Final = "asynctrace.iteration"
PER_PROMPT_KEY: Final = "asynctrace.per_prompt"
TASK_KEY: Final = "asynctrace.task_id"
SESSION_KEY: Final = "asynctrace.session_id"
# W3C Baggage limits, as OpenTelemetry's W3C baggage propagator applies them.
MAX_HEADER: Final = 8192
MAX_MEMBER: Final = 4096
MAX_MEMBERS: Final = 180
_not_sent_logged = False  # the first entry left out of sent baggage is logged; no later one


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


_CANNOT_ENCODE: Final = (
    "their key or value cannot be encoded (its str() raised, or it is not valid UTF-8 text)"
)


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
