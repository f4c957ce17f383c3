"""Span groups: named switches for families of spans, with goodput buckets."""

from __future__ import annotations

import enum
import logging
import re
import threading
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal, TypeAlias, Union

from ._errors import ConfigurationError, report_internal_error
from ._forksafe import reinit_at_fork

__all__ = [
    "BY_CATEGORY",
    "Bucket",
    "SpanGroup",
    "register_span_groups",
    "registered_presets",
    "registered_span_groups",
    "resolve_span_groups",
]


class Bucket(str, enum.Enum):
    """Goodput classification of a leaf span's wall-clock time.

    Example:
        >>> Bucket.PRODUCTIVE.value
        'productive'
    """

    PRODUCTIVE = "productive"
    OVERHEAD = "overhead"
    IDLE = "idle"
    WASTED = "wasted"

    def __str__(self) -> str:
        return self.value


BY_CATEGORY: Literal["by_category"] = "by_category"
"""Marker for a group whose spans take their bucket from an efficiency category."""

GroupBucket: TypeAlias = Union[Bucket, Literal["by_category"], None]  # noqa: UP007

_LOG = logging.getLogger("asynctrace")
_NAME_RE = re.compile(r"[a-z0-9][a-z0-9_.\-/]*")


@dataclass(frozen=True)
class SpanGroup:
    """The definition of one span group.

    Attributes:
        name: lower-case identifier used in span-group specs.
        bucket: the goodput bucket of the group's leaf spans; ``None`` makes it
            an umbrella group (its spans enclose others and carry no bucket);
            :data:`BY_CATEGORY` takes the bucket from the efficiency category.
        per_item: the group's span count scales with items (prompts,
            requests) rather than steps; such groups are left out of the
            ``per_step`` preset.
        description: one line for ``asynctrace groups``.

    Example:
        >>> SpanGroup("tokenize", Bucket.OVERHEAD).is_umbrella
        False
    """

    name: str
    bucket: GroupBucket
    per_item: bool = False
    description: str = ""

    @property
    def is_umbrella(self) -> bool:
        """Whether spans of this group are umbrellas (never bucketed)."""
        return self.bucket is None

    def _same_definition(self, other: SpanGroup) -> bool:
        return (self.bucket, self.per_item) == (other.bucket, other.per_item)


def validate_name(value: object, key: str) -> str:
    """Return the normalised group/preset name or raise ConfigurationError."""
    if not isinstance(value, str):
        raise ConfigurationError(
            f"{key}: group and preset names must be non-empty strings, got {value!r}"
        )
    name = value.strip().lower()
    if not _NAME_RE.fullmatch(name):
        raise ConfigurationError(
            f"{key}: invalid name {value!r}; accepted: a non-empty string of "
            "lower-case letters, digits and _ . - / (not starting with a symbol)"
        )
    return name


def as_bucket(value: object) -> Bucket | None:
    """*value* as a :class:`Bucket` if ``Bucket(value)`` takes it (``"idle"``), else ``None``.

    Example:
        >>> as_bucket("idle") is Bucket.IDLE, as_bucket("IDLE")
        (True, None)
    """
    try:
        return Bucket(value)
    except Exception:  # a ValueError; a TypeError, or what an odd __eq__ raises
        return None


def validate_bucket(value: object, key: str, *, allow_none: bool = False) -> Bucket | None:
    """Return *value* as a :class:`Bucket` (a member or its value), or None when allowed."""
    if isinstance(value, Bucket):
        return value
    if value is None and allow_none:
        return None
    bucket = as_bucket(value)
    if bucket is not None:
        return bucket
    accepted = ", ".join(f"Bucket.{b.name}" for b in Bucket)
    accepted += " or their values " + ", ".join(repr(b._value_) for b in Bucket)
    if allow_none:
        accepted += ", None"
    raise ConfigurationError(f"{key}: {value!r} is not a Bucket; accepted: {accepted}")


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


def _is_text(value: object) -> bool:
    """A string or bytes: iterable, but never a list of groups."""
    return isinstance(value, (str, bytes))


