"""Each field of :class:`~asynctrace.TelemetryConfig` checked and brought to its type.

One rule per field, shared by the mapping form (YAML), the environment
variables and :func:`asynctrace.configure`; strings are accepted for
booleans and numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final, Protocol, runtime_checkable

from ._config_checks import (
    MAX_WAIT_S,
    check_at_most,
    check_bool,
    check_int,
    check_number,
    check_path,
    check_schedule_delay,
    check_stall_threshold,
    unknown_keys_message,
)
from ._errors import ConfigurationError
from ._group_specs import require_groups, split_spec
from ._session_config import session_config

__all__ = [
    "DEFAULT_BATCH_SIZE",
    "DEFAULT_QUEUE_SIZE",
    "EXPORTER_NAMES",
    "PROVIDER_NAMES",
    "SpanExporterLike",
    "check_batch_fits",
    "coerce_field",
    "exporter_list",
    "span_group_tokens",
]

EXPORTER_NAMES = ("chrome", "otlp", "console", "memory")
PROVIDER_NAMES = ("fast", "sdk")
DEFAULT_QUEUE_SIZE: Final[int] = 8192
"""Spans buffered per exporter by default (``max_queue_size``)."""
DEFAULT_BATCH_SIZE: Final[int] = 512
"""Spans per export call by default (``max_export_batch_size``)."""


@runtime_checkable
class SpanExporterLike(Protocol):
    """Anything with OpenTelemetry's ``SpanExporter`` interface (``export``, ``shutdown``)."""

    def export(self, spans: Sequence[Any]) -> Any:
        """Export a batch of finished spans."""

    def shutdown(self) -> Any:
        """Release the exporter's resources."""


def coerce_field(key: str, name: str, value: Any) -> Any:
    """Check one field's value; strings are accepted for booleans and numbers."""
    if name in ("enabled", "handle_sigterm", "propagate_scopes"):
        return check_bool(key, value)
    if name in (
        "max_queue_size",
        "max_export_batch_size",
        "flush_threshold",
        "max_pending",
        "retry_buffer_spans",
        "retry_buffer_bytes",
    ):
        return check_int(key, value, 1)
    if name in ("schedule_delay_millis",):
        return check_schedule_delay(key, value)
    if name in ("shutdown_timeout_s",):
        return check_at_most(key, check_number(key, value, 0.0, strict=False), MAX_WAIT_S, ">= 0")
    if name == "exporters":
        return exporter_list(key, value)
    if name == "session_tracer":
        return session_config(value, key)
    if name == "resource_attributes":
        return _attributes(key, value)
    if name == "span_groups":
        span_group_tokens(key, value)
        return value if isinstance(value, str) else ",".join(value)
    if name == "output_dir":
        return check_path(key, value)
    if name == "provider":
        return None if value is None else _provider(key, value)
    if name == "otlp_protocol":
        from ._protocol import check_protocol

        return None if value is None else check_protocol(key, value)
    if name == "export_ranks":
        from ._ranks import parse_export_ranks

        return parse_export_ranks(key, value)
    if name in ("sampling_ratio", "sample_rate"):
        if value is None:
            return None
        try:
            number = check_number(key, value, 0.0, strict=False)
        except ConfigurationError:
            number = -1.0
        if not 0.0 <= number <= 1.0:
            raise ConfigurationError(
                f"{key}: {value!r} is not accepted; accepted: a number in [0, 1], or null"
            )
        return number
    if name == "span_limits":
        if not isinstance(value, Mapping):
            raise ConfigurationError(
                f"{key}: expected a mapping of limit names to integers, got {value!r}"
            )
        from ._fast._limits import FIELDS

        unknown = [k for k in value if k not in FIELDS]
        if unknown:
            raise ConfigurationError(unknown_keys_message(key, unknown[:1], FIELDS))
        return dict(value)
    if name == "loop_stall_threshold_ms":
        return check_stall_threshold(key, value)
    if name == "goodput":
        from ._goodput_settings import GoodputSettings

        try:
            return GoodputSettings.parse(key, value)
        except OverflowError:  # an int past a float's range (10**400) in a number key
            raise ConfigurationError(
                f"{key}: {value!r} holds a number out of range; accepted: finite numbers "
                "(see the goodput keys)"
            ) from None
    if name == "profiler":
        from ._profiler_settings import ProfilerSettings

        return None if value is None else ProfilerSettings.parse(key, value)
    if name in ("service_name", "run_id"):
        if not isinstance(value, str):
            raise ConfigurationError(f"{key}: expected a string, got {value!r}")
        return value.strip()
    raise ConfigurationError(f"{key}: unknown key")  # pragma: no cover - guarded by check_keys


