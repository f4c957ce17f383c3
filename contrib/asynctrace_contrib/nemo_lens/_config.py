"""lens's configuration (:class:`NemoLensConfig`), its environment, and warnings told once."""

from __future__ import annotations

import difflib
import logging
import os
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Final

from ._groups import SpanGroup
from ._values import as_boolean, as_export_rank, as_sample_rate, as_text

__all__ = ["NemoLensConfig", "warn_once"]

_LOG = logging.getLogger("asynctrace_contrib.nemo_lens")  # one logger, the package's name

_BOOL_FIELDS: Final = (
    "enabled",
    "sampler_enabled",
    "traces_enabled",
    "metrics_enabled",
    "logs_enabled",
)
_TEXT_FIELDS: Final = (
    "service_name",
    "export_strategy",
    "span_groups",
    "exporter",
    "run_id",
    "user",
    "wandb_entity",
    "wandb_project",
)
# The names from_env reads after ``{prefix}_``.
_ENV_KEYS: Final = (
    "ENABLED",
    "EXPORT_STRATEGY",
    "EXPORT_RANK",
    "EXPORT_SAMPLE_RATE",
    "SAMPLER_ENABLED",
    "TRACES_ENABLED",
    "METRICS_ENABLED",
    "LOGS_ENABLED",
    "SPAN_GROUPS",
    "EXPORTER",
    "RUN_ID",
    "USER_ID",
)
_warned: set[tuple[str, ...]] = set()  # what was warned about once already


def warn_once(key: tuple[str, ...], message: str) -> None:
    """Log *message* as a warning, once per process for *key*."""
    if key not in _warned:
        _warned.add(key)
        _LOG.warning(message)


