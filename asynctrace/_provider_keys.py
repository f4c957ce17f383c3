"""The keys a TracerProvider handed in makes moot: set in code, refused; by a variable, told."""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping
from typing import Any

from ._config import TelemetryConfig, env_source
from ._errors import ConfigurationError

__all__ = ["own_provider_keys"]

# The keys whose work a TracerProvider handed in does itself, and what of it does it.
_PROVIDER_OWNS = {
    "sampling_ratio": "sampler",
    "sample_rate": "sampler",
    "span_limits": "span limits",
    "resource_attributes": "resource",
    "service_name": "resource",
}
_told_ignored: set[tuple[str, str]] = set()


def own_provider_keys(
    config: TelemetryConfig, values: Mapping[str, Any], provider: Any, env: Mapping[str, str]
) -> None:
    """Refuse the keys a TracerProvider handed in would ignore; warn of such variables.

    asynctrace records through that provider as it is: its own sampler, span
    limits and resource apply. A key set in code or YAML is a
    :class:`ConfigurationError`; a value only a variable set (``from_env``) is
    named in one warning and ignored, so an environment shared by several
    programs never stops one. A copy of a ``from_env`` configuration
    (``dataclasses.replace``) does not carry that mark: a value equal to the
    one the environment sets counts as the environment's. Keys left at their
    defaults say nothing.
    """
    if isinstance(provider, str):
        return
    given = []
    from_env: TelemetryConfig | None = None
    for name in _PROVIDER_OWNS:
        value = values[name]
        if value is None or (isinstance(value, (str, Mapping)) and not value):
            continue
        var = env_source(config, name)
        if var is None:
            if from_env is None:
                try:
                    from_env = TelemetryConfig.from_env(env)
                except ConfigurationError:  # a bad variable: the check that reads it says so
                    from_env = TelemetryConfig()
            if getattr(from_env, name) == value:
                var = env_source(from_env, name)
        given.append((name, var, value))
    explicit = [(name, value) for name, var, value in given if var is None]
    if explicit:
        owns = sorted({_PROVIDER_OWNS[name] for name, _ in explicit})
        raise ConfigurationError(
            f"{', '.join(f'{name}={value!r}' for name, value in explicit)}: not accepted with "
            f"provider={provider!r}: asynctrace records through that TracerProvider as it is, "
            f"and it uses its own {' and '.join(owns)}; accepted: leave "
            f"{', '.join(name for name, _ in explicit)} unset and configure the provider "
            "(TracerProvider(sampler=..., span_limits=..., resource=Resource.create({...})))"
        )
    for name, var, value in given:
        if var is None:  # pragma: no cover - the explicit ones raised above
            continue
        told = (var, repr(value))
        if told in _told_ignored:  # once a value (two threads at once may both say it)
            continue
        _told_ignored.add(told)
        message = (
            f"asynctrace: {var}={value!r} is ignored: the TracerProvider handed in as provider "
            f"records with its own {_PROVIDER_OWNS[name]} (configure it on the provider)"
        )
        logging.getLogger("asynctrace").warning(message)
        try:
            warnings.warn(message, UserWarning, stacklevel=4)
        except UserWarning:
            pass  # warnings are errors here: the log line says it
