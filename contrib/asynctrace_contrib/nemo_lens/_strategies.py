"""lens's export strategies: which ranks export, and the registry of named strategies."""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Callable
from typing import Final, TypeAlias

import asynctrace

from ._config import NemoLensConfig, warn_once

__all__ = [
    "BUILTIN_STRATEGIES",
    "ExportStrategy",
    "register_export_strategy",
    "registered_strategies",
    "should_export",
    "strategy_named",
    "unregister_export_strategy",
]

ExportStrategy: TypeAlias = Callable[[NemoLensConfig, int, int], bool]
"""An export strategy: ``(config, rank, world_size) -> bool``, whether this rank exports."""


def _all_ranks(config: NemoLensConfig, rank: int, world_size: int) -> bool:
    """lens's ``all_ranks``: every rank exports."""
    return True


def _single_rank(config: NemoLensConfig, rank: int, world_size: int) -> bool:
    """lens's ``single_rank``: ``export_rank`` exports (``-1``: the last rank)."""
    target = config.export_rank if config.export_rank >= 0 else world_size - 1
    if target >= world_size:  # lens exports nowhere then, silently
        warn_once(
            ("export_rank", str(target), str(world_size)),
            f"setup_telemetry: export_rank {target} names no rank of this job "
            f"(world_size={world_size}), so no rank exports; accepted: a rank below "
            "world_size, or -1: the last rank",
        )
    return rank == target


def _sampled(config: NemoLensConfig, rank: int, world_size: int) -> bool:
    """lens's deterministic hash: same rank and rate, same outcome."""
    digest = hashlib.md5(str(rank).encode(), usedforsecurity=False).hexdigest()
    return (int(digest, 16) % 10000) / 10000.0 < config.export_sample_rate


def _first_rank_per_node(config: NemoLensConfig, rank: int, world_size: int) -> bool:
    """lens's ``first_rank_per_node``: ``LOCAL_RANK`` 0 (or not known) exports."""
    return _local_rank() in (None, 0)


BUILTIN_STRATEGIES: Final = frozenset(
    {"all_ranks", "single_rank", "sampled", "first_rank_per_node"}
)
"""lens's four built-in export strategies: never unregistered, replaced only with
``allow_override=True``."""

_STRATEGIES: dict[str, ExportStrategy] = {
    "all_ranks": _all_ranks,
    "single_rank": _single_rank,
    "sampled": _sampled,
    "first_rank_per_node": _first_rank_per_node,
}
_STRATEGIES_LOCK = threading.Lock()


def _new_strategies_lock_in_child() -> None:
    """A lock another thread held at ``fork()`` would stay held in the child: a new one."""
    global _STRATEGIES_LOCK
    _STRATEGIES_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_strategies_lock_in_child)


def register_export_strategy(
    name: str, strategy: ExportStrategy, *, allow_override: bool = False
) -> None:
    """Register *strategy* under *name*, selectable as ``export_strategy=name`` (lens's).

    Raises:
        ValueError: *name* empty, or already registered without
            ``allow_override=True``.

    Example:
        >>> register_export_strategy("even_ranks", lambda config, rank, size: rank % 2 == 0)
        >>> "even_ranks" in registered_strategies()
        True
        >>> unregister_export_strategy("even_ranks")
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"register_export_strategy: name {name!r}; accepted: a non-empty string")
    with _STRATEGIES_LOCK:
        if name in _STRATEGIES and not allow_override:
            raise ValueError(
                f"Strategy {name!r} is already registered. Pass allow_override=True to replace it."
            )
        _STRATEGIES[name] = strategy


def unregister_export_strategy(name: str) -> None:
    """Remove the strategy registered under *name* (lens's).

    Raises:
        ValueError: *name* is a built-in strategy, or is not registered.
    """
    if name in BUILTIN_STRATEGIES:
        raise ValueError(f"Cannot unregister built-in strategy {name!r}.")
    with _STRATEGIES_LOCK:
        if name not in _STRATEGIES:
            raise ValueError(f"Strategy {name!r} is not registered.")
        del _STRATEGIES[name]


def registered_strategies() -> list[str]:
    """The registered strategy names, built-ins and custom, sorted (lens's).

    Example:
        >>> registered_strategies()
        ['all_ranks', 'first_rank_per_node', 'sampled', 'single_rank']
    """
    with _STRATEGIES_LOCK:
        return sorted(_STRATEGIES)


def strategy_named(name: str) -> ExportStrategy:
    """The strategy registered under *name*.

    Raises:
        ValueError: no strategy is registered under *name*; the registered ones listed.
    """
    with _STRATEGIES_LOCK:
        strategy = _STRATEGIES.get(name)
        if strategy is None:
            raise ValueError(
                f"Unknown export strategy {name!r}; accepted: "
                f"{', '.join(sorted(_STRATEGIES))} (register_export_strategy adds one)"
            )
        return strategy


def should_export(config: NemoLensConfig, rank: int, world_size: int) -> bool:
    """Whether this rank exports, by the strategy ``config.export_strategy`` names."""
    return bool(strategy_named(config.export_strategy)(config, rank, world_size))


def _local_rank() -> int | None:
    """This process's ``LOCAL_RANK`` (``None``: unset, empty or ``-1``), as asynctrace reads it.

    Unset, empty and ``-1`` (which some launchers set outside a distributed
    run) mean not known: the process counts as the first of its node, as it
    does for asynctrace's ``local_first`` and, unset, for lens.

    Raises:
        asynctrace.ConfigurationError: a value that is not an integer, or one
            below ``-1``; naming the variable, the value and what is accepted.
    """
    raw = os.environ.get("LOCAL_RANK", "").strip()
    if not raw:
        return None
    value = int(raw) if re.fullmatch(r"[+-]?[0-9]+", raw) else None
    if value is None or value < -1:
        raise asynctrace.ConfigurationError(
            f"LOCAL_RANK: {raw!r} is not accepted by export_strategy first_rank_per_node; "
            "accepted: an integer >= 0 (as launchers set it), or -1 or empty: not known "
            "(the process counts as the first of its node)"
        )
    return None if value == -1 else value
