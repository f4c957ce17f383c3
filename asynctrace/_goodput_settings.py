"""The ``goodput`` configuration block: where live step records go (nothing heavy imported).

::

    telemetry:
      goodput:
        file: true             # goodput-r{rank}.jsonl beside the trace file
        metrics: prometheus    # global (default) | none | otlp | console | prometheus
        prometheus_port: 9464  # + LOCAL_RANK, one endpoint per process of a node
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Final

from ._config_checks import _FALSE, _TRUE, float_text, int_text
from ._errors import ConfigurationError

__all__ = ["METRICS_NAMES", "GoodputSettings"]

METRICS_NAMES: Final = ("global", "none", "otlp", "console", "prometheus")
MIN_EXPORT_INTERVAL_S: Final = 0.1  # a metric reader exporting faster is a busy loop


@dataclass(frozen=True)
class GoodputSettings:
    """The validated ``goodput`` block.

    Attributes:
        file: write one line per finished step to ``goodput-r{rank}.jsonl``
            (``goodput-{role}-r{rank}.jsonl`` for a role other than
            ``worker``) in ``output_dir``.
        metrics: ``"global"``: record through OpenTelemetry's global
            ``MeterProvider`` (nothing is exported unless the program set one);
            ``"none"``: no metrics; ``"otlp"``, ``"console"``, ``"prometheus"``:
            asynctrace sets up a ``MeterProvider`` of its own with that
            exporter (extras ``otlp`` and ``prometheus``); or a
            ``MeterProvider`` object.
        prometheus_host: the address the Prometheus endpoint listens on.
        prometheus_port: its port, plus the process's ``LOCAL_RANK``.
        export_interval_s: how often OTLP and console metrics are exported
            (at least 0.1 s).
        callback_queue: records waiting for the callbacks before new ones are
            dropped (and counted).
        grace_s: a step is finished once a span arrives that ended more than
            this after the step; until then late children count in it.
        window: spans remembered for detached children that arrive after
            their parent.
        max_pending: most waits for a parent that has not arrived, counted
            with the bucketed spans they hold; past it the oldest wait is
            given up (and counted).
        step_name: only spans whose name matches this regular expression can
            be steps (``None``: any name), as ``asynctrace goodput --step-name``.

    Example:
        >>> GoodputSettings.parse("goodput", {"metrics": "none"}).file
        True
    """

    file: bool = True
    metrics: Any = "global"
    prometheus_host: str = "localhost"
    prometheus_port: int = 9464
    export_interval_s: float = 10.0
    callback_queue: int = 1024
    grace_s: float = 1.0
    window: int = 50_000
    max_pending: int = 100_000
    step_name: str | None = None

    @classmethod
    def parse(cls, key: str, value: Any) -> GoodputSettings | bool | None:
        """``true`` (the defaults), a mapping of the fields, ``false`` (off) or ``None`` (unset).

        Returns the settings, ``False`` or ``None``.

        Raises:
            ConfigurationError: an unknown key or a bad value, named with what
                is accepted.

        Example:
            >>> GoodputSettings.parse("goodput", "false")
            False
        """
        if isinstance(value, GoodputSettings) or value is None or value is False:
            return value
        if value is True:
            return cls()
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return cls() if value.strip().lower() in _TRUE else False
        if not isinstance(value, Mapping):
            raise ConfigurationError(
                f"{key}: {value!r} is not accepted; accepted: true, false, or a mapping with "
                f"keys {', '.join(f.name for f in fields(cls))}"
            )
        accepted = [f.name for f in fields(cls)]
        unknown = [k for k in value if k not in accepted]
        if unknown:
            from ._config_checks import unknown_keys_message

            raise ConfigurationError(unknown_keys_message(key, unknown, accepted))
        out: dict[str, Any] = {}
        for name, item in value.items():
            where = f"{key}.{name}"
            if name == "file":
                out[name] = _bool(where, item)
            elif name == "metrics":
                out[name] = _metrics(where, item)
            elif name == "prometheus_host":
                if not isinstance(item, str) or not item.strip():
                    raise ConfigurationError(
                        f"{where}: {item!r} is not accepted; accepted: a host name or address"
                    )
                out[name] = item.strip()
            elif name == "prometheus_port":
                out[name] = _int(where, item, 0, 65535)
            elif name in ("callback_queue", "window", "max_pending"):
                out[name] = _int(where, item, 1, 1 << 40)
            elif name == "export_interval_s":
                out[name] = _seconds(where, item, low=MIN_EXPORT_INTERVAL_S)
            elif name == "grace_s":
                out[name] = _seconds(where, item, low=0.0)
            else:  # step_name
                out[name] = _regex(where, item)
        return cls(**out)


def _bool(key: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ConfigurationError(f"{key}: {value!r} is not a boolean; accepted: true/false")


def _metrics(key: str, value: Any) -> Any:
    if isinstance(value, str) and value.strip().lower() in METRICS_NAMES:
        return value.strip().lower()
    if isinstance(value, type):  # the class, not a provider: get_meter() would need one
        raise ConfigurationError(
            f"{key}: {value!r} is a class, not accepted; accepted: "
            f"{', '.join(METRICS_NAMES)}, or an OpenTelemetry MeterProvider object (an "
            f"instance: {value.__name__}(...))"
        )
    if callable(getattr(value, "get_meter", None)):
        return value  # a MeterProvider of the program's
    raise ConfigurationError(
        f"{key}: {value!r} is not accepted; accepted: {', '.join(METRICS_NAMES)}, or an "
        "OpenTelemetry MeterProvider object"
    )


def _int(key: str, value: Any, low: int, high: int) -> int:
    number = int_text(value) if isinstance(value, str) else value
    if isinstance(number, bool) or not isinstance(number, int) or not low <= number <= high:
        raise ConfigurationError(
            f"{key}: {value!r} is not accepted; accepted: an integer from {low} to {high}"
        )
    return number


def _seconds(key: str, value: Any, *, low: float) -> float:
    number: Any = float_text(value) if isinstance(value, str) else value
    ok = isinstance(number, (int, float)) and not isinstance(number, bool)
    if ok and abs(number) < 1e9 and math.isfinite(number) and number >= low:
        return float(number)
    raise ConfigurationError(
        f"{key}: {value!r} is not accepted; accepted: a number of seconds of at least "
        f"{low:g} and below 1e9"
    )


def _regex(key: str, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            re.compile(value)
            return value
        except re.error as exc:
            raise ConfigurationError(
                f"{key}: {value!r} is not accepted ({exc}); accepted: a regular expression"
            ) from None
    raise ConfigurationError(f"{key}: {value!r} is not accepted; accepted: a regular expression")
