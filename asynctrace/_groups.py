"""Span groups: the registry of named switches for families of spans, with goodput buckets.

The registry holds every group and preset, tells its listeners of changes and
resolves names against them; the built-in groups are registered here at
import. A group's definition and buckets are in :mod:`asynctrace._group_types`,
the checks of what a registration is given in :mod:`asynctrace._group_checks`,
the built-in definitions in :mod:`asynctrace._builtin_groups` (their names are
re-exported: the gate reads ``_groups.PER_PROMPT``) and the spec syntax in
:mod:`asynctrace._group_specs`.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping

from ._builtin_groups import BUILTIN_GROUPS, DEFAULT_PRESET, EFFICIENCY, LOOP_STALL, PER_PROMPT
from ._errors import ConfigurationError, report_internal_error
from ._forksafe import reinit_at_fork
from ._group_checks import coerce_groups, coerce_presets, fmt_bucket, preset_cycle
from ._group_types import Bucket, GroupBucket, SpanGroup  # noqa: F401 (Bucket: earlier pickles)

__all__ = [
    "EFFICIENCY",
    "LOOP_STALL",
    "PER_PROMPT",
    "add_registry_listener",
    "known_names_message",
    "register_span_groups",
    "registered_presets",
    "registered_span_groups",
    "resolve_tokens",
]

_LOG = logging.getLogger("asynctrace")


class _Registry:
    """Process-wide registry of groups and presets (thread-safe writes)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        reinit_at_fork(self.lock)  # held by another thread at fork(): made new in the child
        self.groups: dict[str, SpanGroup] = {}
        self.owners: dict[str, set[str]] = {}
        # A preset is either a fixed member tuple or a function of the registry.
        self.presets: dict[str, tuple[str, ...] | Callable[[], frozenset[str]]] = {}
        self.preset_owner: dict[str, str] = {}
        self.listeners: list[Callable[[], None]] = []
        self.version = 0


_REGISTRY = _Registry()


def register_span_groups(
    namespace: str,
    groups: Mapping[str, GroupBucket] | Iterable[SpanGroup],
    *,
    presets: Mapping[str, Iterable[str]] | None = None,
) -> None:
    """Declare span groups (and presets) under *namespace*.

    Registration is idempotent for identical definitions. A group already
    registered by another namespace with the same definition is shared;
    a different definition raises :class:`ConfigurationError`. Specs that named
    a group before it was registered (pending names) become active now.

    Args:
        namespace: the registering library, e.g. ``"mytrainer"``.
        groups: ``{name: Bucket | None | BY_CATEGORY}`` or :class:`SpanGroup` objects.
        presets: ``{preset: [group or preset names]}``.

    Example:
        >>> register_span_groups("mylib", {"tokenize": Bucket.OVERHEAD, "episode": None},
        ...                      presets={"mylib_basic": ["tokenize"]})
    """
    if not isinstance(namespace, str) or not namespace.strip():
        raise ConfigurationError(
            f"register_span_groups: namespace must be a non-empty string, got {namespace!r}"
        )
    if presets is not None and not isinstance(presets, Mapping):
        raise ConfigurationError(
            f"register_span_groups({namespace!r}) presets: {presets!r} is not accepted; "
            "accepted: None or a mapping of {preset: [group or preset names]}"
        )
    new_groups = coerce_groups(groups, namespace)
    new_presets = coerce_presets(presets, namespace)
    with _REGISTRY.lock:
        # Validate everything before changing anything.
        seen: dict[str, SpanGroup] = {}
        for group in new_groups:
            prior = _REGISTRY.groups.get(group.name) or seen.get(group.name)
            if prior is not None and not prior._same_definition(group):
                raise ConfigurationError(
                    f"register_span_groups({namespace!r}): group {group.name!r} is already "
                    f"registered with bucket={fmt_bucket(prior.bucket)}, "
                    f"per_item={prior.per_item}; got bucket={fmt_bucket(group.bucket)}, "
                    f"per_item={group.per_item}"
                )
            if group.name in _REGISTRY.presets or group.name in new_presets:
                raise ConfigurationError(
                    f"register_span_groups({namespace!r}): {group.name!r} is already a preset name"
                )
            seen[group.name] = group
        for pname, members in new_presets.items():
            prior_preset = _REGISTRY.presets.get(pname)
            if prior_preset is not None and prior_preset != members:
                raise ConfigurationError(
                    f"register_span_groups({namespace!r}): preset {pname!r} is already "
                    f"registered by {_REGISTRY.preset_owner[pname]!r} with different members"
                )
            if pname in _REGISTRY.groups or pname in seen:
                raise ConfigurationError(
                    f"register_span_groups({namespace!r}): {pname!r} is already a group name"
                )
        cycle = preset_cycle({**_REGISTRY.presets, **new_presets})
        if cycle:
            raise ConfigurationError(
                f"register_span_groups({namespace!r}): preset cycle {' -> '.join(cycle)}"
            )
        changed = False
        for group in new_groups:
            if group.name not in _REGISTRY.groups:
                _REGISTRY.groups[group.name] = group
                changed = True
            _REGISTRY.owners.setdefault(group.name, set()).add(namespace)
        for pname, members in new_presets.items():
            if pname not in _REGISTRY.presets:
                _REGISTRY.presets[pname] = members
                _REGISTRY.preset_owner[pname] = namespace
                changed = True
        if changed:
            _REGISTRY.version += 1
        listeners = list(_REGISTRY.listeners)
    if changed:
        for listener in listeners:
            try:  # the registration is made: a listener's failure is not the registrant's
                listener()
            except Exception as exc:
                report_internal_error(("registry listener",), exc)


