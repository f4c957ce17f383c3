"""The ``profiler`` configuration block, validated: steps, backend, output and buffers."""

from __future__ import annotations

import numbers
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._config_checks import check_bool, unknown_keys_message
from ._errors import ConfigurationError
from ._profiler_backends import BACKENDS, check_backend

__all__ = ["ProfilerSettings"]

_KEYS = ("steps", "backend", "output", "record_shapes", "with_stack", "entries")
_ENTRIES = (1_000, 100_000_000)  # viztracer's buffer: accepted bounds, in entries
_MAX_STEPS = 100_000  # scheduled steps: each is held in a set, looked up per span


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


@dataclass(frozen=True)
class ProfilerSettings:
    """The validated ``profiler`` block.

    Attributes:
        steps: the scheduled steps (``rl.iteration`` values).
        backend: ``"python"`` (viztracer) or ``"torch"`` (``torch.profiler``).
        output: the directory of the captures; ``None``: the trace's directory.
        record_shapes: torch only: record operator input shapes.
        with_stack: torch only: record Python stacks of operators.
        entries: python only: viztracer's event buffer, in entries (a circular
            buffer: a step with more events loses its earliest ones).

    Example:
        >>> ProfilerSettings.parse("profiler", {"steps": [49, 99]}).steps
        frozenset({49, 99})
    """

    steps: frozenset[int] = frozenset()
    backend: str = "python"
    output: str | None = None
    record_shapes: bool = False
    with_stack: bool = False
    entries: int = 1_000_000

    @classmethod
    def parse(cls, key: str, value: Any) -> ProfilerSettings:
        """Validate a ``profiler`` mapping; a missing backend extra fails here, not at step 49.

        Raises:
            ConfigurationError: an unknown key or a bad value (named, with what is accepted).
            MissingExtraError: the backend's package is not installed.
        """
        if isinstance(value, ProfilerSettings):
            return value
        if not isinstance(value, Mapping):
            raise ConfigurationError(
                f"{key}: expected a mapping with keys {', '.join(_KEYS)}, got {value!r}"
            )
        unknown = [k for k in value if k not in _KEYS]
        if unknown:
            raise ConfigurationError(unknown_keys_message(key, unknown, _KEYS))
        steps = value.get("steps", ())
        accepted = f"accepted: a list of at most {_MAX_STEPS} integers >= 0"
        if isinstance(steps, (str, bytes, Mapping)) or not hasattr(steps, "__iter__"):
            raise ConfigurationError(f"{key}.steps: {steps!r} is not accepted; {accepted}")
        checked: set[int] = set()
        for step in steps:
            if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
                raise ConfigurationError(f"{key}.steps: {step!r} is not accepted; {accepted}")
            checked.add(int(step))  # numpy's integers too, as an rl.iteration is
            if len(checked) > _MAX_STEPS:  # a range(0, 10**15, 7) would never end
                raise ConfigurationError(
                    f"{key}.steps: {_shown(steps)} has more than {_MAX_STEPS} steps; {accepted}"
                )
        backend = value.get("backend", "python")
        if not isinstance(backend, str) or backend not in BACKENDS:
            raise ConfigurationError(
                f"{key}.backend: {backend!r} is not accepted; accepted: {', '.join(BACKENDS)}"
            )
        check_backend(backend)
        output = value.get("output")
        if output is not None and (not isinstance(output, (str, os.PathLike)) or not output):
            raise ConfigurationError(
                f"{key}.output: {output!r} is not accepted; accepted: a directory path, or null "
                "(the trace's directory)"
            )
        flags = {}
        for name in ("record_shapes", "with_stack"):  # "true" too, as every boolean key
            flags[name] = check_bool(f"{key}.{name}", value.get(name, False))
        entries = value.get("entries", 1_000_000)
        low, high = _ENTRIES
        if isinstance(entries, bool) or not isinstance(entries, int) or not low <= entries <= high:
            raise ConfigurationError(
                f"{key}.entries: {entries!r} is not accepted; accepted: an integer from "
                f"{low} to {high}"
            )
        return cls(
            frozenset(checked),
            backend,
            None if output is None else str(output),
            entries=entries,
            **flags,
        )
