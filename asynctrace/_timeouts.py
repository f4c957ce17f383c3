"""A ``timeout_s`` argument of ``flush()`` and ``shutdown()``, read as the seconds to wait."""

from __future__ import annotations

import numbers
from typing import Any, cast

from ._config_checks import MAX_WAIT_S as _MAX_WAIT_S  # a longer wait raises OverflowError
from ._errors import ConfigurationError

__all__ = ["wait_s"]


def wait_s(value: Any) -> float:
    """A ``timeout_s`` argument as the seconds to wait: a negative one waits not at all, one
    past what a wait takes (``inf``) as long as a wait can.

    Raises:
        ConfigurationError: not a real number (``None``, a string, a bool) or NaN, which
            would otherwise be read as "do not wait" and abandon a healthy exporter.
    """
    if value.__class__ is float and 0.0 <= value <= _MAX_WAIT_S:
        return float(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or value != value:
        raise ConfigurationError(
            f"timeout_s: {value!r} is not accepted; accepted: a number of seconds "
            "(0 or less: do not wait; inf: as long as it takes)"
        )
    seconds = cast("float", value)  # a Real: compared as it is (an int past a float's range too)
    if seconds <= 0:
        return 0.0
    return _MAX_WAIT_S if seconds >= _MAX_WAIT_S else float(seconds)