def _warn_unknown_variables(prefixes: Collection[str]) -> None:
    """Warn once about each ``{prefix}_*`` variable :meth:`NemoLensConfig.from_env` does
    not read, with the closest name it does read: a typo otherwise changes nothing."""
    for prefix in prefixes:
        known = [f"{prefix}_{key}" for key in _ENV_KEYS]
        for name in sorted(os.environ):
            if not name.startswith(f"{prefix}_") or name in known:
                continue
            close = difflib.get_close_matches(name, known, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            warn_once(
                ("variable", name),
                f"NemoLensConfig.from_env: ignoring {name}, which it does not read{hint}",
            )


@dataclass
class NemoLensConfig:
    """lens's configuration, field for field; :func:`setup_telemetry` maps it.

    ``span_groups`` is resolved by asynctrace (its ``default``, ``per_step`` and
    ``all`` presets). ``exporter`` is ``"otlp"`` or ``"console"``; the standard
    ``OTEL_EXPORTER_OTLP_*`` variables configure OTLP as they do under lens.
    ``export_strategy`` / ``export_rank`` / ``export_sample_rate`` decide, as in
    lens, whether this rank exports; a rank that does not gets telemetry off.
    The metrics, logs and W&B fields are kept so a lens config loads, and are
    not used. Every field is checked when the config is made and again by
    :func:`setup_telemetry`: a boolean may also be ``"true"``/``"false"``,
    ``"1"``/``"0"``, ``"yes"``/``"no"``, ``"on"``/``"off"`` (a quoted YAML
    value), ``export_rank`` and ``export_sample_rate`` a string of a number.

    Raises:
        asynctrace.ConfigurationError: a field of the wrong kind or out of
            range (a ``ValueError``), naming the field, its value and what is
            accepted.

    Example:
        >>> NemoLensConfig(enabled=True, span_groups="per_step").exporter
        'otlp'
    """

    enabled: bool = False
    service_name: str = "nemo"
    export_strategy: str = "single_rank"
    export_rank: int = -1
    export_sample_rate: float = 1.0
    sampler_enabled: bool = False
    traces_enabled: bool = True
    metrics_enabled: bool = True
    logs_enabled: bool = False
    span_groups: str = "default"
    exporter: str = "otlp"
    run_id: str = ""
    user: str = ""
    wandb_entity: str = ""
    wandb_project: str = ""
    _span_group_cls: type | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self._check()

    def _check(self) -> None:
        """Check every field, turning ``"false"``/``"0.5"`` (quoted YAML) into their values.

        Raises:
            asynctrace.ConfigurationError: naming the field, its value and what
                is accepted (a ``ValueError``, as lens raises).
        """
        for name in _BOOL_FIELDS:
            setattr(self, name, as_boolean(name, getattr(self, name)))
        for name in _TEXT_FIELDS:
            as_text(name, getattr(self, name))
        self.export_rank = as_export_rank(self.export_rank)
        self.export_sample_rate = as_sample_rate(self.export_sample_rate)

    @property
    def resolved_span_groups(self) -> frozenset[str]:
        """:attr:`span_groups` resolved to group names, through ``span_group_cls`` as in lens."""
        return self._span_groups_class().resolve(self.span_groups)

    def _span_groups_class(self) -> type[SpanGroup]:
        cls = self._span_group_cls
        if cls is None:
            return SpanGroup
        if not (isinstance(cls, type) and issubclass(cls, SpanGroup)):
            raise TypeError(
                f"span_group_cls: {cls!r} is not a subclass of "
                "asynctrace_contrib.nemo_lens.SpanGroup (subclass the ported SpanGroup, "
                "not nemo.lens's)"
            )
        return cls

    @classmethod
    def from_env(
        cls,
        prefix: str = "NEMO_LENS",
        fallback_prefix: str | None = None,
        span_group_cls: type | None = None,
    ) -> NemoLensConfig:
        """Read ``{prefix}_*`` (then ``{fallback_prefix}_*``) variables, as lens does.

        The variables are lens's: ``ENABLED``, ``EXPORT_STRATEGY``,
        ``EXPORT_RANK``, ``EXPORT_SAMPLE_RATE``, ``SAMPLER_ENABLED``,
        ``TRACES_ENABLED``, ``METRICS_ENABLED``, ``LOGS_ENABLED``,
        ``SPAN_GROUPS``, ``EXPORTER``, ``RUN_ID``, ``USER_ID``; plus
        ``OTEL_SERVICE_NAME``, ``WANDB_ENTITY`` and ``WANDB_PROJECT``. Any
        other ``{prefix}_*`` variable (``NEMO_LENS_ENABLE``) is logged once as a
        warning naming the closest one read.

        Raises:
            ValueError: a boolean, integer or float variable that does not parse,
                or a value out of range.

        Example:
            >>> NemoLensConfig.from_env(prefix="NO_SUCH_PREFIX").enabled
            False
        """

        _warn_unknown_variables([p for p in (prefix, fallback_prefix) if p])

        def env(key: str, default: str = "") -> str:
            value = os.environ.get(f"{prefix}_{key}", "").strip()
            if not value and fallback_prefix:
                value = os.environ.get(f"{fallback_prefix}_{key}", "").strip()
            return value or default

        def boolean(key: str, default: bool) -> bool:
            value = env(key).lower()
            if not value:
                return default
            if value in ("1", "true", "yes", "on"):
                return True
            if value in ("0", "false", "no", "off"):
                return False
            raise ValueError(
                f"Invalid boolean for {prefix}_{key}: {value!r}. "
                "Expected '1'/'0', 'true'/'false', 'yes'/'no', 'on'/'off'."
            )

        def number(key: str, default: Any, kind: type) -> Any:
            value = env(key)
            if not value:
                return default
            try:
                return kind(value)
            except ValueError as exc:
                raise ValueError(
                    f"Invalid {kind.__name__} for {prefix}_{key}: {value!r}."
                ) from exc

        return cls(
            enabled=boolean("ENABLED", False),
            service_name=os.environ.get("OTEL_SERVICE_NAME", "").strip() or "nemo",
            export_strategy=env("EXPORT_STRATEGY", "single_rank"),
            export_rank=number("EXPORT_RANK", -1, int),
            export_sample_rate=number("EXPORT_SAMPLE_RATE", 1.0, float),
            sampler_enabled=boolean("SAMPLER_ENABLED", False),
            traces_enabled=boolean("TRACES_ENABLED", True),
            metrics_enabled=boolean("METRICS_ENABLED", True),
            logs_enabled=boolean("LOGS_ENABLED", False),
            span_groups=env("SPAN_GROUPS", "default"),
            exporter=env("EXPORTER", "otlp"),
            run_id=env("RUN_ID", ""),
            user=env("USER_ID", ""),
            wandb_entity=os.environ.get("WANDB_ENTITY", ""),
            wandb_project=os.environ.get("WANDB_PROJECT", ""),
            _span_group_cls=span_group_cls,
        )
