"""Sampling: parent-based, with an always-on or a trace-id-ratio root sampler.

The decisions are those of the SDK's ``ParentBased(TraceIdRatioBased(r))``
(the low 64 bits of the trace id against ``round(r * 2**64)``), so both
providers keep or drop the same traces. Chosen by ``sampling_ratio`` in the
configuration or the standard ``OTEL_TRACES_SAMPLER`` /
``OTEL_TRACES_SAMPLER_ARG`` variables.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .._config_checks import float_text
from .._errors import ConfigurationError

__all__ = ["Sampling", "sampling_from"]

_LOW_64 = (1 << 64) - 1
_SAMPLERS = (
    "always_on",
    "always_off",
    "traceidratio",
    "parentbased_always_on",
    "parentbased_always_off",
    "parentbased_traceidratio",
)


@dataclass(frozen=True)
class Sampling:
    """A sampling policy.

    Attributes:
        ratio: share of root traces kept, in ``[0, 1]``.
        parent_based: a span with a valid parent follows the parent's
            ``sampled`` flag instead of the ratio.

    Example:
        >>> Sampling(0.5).keeps(0xFFFF_FFFF_FFFF_FFFF)
        False
    """

    ratio: float = 1.0
    parent_based: bool = True

    @property
    def bound(self) -> int:
        """Trace ids whose low 64 bits are below this are kept."""
        return round(self.ratio * (_LOW_64 + 1))

    def keeps(self, trace_id: int) -> bool:
        """The ratio decision for a root span of *trace_id*."""
        return trace_id & _LOW_64 < self.bound

    def to_sdk(self) -> Any:
        """The equivalent SDK sampler."""
        from opentelemetry.sdk.trace import sampling

        root: Any
        if self.ratio >= 1.0:
            root = sampling.ALWAYS_ON
        elif self.ratio <= 0.0:
            root = sampling.ALWAYS_OFF
        else:
            root = sampling.TraceIdRatioBased(self.ratio)
        return sampling.ParentBased(root) if self.parent_based else root


def sampling_from(ratio: float | None, environ: Mapping[str, str]) -> Sampling:
    """The policy: *ratio* when given, else ``OTEL_TRACES_SAMPLER(_ARG)``, else always on.

    The variables are read as the SDK reads them, leniently (they may be set
    for other tools): a sampler name asynctrace does not have, or a bad
    argument, is warned about and the default is used.

    Raises:
        ConfigurationError: *ratio* outside ``[0, 1]``.
    """
    if ratio is not None:
        return Sampling(_ratio("sampling_ratio", ratio))
    name = environ.get("OTEL_TRACES_SAMPLER", "").strip().lower()
    if not name:
        return Sampling()
    if name not in _SAMPLERS:
        _lenient_warning(
            f"OTEL_TRACES_SAMPLER: ignoring {name!r}; asynctrace samples with "
            f"{', '.join(_SAMPLERS)} (set sampling_ratio to choose); recording every trace"
        )
        return Sampling()
    parent_based = name.startswith("parentbased_")
    root = name.removeprefix("parentbased_")
    if root == "always_on":
        return Sampling(1.0, parent_based)
    if root == "always_off":
        return Sampling(0.0, parent_based)
    raw = environ.get("OTEL_TRACES_SAMPLER_ARG", "").strip()
    try:
        value = float_text(raw) if raw else 1.0  # the rule of every number read from text
        if value is None:
            raise ValueError(raw)
        return Sampling(_ratio("OTEL_TRACES_SAMPLER_ARG", value), parent_based)
    except (ValueError, ConfigurationError):
        _lenient_warning(
            f"OTEL_TRACES_SAMPLER_ARG: ignoring {raw!r} (accepted: a number in [0, 1]); "
            "using 1.0, as the SDK does"
        )
        return Sampling(1.0, parent_based)


def _lenient_warning(message: str) -> None:
    """Warn about a variable that may be set for other tools; never raise.

    Under ``-W error`` the warning would fail ``configure()``: it is logged instead.
    """
    try:
        warnings.warn(message, UserWarning, stacklevel=4)
    except UserWarning:
        logging.getLogger("asynctrace").warning("asynctrace: %s", message)


def _ratio(key: str, value: Any) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok and math.isfinite(value) and 0.0 <= value <= 1.0:
        return float(value)
    raise ConfigurationError(f"{key}: {value!r} is not accepted; accepted: a number in [0, 1]")
