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
(:func:`carrier_stats`), never logged per request and never raised.
"""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Mapping
from typing import Any, Final
from urllib.parse import quote, quote_plus, unquote, unquote_plus

from ._forksafe import reinit_at_fork
from ._scopes import SCOPES, ScopeState

__all__ = ["ScopeValues", "carrier_stats", "decode", "encode", "parse"]

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
_KEY: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VALUE: Final = re.compile(r"[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*")
_PROPERTY: Final = re.compile(
    r"[ \t]*[!#$%&'*+\-.^_`|~0-9A-Za-z]+[ \t]*"
    r"(?:=[ \t]*[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*)?[ \t]*"
)
_INT: Final = re.compile(r"-?[0-9]{1,19}")
# A member that is just key=value (no blanks, no properties), in one match.
_SIMPLE: Final = re.compile(
    r"([!#$%&'*+\-.^_`|~0-9A-Za-z]+)=([\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*)"
)
# What encode() sends when the scopes are all there is, matched against "," + header:
# the members in encode()'s order, each optional, integer task ids, and session ids of
# unreserved characters (nothing to unquote). Each value is one the full parser accepts
# and reads the same way; any other header takes the full parser.
_OWN: Final = re.compile(
    r"(?:,asynctrace\.iteration=(-?[0-9]{1,19}))?"
    r"(,asynctrace\.per_prompt=1)?"
    r"(?:,asynctrace\.task_id=(-?[0-9]{1,19}))?"
    r"(?:,asynctrace\.session_id=([-.0-9A-Z_a-z~]{1,1024}))?"
)

_counts_lock = threading.Lock()
reinit_at_fork(_counts_lock)  # a lock held at fork() is made new in the child
_counts = {"baggage_headers_dropped": 0, "baggage_entries_skipped": 0, "scope_values_skipped": 0}


def _count(name: str, n: int = 1) -> None:
    with _counts_lock:
        _counts[name] += n


def carrier_stats() -> dict[str, int]:
    """What carriers refused to read of received baggage, since the process started.

    ``baggage_headers_dropped``: whole headers over 8,192 bytes;
    ``baggage_entries_skipped``: entries past the 180th, over 4,096 bytes, or
    not W3C Baggage syntax (non-ASCII text included); ``scope_values_skipped``:
    ``asynctrace.*`` entries whose value is not one a scope takes.

    Example:
        >>> sorted(carrier_stats())
        ['baggage_entries_skipped', 'baggage_headers_dropped', 'scope_values_skipped']
    """
    with _counts_lock:
        return dict(_counts)


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
        if state.task_id is not None:
            parts.append(f"{TASK_KEY}={quote(json.dumps(state.task_id), safe='')}")
        if state.session_id is not None:
            parts.append(f"{SESSION_KEY}={quote(state.session_id, safe='')}")
        members = ",".join(p for p in parts if len(p) <= MAX_MEMBER)
        cache[_SCOPES_KEY] = members
    return members


def encode(user: Mapping[str, object]) -> str:
    """The ``baggage`` value for the current scopes plus the caller's own entries *user*.

    Scope members come first, so the limits never push them out. A user
    entry under the ``asynctrace.`` prefix is replaced by the scopes; one that
    would break a limit is left out whole (W3C: never a partial member).
    """
    header = _scope_members(SCOPES.get())
    if not user:
        return header
    count = header.count(",") + 1 if header else 0
    length = len(header)
    parts = [header] if header else []
    for key, value in user.items():
        name = str(key)
        if name.startswith(PREFIX):
            continue
        member = f"{quote_plus(name)}={quote_plus(str(value))}"
        added = len(member) + (1 if count else 0)
        if len(member) > MAX_MEMBER or count >= MAX_MEMBERS or length + added > MAX_HEADER:
            continue
        parts.append(member)
        count += 1
        length += added
    return ",".join(parts)


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
            scopes.iteration = int(iteration)
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
        seen += 1
        if len(member) > MAX_MEMBER:
            skipped += 1
            continue
        name, sep, rest = member.partition("=")
        name = name.rstrip(" \t")
        value, semicolon, properties = rest.partition(";")
        value = value.strip(" \t")
        if (
            not sep
            or _KEY.fullmatch(name) is None
            or _VALUE.fullmatch(value) is None
            # every ";" opens a property, which needs a key ("k=v;" is not a member)
            or (semicolon and not all(_PROPERTY.fullmatch(p) for p in properties.split(";")))
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


def _scope_value(scopes: ScopeValues, name: str, raw: str) -> None:
    """Set one ``asynctrace.*`` value on *scopes*; one a scope cannot take is counted."""
    ok = False
    try:
        if name == ITERATION_KEY:
            if _INT.fullmatch(raw):
                scopes.iteration, ok = int(raw), True
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
    """A task id sent as JSON: an integer or a string, nothing else."""
    if _INT.fullmatch(text):
        return int(text)
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        try:
            value: Any = json.loads(text)
        except ValueError:
            return None
        return value if isinstance(value, str) else None
    return None