def _register_dynamic_preset(name: str, fn: Callable[[], frozenset[str]]) -> None:
    with _REGISTRY.lock:
        _REGISTRY.presets[name] = fn
        _REGISTRY.preset_owner[name] = "asynctrace"


def add_registry_listener(fn: Callable[[], None]) -> None:
    """Call *fn* (no arguments) after each registration that changed anything."""
    with _REGISTRY.lock:
        _REGISTRY.listeners.append(fn)


def registered_span_groups() -> dict[str, SpanGroup]:
    """Return a snapshot of every registered group by name.

    Example:
        >>> registered_span_groups()["generation"].bucket
        <Bucket.PRODUCTIVE: 'productive'>
    """
    with _REGISTRY.lock:
        return dict(_REGISTRY.groups)


def registered_presets() -> dict[str, frozenset[str]]:
    """Return every preset resolved against the current registry.

    Example:
        >>> sorted(registered_presets()["default"])
        ['checkpoint', 'evaluate', 'job', 'model_init', 'setup']
    """
    with _REGISTRY.lock:
        return {name: _expand_preset(name, ()) for name in _REGISTRY.presets}


def _expand_preset(
    name: str, stack: tuple[str, ...], missing: list[tuple[str, str]] | None = None
) -> frozenset[str]:
    """The groups of preset *name*; its members not registered go to *missing*."""
    if name in stack:
        raise ConfigurationError(f"span_groups: preset cycle {' -> '.join((*stack, name))}")
    definition = _REGISTRY.presets[name]
    if callable(definition):
        return definition()
    out: set[str] = set()
    for member in definition:
        if member in _REGISTRY.groups:
            out.add(member)
        elif member in _REGISTRY.presets:
            out |= _expand_preset(member, (*stack, name), missing)
        elif missing is not None:  # resolves when it is registered; told about meanwhile
            missing.append((name, member))
    return frozenset(out)


_warned_members: set[tuple[str, str]] = set()


def _warn_missing_members(missing: Iterable[tuple[str, str]]) -> None:
    """Warn once per (preset, member) about a member nobody registered (yet)."""
    for preset, member in missing:
        if (preset, member) in _warned_members:
            continue
        _warned_members.add((preset, member))
        message = (
            f"asynctrace: preset {preset!r} names {member!r}, which is not registered (yet); "
            f"the preset leaves it out until a library registers it. {known_names_message()}"
        )
        try:  # a warnings filter set to "error" must not undo the resolution
            warnings.warn(message, stacklevel=4)
        except Exception:
            _LOG.warning(message)


def resolve_tokens(tokens: Iterable[str]) -> tuple[frozenset[str], tuple[str, ...]]:
    """Resolve tokens to (enabled groups, names that are not registered)."""
    enabled: set[str] = set()
    unknown: list[str] = []
    missing: list[tuple[str, str]] = []
    with _REGISTRY.lock:
        for token in tokens:
            if token in _REGISTRY.presets:
                enabled |= _expand_preset(token, (), missing)
            elif token in _REGISTRY.groups:
                enabled.add(token)
            elif token not in unknown:
                unknown.append(token)
    if missing:
        _warn_missing_members(missing)
    return frozenset(enabled), tuple(unknown)


def known_names_message() -> str:
    """A sentence listing registered groups and presets."""
    with _REGISTRY.lock:
        groups = ", ".join(sorted(_REGISTRY.groups))
        presets = ", ".join(sorted(_REGISTRY.presets))
    return f"known presets: {presets}; known groups: {groups}"


# ---------------------------------------------------------------------------
# The built-in namespace (its definitions are in :mod:`asynctrace._builtin_groups`).


def _preset_all() -> frozenset[str]:
    return frozenset(_REGISTRY.groups)


def _preset_per_step() -> frozenset[str]:
    return frozenset(name for name, g in _REGISTRY.groups.items() if not g.per_item)


register_span_groups("asynctrace", BUILTIN_GROUPS, presets={"default": DEFAULT_PRESET})
_register_dynamic_preset("all", _preset_all)
_register_dynamic_preset("per_step", _preset_per_step)
