"""The values a lens config's fields accept: booleans, text, a rank, a sample rate."""

from __future__ import annotations

import re
from typing import Final

import asynctrace

__all__ = ["as_boolean", "as_export_rank", "as_sample_rate", "as_text"]

_TRUE: Final = frozenset({"1", "true", "yes", "on"})
_FALSE: Final = frozenset({"0", "false", "no", "off"})


def as_boolean(key: str, value: object) -> bool:
    """*value* as a bool: a bool, or ``1``/``0``, ``true``/``false``, ``yes``/``no``,
    ``on``/``off`` as a string (any case), as asynctrace reads its own booleans.

    Raises:
        asynctrace.ConfigurationError: anything else, naming *key*.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise asynctrace.ConfigurationError(
        f"{key}: {value!r} is not a boolean; accepted: true/false "
        "(or 1/0, yes/no, on/off as strings)"
    )


def as_text(key: str, value: object) -> str:
    """*value*, checked to be a string.

    Raises:
        asynctrace.ConfigurationError: not a string, naming *key*.
    """
    if not isinstance(value, str):
        raise asynctrace.ConfigurationError(
            f"{key}: {value!r} is not accepted; accepted: a string"
        )
    return value


def as_export_rank(value: object) -> int:
    """``export_rank`` as an int (a string of one too): a rank, or -1 for the last one.

    Raises:
        asynctrace.ConfigurationError: not an integer >= -1.
    """
    number = value
    if isinstance(value, str) and re.fullmatch(r"\s*[+-]?[0-9]+\s*", value):
        number = int(value)
    if isinstance(number, bool) or not isinstance(number, int) or number < -1:
        raise asynctrace.ConfigurationError(
            f"export_rank: {value!r} is not accepted; accepted: an integer >= 0 (the rank "
            "that exports with export_strategy single_rank), or -1: the last rank"
        )
    return number


def as_sample_rate(value: object) -> float:
    """``export_sample_rate`` as a float (a string of one too), from 0.0 to 1.0.

    Raises:
        asynctrace.ConfigurationError: anything else (``nan`` too).
    """
    number = value
    if isinstance(value, str):
        try:
            number = float(value)
        except ValueError:
            pass
    if (
        isinstance(number, bool)
        or not isinstance(number, int | float)
        or not 0.0 <= number <= 1.0  # false for nan
    ):
        raise asynctrace.ConfigurationError(
            f"export_sample_rate: {value!r} is not accepted; accepted: a number from 0.0 "
            "to 1.0 (the fraction of ranks that export with export_strategy sampled)"
        )
    return float(number)