def span_group_tokens(key: str, spec: Any, *, empty_means_off: bool = False) -> list[str]:
    """The tokens of the span-group *spec*: the syntax :func:`asynctrace.configure` and
    :func:`asynctrace.enable_telemetry` both take.

    A spec that names no group (``" , "``) is refused. With *empty_means_off*
    (``enable_telemetry``, whose spec a program may build from an empty list)
    a spec with nothing in it, ``""`` or ``[]``, is every group off.

    Raises:
        ConfigurationError: a malformed spec, or one that names no group.
    """
    tokens = split_spec(spec, key)
    if tokens or not empty_means_off:
        return require_groups(tokens, spec, key)
    if not spec:
        return tokens
    raise ConfigurationError(
        f"{key}: {spec!r} names no group; accepted: comma-separated presets and group names, "
        "such as 'default' or 'per_step,per_prompt', or '' for every group off"
    )


def check_batch_fits(
    batch: Any, queue: Any, batch_from: str | None, queue_from: str | None
) -> None:
    """Refuse an export batch larger than the queue, naming what was set.

    *batch_from* and *queue_from* name the key or variable that set each
    value; ``None``: it was not set there (the default, or a base
    configuration's). When only the queue size was set, the message is about
    the queue size.

    Raises:
        ConfigurationError: ``batch > queue``.
    """
    if not isinstance(batch, int) or not isinstance(queue, int) or batch <= queue:
        return
    if batch_from is None and queue_from is not None:
        raise ConfigurationError(
            f"{queue_from}: {queue} is not accepted: it is below the export batch size, "
            f"max_export_batch_size ({_origin(batch, None, DEFAULT_BATCH_SIZE)}); accepted: "
            f"an integer >= {batch}, or a max_export_batch_size <= {queue} set too"
        )
    raise ConfigurationError(
        f"{batch_from or 'max_export_batch_size'}: {batch} is not accepted; accepted: an "
        f"integer between 1 and max_queue_size ({_origin(queue, queue_from, DEFAULT_QUEUE_SIZE)})"
    )


def _origin(value: int, source: str | None, default: int) -> str:
    """``"100, set by VAR"``, ``"512, the default"`` or ``"100"``."""
    if source is not None and source.isupper():  # a variable
        return f"{value}, set by {source}"
    if source is None and value == default:
        return f"{value}, the default"
    return str(value)


