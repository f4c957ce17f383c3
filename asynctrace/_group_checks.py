"""What ``register_span_groups`` accepts: its groups and presets, checked before any change."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from ._errors import ConfigurationError
from ._group_types import BY_CATEGORY, GroupBucket, SpanGroup, validate_bucket, validate_name

__all__ = ["coerce_groups", "coerce_presets", "fmt_bucket", "preset_cycle"]


def _is_text(value: object) -> bool:
    """A string or bytes: iterable, but never a list of groups."""
    return isinstance(value, (str, bytes))


def coerce_groups(
    groups: Mapping[str, GroupBucket] | Iterable[SpanGroup], namespace: str
) -> list[SpanGroup]:
    """The *groups* argument of ``register_span_groups`` as checked, normalised groups."""
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


def coerce_presets(
    presets: Mapping[str, Iterable[str]] | None, namespace: str
) -> dict[str, tuple[str, ...]]:
    """The *presets* argument of ``register_span_groups`` as normalised member tuples."""
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
    return new_presets


def fmt_bucket(bucket: GroupBucket) -> str:
    """*bucket* as a conflict message shows it."""
    if bucket is None:
        return "None (umbrella)"
    return str(bucket)


def preset_cycle(
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
