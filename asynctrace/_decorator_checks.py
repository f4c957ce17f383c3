"""What the decorators accept, checked where they are applied (never at a call).

A callable (not a class), a group name the helpers take, attributes of
OpenTelemetry's types, options of the right kinds: anything else is a
:class:`~asynctrace.ConfigurationError` naming the argument, the value and
what is accepted.
"""

from __future__ import annotations

from collections.abc import Mapping

from ._errors import ConfigurationError
from ._group_types import validate_name
from ._span_rules import Attributes

__all__ = [
    "check_attribute",
    "check_callable",
    "check_group",
    "check_name",
    "check_options",
]


def check_callable(fn: object, where: str) -> None:
    """Refuse what a decorator cannot wrap: a class, or anything not callable."""
    if not callable(fn):
        raise ConfigurationError(
            f"{where}: expected a function, a method or another callable to decorate, "
            f"got a {type(fn).__name__}"
        )
    if isinstance(fn, type):  # the wrapper, a function, would replace the class itself
        raise ConfigurationError(
            f"{where}: {fn.__qualname__!r} is a class; accepted: a function, a method or "
            "another callable (decorate the class's __init__, or a factory function that "
            "builds it)"
        )


def check_group(group: object, where: str) -> str:
    """The group's name, in the normal form ``register_span_groups`` requires: the span
    helpers compare names exactly, so a decorator takes the same names they do."""
    if not isinstance(group, str) or not group.strip():
        raise ConfigurationError(f"{where}(group): expected a non-empty group name, got {group!r}")
    name = validate_name(group, f"{where}(group)")
    if name != group:
        raise ConfigurationError(
            f"{where}(group): group name {group!r} is not in normal form; use {name!r} "
            "(lower case, no surrounding spaces), as register_span_groups requires"
        )
    return name


_SCALARS = (bool, str, int, float)
_ACCEPTED_VALUES = "a str, bool, int or float, or a list or tuple of one of those types"


def check_attribute(key: str, value: object, where: str) -> None:
    """One decorator attribute, checked as OpenTelemetry would at every call."""
    if not key:
        raise ConfigurationError(
            f"{where}(attributes): attribute names must be non-empty strings, got {key!r}"
        )
    if isinstance(value, _SCALARS):
        return
    if isinstance(value, (list, tuple)):
        kinds = {type(item) for item in value if item is not None}
        if len(kinds) <= 1 and kinds <= set(_SCALARS):
            return
        raise ConfigurationError(
            f"{where}(attributes): {key!r} has a {type(value).__name__} of "
            f"{', '.join(sorted(kind.__name__ for kind in kinds))}; accepted: {_ACCEPTED_VALUES}"
        )
    raise ConfigurationError(
        f"{where}(attributes): {key!r} has a value of type {type(value).__name__}; "
        f"accepted: {_ACCEPTED_VALUES}"
    )


def check_options(attributes: object, profile: object, where: str) -> Attributes | None:
    """*attributes* (a mapping of names to attribute values, or None) and *profile* (a
    bool), checked once at decoration rather than warned about at every call."""
    if attributes is not None:
        if not (
            isinstance(attributes, Mapping) and all(isinstance(key, str) for key in attributes)
        ):
            raise ConfigurationError(
                f"{where}(attributes): expected a mapping of attribute names (str) to values, "
                f"or None; got {attributes!r}"
            )
        for key, value in attributes.items():
            check_attribute(key, value, where)
    if not isinstance(profile, bool):
        raise ConfigurationError(f"{where}(profile): expected True or False, got {profile!r}")
    return attributes


def check_name(name: object, where: str) -> str | None:
    """*name* if it is ``None`` (the function's name) or a non-empty string; else refused."""
    if name is None or (isinstance(name, str) and name.strip()):
        return name
    raise ConfigurationError(
        f"{where}(name): expected a non-empty span name (a str), or None for the "
        f"function's qualified name; got {name!r}"
    )