def _coerce_groups(
    groups: Mapping[str, GroupBucket] | Iterable[SpanGroup], namespace: str
) -> list[SpanGroup]:
    out: list[SpanGroup] = []
    where = f"register_span_groups({namespace!r})"
    if isinstance(groups, Mapping):
        items: Iterable[SpanGroup | tuple[object, object]] = list(groups.items())
    elif isinstance(groups, Iterable) and not _is_text(groups):
        items = list(groups)
    else:
        raise ConfigurationError(
            f"{where} groups: {groups!r} is not accepted; accepted: a mapping of "
            "{name: Bucket | None | BY_CATEGORY}, or a list of SpanGroup objects ({} for none)"
        )
    for item in items:
        if isinstance(item, SpanGroup):
            group = item
        elif isinstance(item, tuple) and len(item) == 2:
            raw_name, bucket = item
            group = SpanGroup(raw_name, bucket)  # type: ignore[arg-type]
        else:
            raise ConfigurationError(
                f"{where}: {item!r} is not a group; accepted: a mapping of "
                "{name: Bucket | None | BY_CATEGORY}, or SpanGroup objects"
            )
        name = validate_name(group.name, f"{where} group")
        if name != group.name:  # the span helpers match names exactly: no silent mismatch
            raise ConfigurationError(
                f"{where}: group name {group.name!r} is not in normal form; register {name!r} "
                "(lower case, no surrounding spaces) and open its spans with that name"
            )
        given: GroupBucket = group.bucket  # a bucket's value ("idle") is that bucket
        if given is not None and given != BY_CATEGORY:
            given = validate_bucket(given, f"register_span_groups({namespace!r}) group {name!r}")
        elif group.bucket is not None and not isinstance(group.bucket, str):
            raise ConfigurationError(
                f"register_span_groups({namespace!r}) group {name!r}: bad bucket {group.bucket!r}"
            )
        if not isinstance(group.per_item, bool):  # "no" is truthy: never a silent True
            raise ConfigurationError(
                f"{where} group {name!r}: per_item={group.per_item!r} is not accepted; "
                "accepted: True or False"
            )
        if not isinstance(group.description, str):  # shown by `asynctrace groups`
            raise ConfigurationError(
                f"{where} group {name!r}: description={group.description!r} is not accepted; "
                "accepted: a str (one line for `asynctrace groups`)"
            )
        out.append(SpanGroup(name, given, group.per_item, group.description))
    return out


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
    new_groups = _coerce_groups(groups, namespace)
    new_presets: dict[str, tuple[str, ...]] = {}
    for raw, members in (presets or {}).items():
        pname = validate_name(raw, f"register_span_groups({namespace!r}) preset")
        if isinstance(members, str) or not isinstance(members, Iterable):
            raise ConfigurationError(
                f"register_span_groups({namespace!r}) preset {pname!r}: members must be a "
                f"list of names, got {members!r}"
            )
        new_presets[pname] = tuple(
            validate_name(m, f"register_span_groups({namespace!r}) preset {pname!r} member")
            for m in members
        )
    with _REGISTRY.lock:
        # Validate everything before changing anything.
        seen: dict[str, SpanGroup] = {}
        for group in new_groups:
            prior = _REGISTRY.groups.get(group.name) or seen.get(group.name)
            if prior is not None and not prior._same_definition(group):
                raise ConfigurationError(
                    f"register_span_groups({namespace!r}): group {group.name!r} is already "
                    f"registered with bucket={_fmt_bucket(prior.bucket)}, "
                    f"per_item={prior.per_item}; got bucket={_fmt_bucket(group.bucket)}, "
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
        cycle = _preset_cycle({**_REGISTRY.presets, **new_presets})
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


def _fmt_bucket(bucket: GroupBucket) -> str:
    if bucket is None:
        return "None (umbrella)"
    return str(bucket)


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


def _preset_cycle(
    presets: Mapping[str, tuple[str, ...] | Callable[[], frozenset[str]]],
) -> list[str]:
    """A cycle among the fixed presets (``[a, b, a]``), or an empty list."""
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> list[str]:
        if name in path:
            return [*path[path.index(name) :], name]
        if name in done:
            return []
        members = presets.get(name)
        if isinstance(members, tuple):
            for member in members:
                found = visit(member, [*path, name])
                if found:
                    return found
        done.add(name)
        return []

    for name in presets:
        found = visit(name, [])
        if found:
            return found
    return []


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


# ---------------------------------------------------------------------------
# The built-in namespace.

PER_PROMPT = "per_prompt"
EFFICIENCY = "efficiency"
LOOP_STALL = "loop_stall"

_BUILTIN_GROUPS = [
    SpanGroup("job", None, description="the whole-run root span"),
    SpanGroup("step", None, description="one span per training step"),
    SpanGroup("rollout", None, description="rollout batches (overlap each other)"),
    SpanGroup("setup", None, description="startup phases before the first step"),
    SpanGroup("model_init", None, description="model loading on workers"),
    SpanGroup("evaluate", None, description="validation runs"),
    SpanGroup(
        PER_PROMPT,
        None,
        per_item=True,
        description="spans emitted once per prompt/item (a cardinality axis, not a phase)",
    ),
    SpanGroup("generation", Bucket.PRODUCTIVE, description="model generation calls"),
    SpanGroup("reward", Bucket.PRODUCTIVE, description="reward computation"),
    SpanGroup("policy_update", Bucket.PRODUCTIVE, description="optimizer/training steps"),
    SpanGroup("data_processing", Bucket.OVERHEAD, description="batch preparation"),
    SpanGroup("data_plane", Bucket.OVERHEAD, description="batch-shaped data transfers"),
    SpanGroup("checkpoint", Bucket.OVERHEAD, description="checkpoint staging (+ finalize)"),
    SpanGroup("logprob", Bucket.OVERHEAD, description="policy/reference log-probs"),
    SpanGroup("advantage", Bucket.OVERHEAD, description="advantage computation"),
    SpanGroup(EFFICIENCY, BY_CATEGORY, description="idle and wasted waits (efficiency spans)"),
    # Next to efficiency: time the event loop lost, never bucketed (a stall
    # overlaps the spans it stretched).
    SpanGroup(
        LOOP_STALL,
        None,
        description="event-loop stalls: one unbucketed span per blocking call over the threshold",
    ),
]


def _preset_all() -> frozenset[str]:
    return frozenset(_REGISTRY.groups)


def _preset_per_step() -> frozenset[str]:
    return frozenset(name for name, g in _REGISTRY.groups.items() if not g.per_item)


register_span_groups(
    "asynctrace",
    _BUILTIN_GROUPS,
    presets={"default": ["job", "checkpoint", "evaluate", "setup", "model_init"]},
)
_register_dynamic_preset("all", _preset_all)
_register_dynamic_preset("per_step", _preset_per_step)
