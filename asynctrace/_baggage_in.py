"""Scopes received in W3C Baggage: what a carrier's ``baggage`` restores.

Received baggage is untrusted input: a header over 8,192 bytes is dropped
whole, entries past the 180th, entries over 4,096 bytes and entries that are
not W3C Baggage syntax are skipped, and each is counted
(:func:`~asynctrace.carrier_stats`), never logged per request and never
raised. The header asynctrace itself sends (its scopes alone) is read by one
pattern; any other takes the full parser.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final
from urllib.parse import unquote, unquote_plus

from ._baggage_out import (
    ITERATION_KEY,
    MAX_HEADER,
    MAX_MEMBER,
    MAX_MEMBERS,
    PER_PROMPT_KEY,
    PREFIX,
    SESSION_KEY,
    TASK_KEY,
)
from ._carrier_stats import _count
from ._scopes import _INT64_MAX, _INT64_MIN, ScopeState
from ._session_names import redacted_name

__all__ = ["ScopeValues", "decode", "parse"]

# W3C Baggage: key = token (RFC 7230 tchar); value = *baggage-octet; then properties.
# No pattern here has two optional blank runs side by side (they backtrack quadratically
# over a long run of blanks): blanks are stripped first, then each part is matched alone.
_KEY: Final = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
_VALUE: Final = re.compile(r"[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*")
_INT: Final = re.compile(r"-?[0-9]{1,19}")
# Text redaction leaves alone (it acts on blanks, "=", ":", "://" and the like).
_UNRESERVED: Final = re.compile(r"[-.0-9A-Z_a-z~]+")
# A member that is just key=value (no blanks, no properties), in one match.
_SIMPLE: Final = re.compile(
    r"([!#$%&'*+\-.^_`|~0-9A-Za-z]+)=([\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*)"
)
# What encode() sends when the scopes are all there is, matched against "," + header:
# the members in encode()'s order, each optional, integer task ids, and session ids of
# unreserved characters (nothing to unquote, and nothing redaction changes: it acts on
# blanks, "=", ":", "://" and the like). Each value is one the full parser accepts
# and reads the same way; any other header takes the full parser. Integers of up to 18
# digits are within int64 by their length alone; a 19-digit one is range-checked there.
_OWN: Final = re.compile(
    r"(?:,asynctrace\.iteration=(-?[0-9]{1,18}))?"
    r"(,asynctrace\.per_prompt=1)?"
    r"(?:,asynctrace\.task_id=(-?[0-9]{1,18}))?"
    r"(?:,asynctrace\.session_id=([-.0-9A-Z_a-z~]{1,1024}))?"
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
            if session:  # redacted as a text task id is: it is stamped and sent on
                if _UNRESERVED.fullmatch(session) is None:  # else nothing to redact
                    session = redacted_name(session)
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