def exporter_list(key: str, value: Any) -> list[str | SpanExporterLike]:
    """*value* (a list, or a comma-separated string) as exporter names and exporter objects."""
    items: list[Any]
    if isinstance(value, str):
        items = [part for part in value.split(",") if part.strip()]
    elif isinstance(value, (bytes, bytearray, memoryview)):  # a Sequence, of numbers
        raise ConfigurationError(
            f"{key}: {value!r} is not accepted (bytes: decode them); accepted: a list of "
            f"exporter names ({', '.join(EXPORTER_NAMES)}) and SpanExporter objects, or a "
            "comma-separated string"
        )
    elif isinstance(value, Sequence):
        items = list(value)
    else:
        raise ConfigurationError(
            f"{key}: expected a list of exporter names or a comma-separated string, got {value!r}"
        )
    out: list[str | SpanExporterLike] = []
    for item in items:
        if isinstance(item, str):
            name = item.strip().lower()
            if name not in EXPORTER_NAMES:
                raise ConfigurationError(
                    f"{key}: unknown exporter {item!r}; accepted: {', '.join(EXPORTER_NAMES)} "
                    "(or an object with the SpanExporter interface)"
                )
            if name not in out:
                out.append(name)
        elif isinstance(item, type):
            raise ConfigurationError(
                f"{key}: the class {item.__qualname__} is not accepted (pass an instance, "
                f"e.g. {item.__name__}()); accepted: {', '.join(EXPORTER_NAMES)} or an "
                "exporter object with export() and shutdown()"
            )
        elif isinstance(item, SpanExporterLike):
            out.append(item)
        else:
            raise ConfigurationError(
                f"{key}: {item!r} is neither an exporter name nor a SpanExporter; accepted: "
                f"{', '.join(EXPORTER_NAMES)} or an object with export() and shutdown()"
            )
    return out


_SCALARS = (str, bool, int, float)
_INT64 = (-(2**63), 2**63 - 1)  # the integers an OTLP attribute value holds


def _scalar_kind(value: Any) -> type | None:
    """The attribute type of *value* (``bool`` before ``int``), or ``None``: not one."""
    for kind in (bool, str, int, float):
        if isinstance(value, kind):
            return kind
    return None


def _attributes(key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigurationError(
            f"{key}: {value!r} is not accepted; accepted: a mapping of attribute names to "
            "values (str, bool, int, float, or lists of one of these)"
        )
    out: dict[str, Any] = {}
    for name, item in value.items():
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"{key}: attribute names must be non-empty strings: {name!r}")
        if isinstance(item, _SCALARS):
            _check_int64(f"{key}.{name}", item)
            out[name] = item
        elif (
            isinstance(item, Sequence)
            and not isinstance(item, (bytes, bytearray, memoryview))
            and len({_scalar_kind(v) for v in item} | {None}) <= 2
            and None not in {_scalar_kind(v) for v in item}
        ):
            for index, element in enumerate(item):
                _check_int64(f"{key}.{name}[{index}]", element)
            out[name] = tuple(item)
        else:
            raise ConfigurationError(
                f"{key}.{name}: {item!r} is not accepted; accepted: str, bool, int, float "
                "or a list of values of one of these types (bytes are not: decode them)"
            )
    return out


def _check_int64(key: str, value: Any) -> None:
    """An int attribute value must fit OTLP's int64: the exporter would leave it out."""
    if isinstance(value, int) and not isinstance(value, bool):
        low, high = _INT64
        if not low <= value <= high:
            raise ConfigurationError(
                f"{key}: {value!r} is not accepted (OTLP carries 64-bit integers); accepted: "
                f"an integer from {low} to {high}, or the number as a string"
            )


def _provider(key: str, value: Any) -> Any:
    """``"fast"``, ``"sdk"``, or an SDK ``TracerProvider`` object."""
    if isinstance(value, str):
        name = value.strip().lower()
        if name in PROVIDER_NAMES:
            return name
    elif isinstance(value, type):
        raise ConfigurationError(
            f"{key}: the class {value.__qualname__} is not accepted (pass an instance, "
            f"e.g. {value.__name__}()); accepted: {', '.join(PROVIDER_NAMES)}, or an "
            "OpenTelemetry SDK TracerProvider object"
        )
    elif (
        callable(getattr(value, "add_span_processor", None))
        and callable(getattr(value, "get_tracer", None))
        and isinstance(getattr(getattr(value, "resource", None), "attributes", None), Mapping)
    ):
        if type(value).__module__.startswith("opentelemetry.sdk"):
            return value
        if not type(value).__module__.startswith("asynctrace"):
            return value  # an SDK TracerProvider subclass of the user's
    raise ConfigurationError(
        f"{key}: {value!r} is not accepted; accepted: {', '.join(PROVIDER_NAMES)}, or an "
        "OpenTelemetry SDK TracerProvider object"
    )
