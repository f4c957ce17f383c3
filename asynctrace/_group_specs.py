"""Span-group specs: a comma-separated union of presets and group names, parsed and resolved."""

from __future__ import annotations

from ._errors import ConfigurationError
from ._group_types import validate_name
from ._groups import known_names_message, resolve_tokens

__all__ = ["require_groups", "resolve_span_groups", "split_spec"]


def split_spec(spec: object, key: str = "span_groups") -> list[str]:
    """Split a spec into normalised tokens, validating the syntax only."""
    if isinstance(spec, (list, tuple, set, frozenset)):
        parts: list[object] = list(spec)
    elif isinstance(spec, str):
        parts = list(spec.split(","))
    else:
        raise ConfigurationError(
            f"{key}: expected a comma-separated string of presets and group names, got {spec!r}"
        )
    tokens: list[str] = []
    for part in parts:
        if not isinstance(part, str):
            raise ConfigurationError(f"{key}: entries must be strings, got {part!r}")
        token = part.strip().lower()
        if not token:
            continue
        if token.startswith(("-", "!", "~")):
            raise ConfigurationError(
                f"{key}: {part.strip()!r}: there is no subtraction syntax; list the groups "
                "you want instead (a spec is a union of presets and group names)"
            )
        tokens.append(validate_name(token, key))
    return tokens


def require_groups(tokens: list[str], spec: object, key: str = "span_groups") -> list[str]:
    """*tokens* if the spec named anything; an empty spec is a :class:`ConfigurationError`.

    For a written configuration (``span_groups``, ``ASYNCTRACE_SPAN_GROUPS``):
    telemetry on with no group at all is a mistake there. The calls that take a
    spec built by a program (``enable_telemetry``, ``set_span_groups``) keep
    ``""`` as "every group off".
    """
    if not tokens:
        raise ConfigurationError(
            f"{key}: {spec!r} names no group; accepted: comma-separated presets and group "
            "names, such as 'default' or 'per_step,per_prompt' (to record nothing, leave "
            "telemetry off)"
        )
    return tokens


def resolve_span_groups(spec: str) -> frozenset[str]:
    """Resolve a span-group spec to the set of group names it enables.

    The spec is a comma-separated union of preset keywords and bare group
    names, case-insensitive and whitespace-tolerant.

    Raises:
        ConfigurationError: a name is neither a registered group nor a preset.

    Example:
        >>> sorted(resolve_span_groups("default, Generation"))
        ['checkpoint', 'evaluate', 'generation', 'job', 'model_init', 'setup']
    """
    enabled, unknown = resolve_tokens(split_spec(spec))
    if unknown:
        names = ", ".join(repr(u) for u in unknown)
        raise ConfigurationError(
            f"span_groups: unknown name{'s' if len(unknown) > 1 else ''} {names} in "
            f"{spec!r}; {known_names_message()}"
        )
    return enabled
