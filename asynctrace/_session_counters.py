"""Per-session counters, written in a record's ``counters``."""

from __future__ import annotations

import numbers
import sys

from . import _session_tracer
from ._errors import ConfigurationError
from ._scopes import SCOPES

__all__ = ["increment_counter"]

_MAX_COUNT = sys.float_info.max  # an increment a float can hold: sums never raise


def _counter_increment(value: object) -> float:
    """*value* as an int or float increment, or a :class:`ConfigurationError`.

    Any real number but a bool is accepted (numpy's integers and floats, a
    ``Fraction``), as a plain int or float, if it is finite and within a
    float's range.
    """
    number: float | None = None
    if not isinstance(value, bool) and isinstance(value, numbers.Real):
        try:
            number = int(value) if isinstance(value, numbers.Integral) else float(value)
        except (TypeError, ValueError, OverflowError):
            number = None
    if number is None or not -_MAX_COUNT <= number <= _MAX_COUNT:  # NaN is not either
        raise ConfigurationError(
            f"increment_counter(value): expected a finite int or float, got {value!r}"
        )
    return number


def increment_counter(name: str, value: float = 1) -> None:
    """Add *value* to counter *name* of the current session (written in ``counters``).

    Example:
        >>> increment_counter("retries")
    """
    if not isinstance(name, str) or not name:
        raise ConfigurationError(
            f"increment_counter(name): expected a non-empty str, got {name!r}"
        )
    kind = type(value)
    if (kind is not int and kind is not float) or not -_MAX_COUNT <= value <= _MAX_COUNT:
        value = _counter_increment(value)
    tracer = _session_tracer._tracer
    session_id = SCOPES.get().session_id
    if tracer is not None and session_id is not None:
        tracer.count(session_id, name, value)
