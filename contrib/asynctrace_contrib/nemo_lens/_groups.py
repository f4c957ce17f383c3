"""lens's span groups: its constants, their resolution, and their registration with asynctrace."""

from __future__ import annotations

from typing import ClassVar, Final

import asynctrace

__all__ = ["NAMESPACE", "SpanGroup", "is_span_group_enabled", "register_names"]

NAMESPACE: Final = "nemo_lens"
"""The namespace lens's extra groups (and names lens code enables) are registered under."""

asynctrace.register_span_groups(
    NAMESPACE,
    [
        asynctrace.SpanGroup(
            "forward_backward", asynctrace.Bucket.PRODUCTIVE, description="forward and backward"
        ),
        asynctrace.SpanGroup(
            "optimizer", asynctrace.Bucket.PRODUCTIVE, description="the optimizer step"
        ),
        asynctrace.SpanGroup(
            "load_checkpoint", asynctrace.Bucket.OVERHEAD, description="loading a checkpoint"
        ),
    ],
)


class SpanGroup:
    """lens's group names, as constants; every one is registered with asynctrace.

    ``SpanGroup.resolve(spec)`` resolves a spec against the class's own
    ``ALL_GROUPS`` and ``_PRESETS`` (as lens does, so a lens library's
    subclass declares its groups the lens way) and against asynctrace's
    registry (so groups other libraries registered count too). A preset both
    know gives the union. An unknown name raises
    :class:`asynctrace.ConfigurationError` (a ``ValueError``, as lens raises).
    :func:`setup_telemetry` registers a subclass's groups with asynctrace
    (unbucketed), so their spans are recorded.

    Example:
        >>> SpanGroup.FORWARD_BACKWARD
        'forward_backward'
        >>> sorted(SpanGroup.resolve("job,optimizer"))
        ['job', 'optimizer']
    """

    JOB = "job"
    CHECKPOINT = "checkpoint"
    EVALUATE = "evaluate"
    MODEL_INIT = "model_init"
    LOAD_CHECKPOINT = "load_checkpoint"
    STEP = "step"
    FORWARD_BACKWARD = "forward_backward"
    OPTIMIZER = "optimizer"

    ALL_GROUPS: ClassVar[frozenset[str]] = frozenset(
        [JOB, CHECKPOINT, EVALUATE, MODEL_INIT, LOAD_CHECKPOINT, STEP, FORWARD_BACKWARD, OPTIMIZER]
    )
    # lens's presets, by the same name (asynctrace's presets of these names are supersets).
    _PRESETS: ClassVar[dict[str, frozenset[str]]] = {
        "default": frozenset([JOB, CHECKPOINT, EVALUATE]),
        "per_step": ALL_GROUPS,
        "all": ALL_GROUPS,
    }

    @classmethod
    def resolve(cls, spec: str) -> frozenset[str]:
        """The group names *spec* turns on (presets and bare names, case-insensitive)."""
        names: set[str] = set()
        rest: list[str] = []
        known_presets = asynctrace.registered_presets()
        for token in (part.strip().lower() for part in spec.split(",")):
            if not token:
                continue
            if token in cls._PRESETS:
                names |= cls._PRESETS[token]
                if token in known_presets:
                    names |= known_presets[token]
            elif token in cls.ALL_GROUPS:
                names.add(token)
            else:
                rest.append(token)
        if rest:
            joined = ",".join(rest)
            try:
                names |= asynctrace.resolve_span_groups(joined)
            except asynctrace.ConfigurationError as exc:
                # asynctrace saw only the names left over: quote the spec as written.
                text = str(exc)
                quoted = f" in {joined!r}; "
                if quoted not in text:
                    raise
                raise asynctrace.ConfigurationError(
                    text.replace(quoted, f" in {spec!r}; ", 1)
                ) from None
        return frozenset(names)


def register_names(names: frozenset[str] | set[str], origin: str) -> None:
    """Register the *names* asynctrace does not know yet, as unbucketed groups.

    lens has no buckets and no registry: a name is a group when its class (or
    ``set_enabled_span_groups``) says so. Registering it (under ``nemo_lens``)
    makes asynctrace record its spans; a name already registered, or a
    preset, keeps its definition.
    """
    registered = asynctrace.registered_span_groups()
    presets = asynctrace.registered_presets()
    new = sorted(n for n in names if n not in registered and n not in presets)
    if new:
        asynctrace.register_span_groups(
            NAMESPACE,
            [asynctrace.SpanGroup(n, None, description=f"enabled through {origin}") for n in new],
        )


def is_span_group_enabled(group: str) -> bool:
    """Whether *group* is enabled now.

    Example:
        >>> is_span_group_enabled("no_such_group")
        False
    """
    return asynctrace.is_span_group_enabled(group)
