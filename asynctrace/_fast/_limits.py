"""Span limits: how many attributes, events and links a span keeps, and how long a value is.

The defaults and the environment variables are OpenTelemetry's (128 of each,
no length limit; ``OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT`` and friends), and both
providers apply the same numbers. The hot path only counts and evicts (a
span never holds more than ``max_attributes`` attributes); values are cut to
``max_attribute_length`` on the export thread.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

from .._config_checks import int_text
from .._errors import ConfigurationError

__all__ = ["SpanLimits", "limits_from"]

_DEFAULT = 128

_Same = Literal["same"]

# field -> (its own variable, the general one)
_ENV = {
    "max_attributes": ("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "OTEL_ATTRIBUTE_COUNT_LIMIT"),
    "max_attribute_length": (
        "OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT",
        "OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT",
    ),
    "max_events": ("OTEL_SPAN_EVENT_COUNT_LIMIT", ""),
    "max_links": ("OTEL_SPAN_LINK_COUNT_LIMIT", ""),
    "max_event_attributes": ("OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT", "OTEL_ATTRIBUTE_COUNT_LIMIT"),
    "max_link_attributes": ("OTEL_LINK_ATTRIBUTE_COUNT_LIMIT", "OTEL_ATTRIBUTE_COUNT_LIMIT"),
}


@dataclass(frozen=True)
class SpanLimits:
    """Per-span limits (``None``: unlimited).

    ``other_attribute_length`` is the length event and link attribute values
    are cut to: ``"same"`` (the default) is ``max_attribute_length``, an int or
    ``None`` (uncut) sets it apart; :func:`limits_from` does so from the
    environment only (``OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT``), as the SDK does.
    It is not a ``span_limits`` key.

    Example:
        >>> SpanLimits().max_attributes, SpanLimits().max_attribute_length
        (128, None)
    """

    max_attributes: int | None = _DEFAULT
    max_attribute_length: int | None = None
    max_events: int | None = _DEFAULT
    max_links: int | None = _DEFAULT
    max_event_attributes: int | None = _DEFAULT
    max_link_attributes: int | None = _DEFAULT
    # The length of event and link attribute values, when it is not max_attribute_length:
    # as in the SDK, OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT cuts span attributes only, and
    # event and link attributes follow OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT alone. Not a
    # span_limits key: max_attribute_length there is the SDK's, for all three.
    other_attribute_length: int | _Same | None = dataclasses.field(default="same", repr=False)

    @property
    def max_event_attribute_length(self) -> int | None:
        """The length event and link attribute values are cut to (``None``: uncut)."""
        if self.other_attribute_length == "same":
            return self.max_attribute_length
        return self.other_attribute_length

    def to_sdk(self) -> Any:
        """The equivalent SDK ``SpanLimits``."""
        from opentelemetry.sdk.trace import SpanLimits as SdkLimits

        # The SDK reads "unset" as "from the environment", and its own
        # constant as "unlimited": hand it explicit values only.
        unlimited = SdkLimits.UNSET

        def value(number: int | None) -> int:
            return unlimited if number is None else number

        return SdkLimits(
            max_attributes=value(self.max_attributes),
            max_span_attributes=value(self.max_attributes),
            max_span_attribute_length=value(self.max_attribute_length),
            max_attribute_length=value(self.max_event_attribute_length),
            max_events=value(self.max_events),
            max_links=value(self.max_links),
            max_event_attributes=value(self.max_event_attributes),
            max_link_attributes=value(self.max_link_attributes),
        )


FIELDS = tuple(f.name for f in fields(SpanLimits) if f.name != "other_attribute_length")


def limits_from(config: Mapping[str, Any], environ: Mapping[str, str]) -> SpanLimits:
    """Limits from the ``span_limits`` mapping, then the ``OTEL_*`` variables, then defaults.

    A variable that is set but empty (or blank) counts as not set: the default
    applies (the SDK reads it as no limit). A variable cannot ask for no
    limit; the ``span_limits`` key can (``None``).

    Raises:
        ConfigurationError: an unknown key, a value that is not an integer
            ``>= 0`` (or ``None`` in the mapping: unlimited), a variable that is
            not an integer ``>= 0``.
    """
    unknown = [key for key in config if key not in FIELDS]
    if unknown:
        raise ConfigurationError(
            f"span_limits: unknown key {unknown[0]!r}; accepted keys: {', '.join(FIELDS)}"
        )
    values: dict[str, Any] = {}
    for name in FIELDS:
        if name in config:
            values[name] = _count(f"span_limits.{name}", config[name])
            continue
        own, general = _ENV[name]
        for var in (own, general):
            raw = environ.get(var, "").strip() if var else ""
            if raw:
                values[name] = _count(var, raw, variable=True)
                break
    if "max_attribute_length" not in config:
        raw = environ.get("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "").strip()
        general_length = (
            _count("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", raw, variable=True) if raw else None
        )
        if general_length != values.get("max_attribute_length"):
            values["other_attribute_length"] = general_length
    return SpanLimits(**values)


def _count(key: str, value: Any, variable: bool = False) -> int | None:
    """*value* of *key* as a limit; a *variable* (``OTEL_*``) has no way to say unlimited.

    At most ``sys.maxsize``: the SDK holds a span's events, links and
    attributes in deques of that length, which cannot be longer.
    """
    if value is None:
        return None
    number = int_text(value) if isinstance(value, str) else value
    if isinstance(number, bool) or not isinstance(number, int) or not 0 <= number <= sys.maxsize:
        accepted = f"an integer from 0 to {sys.maxsize}"
        if variable:
            accepted += " (unset it for the default; only the span_limits key says unlimited)"
        else:
            accepted += ", or null for no limit"
        raise ConfigurationError(f"{key}: {value!r} is not accepted; accepted: {accepted}")
    return number
