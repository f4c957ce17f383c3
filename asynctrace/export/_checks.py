"""The checks of an export queue's configuration values, and its name among others.

Each check fails fast with a :class:`~asynctrace._errors.ConfigurationError`
that names the argument, the value and what is accepted; the queue's
constructor runs them before it starts its thread.
"""

from __future__ import annotations

from collections.abc import Collection

from .._config_checks import MAX_WAIT_S, MIN_SCHEDULE_DELAY_MS, is_finite
from .._errors import ConfigurationError

__all__ = ["check_count", "check_delay_millis", "check_limit", "unique_name"]


def unique_name(base: str, taken: Collection[object]) -> str:
    """*base*, or ``base-2``, ``base-3`` ... when taken: a queue's name, its key in
    ``Telemetry.stats()`` (two exporters or processors of one class keep counters apart)."""
    name, number = base, 1
    while name in taken:
        number += 1
        name = f"{base}-{number}"
    return name


def check_count(name: str, value: object, minimum: int) -> int:
    """*value* if it is an int (not a bool) ``>= minimum``.

    Raises:
        ConfigurationError: naming the argument, the value and what is accepted.

    Example:
        >>> check_count("max_queue_size", 10, 1)
        10
    """
    if value.__class__ is bool or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(
            f"{name}: {value!r} is not accepted; accepted: an integer >= {minimum}"
        )
    return value


def check_delay_millis(name: str, value: object) -> float:
    """*value* as milliseconds, in the range the ``schedule_delay_millis`` key takes.

    Raises:
        ConfigurationError: naming the argument, the value and what is accepted.
    """
    most = MAX_WAIT_S * 1000.0
    if (
        isinstance(value, (int, float))
        and is_finite(value)
        and MIN_SCHEDULE_DELAY_MS <= value <= most
    ):
        return float(value)
    raise ConfigurationError(
        f"{name}: {value!r} is not accepted; accepted: a finite number of milliseconds "
        f">= {MIN_SCHEDULE_DELAY_MS:g} (a shorter delay keeps an idle export thread "
        f"polling) and <= {most:.6g}"
    )


def check_limit(name: str, value: object, also: str = "") -> None:
    """An attribute limit: an integer ``>= 0`` or ``None`` (*also*: other values taken).

    Raises:
        ConfigurationError: naming the argument, the value and what is accepted.

    Example:
        >>> check_limit("max_attribute_length", None)
    """
    if value is None:
        return
    if value.__class__ is bool or not isinstance(value, int) or value < 0:
        raise ConfigurationError(
            f"{name}: {value!r} is not accepted; accepted: an integer >= 0, {also}or None "
            "for no limit"
        )
