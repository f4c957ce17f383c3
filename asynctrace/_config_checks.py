"""The value checks of configuration keys: each names the key, the value and what is accepted.

Shared by :class:`~asynctrace.TelemetryConfig`, the session tracer's block,
the goodput and profiler settings and the export queue: a bad value raises
:class:`~asynctrace.ConfigurationError` here, never ``ValueError`` or
``OverflowError``.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Final

from ._errors import ConfigurationError

__all__ = [
    "MAX_WAIT_S",
    "MIN_SCHEDULE_DELAY_MS",
    "check_at_most",
    "check_bool",
    "check_int",
    "check_keys",
    "check_number",
    "check_path",
    "check_schedule_delay",
    "check_stall_threshold",
    "did_you_mean",
    "float_text",
    "int_text",
    "is_finite",
    "unknown_keys_message",
]

_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


def check_keys(mapping: Mapping[str, Any], cls: type, where: str) -> None:
    """Refuse keys of *mapping* that are not fields of the dataclass *cls*, naming them."""
    accepted = [f.name for f in dataclasses.fields(cls)]
    unknown = [k for k in mapping if k not in accepted]
    if unknown:
        raise ConfigurationError(unknown_keys_message(where, unknown, accepted))


def unknown_keys_message(where: str, unknown: Sequence[Any], accepted: Sequence[str]) -> str:
    """``where: unknown key 'x'; accepted keys: ...``, with a "did you mean" for near misses.

    Example:
        >>> unknown_keys_message("telemetry", ["enabeld"], ["enabled", "run_id"])
        "telemetry: unknown key 'enabeld'; accepted keys: enabled, run_id; did you mean 'enabled'?"
    """
    return (
        f"{where}: unknown key{'s' if len(unknown) > 1 else ''} "
        f"{', '.join(repr(k) for k in unknown)}; accepted keys: {', '.join(accepted)}"
        f"{did_you_mean(unknown, accepted)}"
    )


def did_you_mean(unknown: Sequence[Any], accepted: Sequence[str]) -> str:
    """``"; did you mean 'x'?"`` for the unknown keys close to an accepted one, else ``""``.

    With several unknown keys, each suggestion names the key it is for.
    """
    import difflib

    hints: list[tuple[Any, str]] = []
    for key in unknown:
        close = difflib.get_close_matches(str(key), list(accepted), n=1)
        if close:
            hints.append((key, close[0]))
    if not hints:
        return ""
    if len(unknown) == 1:
        return f"; did you mean {hints[0][1]!r}?"
    return "; did you mean " + ", ".join(f"{good!r} for {bad!r}" for bad, good in hints) + "?"


def check_bool(key: str, value: Any) -> bool:
    """*value* as a bool: a bool, or a string ``true``/``false``, ``1``/``0``, ``yes``/``no``
    or ``on``/``off``, in any case."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ConfigurationError(
        f"{key}: {value!r} is not a boolean; accepted: true/false "
        "(or 1/0, yes/no, on/off as strings)"
    )


# The one rule for a number written as text (a variable, a YAML string): ASCII digits, an
# optional sign, and for a float a decimal point and an exponent. Not "1_000" or digits of
# other scripts (which int() and float() take), nor "nan" or "inf"; surrounding whitespace
# is allowed.
_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_FLOAT_TEXT = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _number_text(text: str, pattern: re.Pattern[str]) -> str | None:
    """*text* stripped, if it is a number as *pattern* writes one; else ``None``."""
    stripped = text.strip()
    return stripped if pattern.fullmatch(stripped) else None


def int_text(text: str) -> int | None:
    """The integer *text* writes, else ``None``: the rule of every integer read from text.

    Example:
        >>> int_text(" +12 "), int_text("1_000"), int_text("\\uff11\\uff12"), int_text("1.0")
        (12, None, None, None)
    """
    digits = _number_text(text, _INT_TEXT)
    if digits is None:
        return None
    try:
        return int(digits)
    except ValueError:  # past int()'s limit of digits: no setting is that large
        return None


