"""The session tracer's configuration block (``session_tracer:``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ._config_checks import check_bool, check_int, check_keys, check_path
from ._errors import ConfigurationError

__all__ = ["SessionTracerConfig"]


@dataclass
class SessionTracerConfig:
    """Settings of the per-sample session lifecycle tracer.

    Attributes:
        enabled: write one JSON line per finished session to
            ``sessions-r{rank}.jsonl`` in ``output_dir``.
        flush_threshold: number of finished sessions buffered before a write.
        max_pending: pending sessions kept; past it the oldest are written as
            ``pending``, reason ``evicted`` (counted in ``stats()["evicted"]``).
        output_dir: where the session records go instead: a directory
            relative to the configuration's ``output_dir`` (or absolute;
            ``{run_id}`` is substituted). ``None`` (the default): ``output_dir``
            itself. AReaL's layout keeps them apart from the trace files
            (``session_tracer/`` beside ``perf_tracer/``).
        ids: ``"unique"`` (the default) gives ``"<rank>-<pid hex><16 random
            hex>-<n>"``, unique across the run; ``"sequential"`` gives the
            per-process count alone (``"1"``, ``"2"``, ...), unique only
            within one process (and its ``sessions-r{rank}.jsonl``), as AReaL's
            session ids are, and numeric for tools that read them as numbers
            (AReaL's ``plot_session_trace``).

    Example:
        >>> SessionTracerConfig(enabled=True, flush_threshold=50).flush_threshold
        50
    """

    enabled: bool = False
    flush_threshold: int = 100
    output_dir: str | None = None
    ids: str = "unique"
    max_pending: int = 100_000

    def __post_init__(self) -> None:
        if self.ids not in ("unique", "sequential"):
            raise ConfigurationError(
                f"session_tracer.ids: {self.ids!r} is not accepted; accepted: unique, sequential"
            )

    @classmethod
    def from_mapping(cls, mapping: Mapping[str, Any]) -> SessionTracerConfig:
        """Build from a mapping such as the ``session_tracer:`` YAML block.

        Raises:
            ConfigurationError: an unknown key or a bad value; the message names
                the key, the value and what is accepted.

        Example:
            >>> SessionTracerConfig.from_mapping({"enabled": True}).enabled
            True
        """
        check_keys(mapping, cls, "session_tracer")
        return cls(
            **{
                k: v
                if (k == "output_dir" and v is None) or k == "ids"
                else _field(f"session_tracer.{k}", k, v)
                for k, v in mapping.items()
            }
        )


def _field(key: str, name: str, value: Any) -> Any:
    """One field's value checked (strings are accepted for booleans and integers)."""
    if name == "enabled":
        return check_bool(key, value)
    if name == "output_dir":
        return check_path(key, value)
    return check_int(key, value, 1)  # flush_threshold, max_pending


def session_config(value: Any, key: str) -> SessionTracerConfig:
    """*value* (a :class:`SessionTracerConfig` or a mapping of its fields), checked, as a
    new object."""
    if isinstance(value, SessionTracerConfig):
        return SessionTracerConfig(
            enabled=check_bool(f"{key}.enabled", value.enabled),
            flush_threshold=check_int(f"{key}.flush_threshold", value.flush_threshold, 1),
            output_dir=(
                None
                if value.output_dir is None
                else check_path(f"{key}.output_dir", value.output_dir)
            ),
            ids=value.ids,
            max_pending=check_int(f"{key}.max_pending", value.max_pending, 1),
        )
    if isinstance(value, Mapping):
        return SessionTracerConfig.from_mapping(value)
    raise ConfigurationError(
        f"{key}: expected a SessionTracerConfig or a mapping with keys enabled, "
        f"flush_threshold, output_dir, ids, max_pending; got {value!r}"
    )
