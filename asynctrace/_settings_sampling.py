"""The sampling a configuration asks for: ``sample_rate``, else ``sampling_ratio``."""

from __future__ import annotations

from collections.abc import Mapping

from ._config import TelemetryConfig, env_source
from ._errors import ConfigurationError
from ._fast import Sampling, sampling_from

__all__ = ["sampling"]


def sampling(
    config: TelemetryConfig,
    sample_rate: float | None,
    sampling_ratio: float | None,
    env: Mapping[str, str],
) -> Sampling:
    """``sample_rate`` (parent based, whatever ``OTEL_TRACES_SAMPLER`` says), else as before."""
    if sample_rate is None:
        return sampling_from(sampling_ratio, env)
    if sampling_ratio is not None and sampling_ratio != sample_rate:
        rate_key = env_source(config, "sample_rate") or "sample_rate"
        ratio_key = env_source(config, "sampling_ratio") or "sampling_ratio"
        raise ConfigurationError(
            f"{rate_key}: {sample_rate!r} is not accepted with "
            f"{ratio_key}={sampling_ratio!r}; accepted: one of the two, or the same value"
        )
    return Sampling(sample_rate, parent_based=True)