def float_text(text: str) -> float | None:
    """The number *text* writes, as a float, else ``None``: the rule of every number read
    from text (``inf`` when it is past a float's range).

    Example:
        >>> float_text("2.5e-1"), float_text("-3"), float_text("nan"), float_text("1_0")
        (0.25, -3.0, None, None)
    """
    number = _number_text(text, _FLOAT_TEXT)
    return None if number is None else float(number)


def check_int(key: str, value: Any, minimum: int) -> int:
    """*value* (an int, or a string of one; not a bool) as an int of at least *minimum*.

    The message quotes the value as given (the text, for a string).
    """
    number = int_text(value) if isinstance(value, str) else value
    if isinstance(number, bool) or not isinstance(number, int) or number < minimum:
        raise ConfigurationError(
            f"{key}: {value!r} is not accepted; accepted: an integer >= {minimum}"
        )
    return number


def is_finite(value: Any) -> bool:
    """Whether *value* is an int or float (not a bool) that a float holds, finite.

    ``math.isfinite`` raises ``OverflowError`` for an int past a float's range
    (``10**400``); that is a value out of range here, as infinity is.

    Example:
        >>> is_finite(10**400), is_finite(1.5), is_finite(True)
        (False, True, False)
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def check_number(key: str, value: Any, minimum: float, *, strict: bool) -> float:
    """*value* (a number, or a string of one) as a finite float above *minimum*.

    Raises:
        ConfigurationError: naming *key*, the value and what is accepted (never
            ``OverflowError``, whatever the value).
    """
    number: Any = float_text(value) if isinstance(value, str) else value
    if is_finite(number) and (number > minimum if strict else number >= minimum):
        return float(number)
    bound = f"> {minimum:g}" if strict else f">= {minimum:g}"
    raise ConfigurationError(
        f"{key}: {value!r} is not accepted; accepted: a finite number {bound}"
    )


def check_path(key: str, value: Any) -> str:
    """*value* (a string or ``os.PathLike``) as a non-empty directory path with no NUL."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str) or not value.strip():
        raise ConfigurationError(f"{key}: expected a non-empty directory path, got {value!r}")
    if "\x00" in value:
        raise ConfigurationError(
            f"{key}: {value!r} is not accepted (it holds a NUL character); accepted: a "
            "directory path"
        )
    return value


MAX_WAIT_S: Final = threading.TIMEOUT_MAX / 2
"""The longest wait a timeout may ask for: longer ones raise ``OverflowError`` in a thread."""


def check_at_most(key: str, number: float, most: float, bound: str) -> float:
    """*number* if it is at most *most*: a thread could not wait that long."""
    if number <= most:
        return number
    raise ConfigurationError(
        f"{key}: {number!r} is not accepted; accepted: a finite number {bound} and "
        f"<= {most:.6g} (the longest wait a thread can make)"
    )


MIN_SCHEDULE_DELAY_MS: Final = 1.0
"""The shortest ``schedule_delay_millis``: below it an idle export thread would spin."""


def check_schedule_delay(key: str, value: Any) -> float:
    """Milliseconds from :data:`MIN_SCHEDULE_DELAY_MS` to the longest wait a thread can make."""
    try:
        number = check_number(key, value, 0.0, strict=True)
    except ConfigurationError:
        number = -1.0
    if number < MIN_SCHEDULE_DELAY_MS:
        raise ConfigurationError(
            f"{key}: {value!r} is not accepted; accepted: a finite number of milliseconds "
            f">= {MIN_SCHEDULE_DELAY_MS:g} (the floor: a shorter delay keeps an idle export "
            f"thread polling) and <= {MAX_WAIT_S * 1000.0:.6g} (default 1000)"
        )
    return check_at_most(key, number, MAX_WAIT_S * 1000.0, f">= {MIN_SCHEDULE_DELAY_MS:g}")


def check_stall_threshold(key: str, value: Any) -> float:
    """Milliseconds in [1, 60000]: below 1 ms the heartbeat would cost the loop, and a
    value in seconds (``0.05``) is refused rather than read as 50 µs."""
    try:
        number = check_number(key, value, 0.0, strict=True)
    except ConfigurationError:
        number = -1.0
    if not 1.0 <= number <= 60_000.0:
        raise ConfigurationError(
            f"{key}: {value!r} is not accepted; accepted: a number of milliseconds "
            "from 1 to 60000 (default 50)"
        )
    return number
