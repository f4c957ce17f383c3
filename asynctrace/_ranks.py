"""Which ranks export: ``export_ranks`` parsed once and decided once per process.

A rank that does not export is configured as disabled: its spans are the
shared non-recording span, so it pays the disabled cost and nothing else.
The decision is made from the rank, the world size and the local rank alone,
so every process of one rank (its driver, the children it starts with its
environment) decides the same way.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ._config_checks import float_text, int_text
from ._errors import ConfigurationError

__all__ = ["ExportRanks", "parse_export_ranks"]

_NAMES = ("all", "first", "last", "local_first")
_ACCEPTED = (
    "all, first, last, local_first, a list of ranks (e.g. [0, 8] or '0,8'), "
    "sampled:<rate in (0, 1]>"
)
# A variable holds text: its list of ranks is written with commas alone.
_ACCEPTED_TEXT = (
    "all, first, last, local_first, ranks separated by commas (e.g. 0,8), sampled:<rate in (0, 1]>"
)


def _accepted(key: str) -> str:
    """What *key* accepts: a variable (``ASYNCTRACE_EXPORT_RANKS``) takes text only."""
    return _ACCEPTED_TEXT if key.isupper() else _ACCEPTED


@dataclass(frozen=True)
class ExportRanks:
    """A parsed ``export_ranks`` value.

    Attributes:
        mode: ``"all"``, ``"first"``, ``"last"``, ``"local_first"``,
            ``"list"`` or ``"sampled"``.
        ranks: the ranks of ``"list"``.
        rate: the share of ranks of ``"sampled"``.

    Example:
        >>> parse_export_ranks("export_ranks", "first").exports(rank=0, world_size=4)
        True
    """

    mode: str = "all"
    ranks: frozenset[int] = frozenset()
    rate: float = 1.0

    def exports(self, *, rank: int, world_size: int, local_rank: int | None = None) -> bool:
        """Whether the process of *rank* exports.

        ``local_first`` with no local rank known counts the process as the
        first of its node. ``sampled`` keeps the ranks whose hash falls under
        the rate (the same ranks on every run), and at least one: when none
        of the world's ranks does, the rank with the lowest hash exports.

        Example:
            >>> every = parse_export_ranks("k", "sampled:0.25")
            >>> [r for r in range(8) if every.exports(rank=r, world_size=8)]
            [3, 4, 5, 6]
        """
        if self.mode == "all":
            return True
        if self.mode == "first":
            return rank == 0
        if self.mode == "last":
            return rank == world_size - 1
        if self.mode == "local_first":
            return not local_rank
        if self.mode == "list":
            return rank in self.ranks
        if rank_hash(rank) < self.rate:
            return True
        # Stops at the first rank under the rate: about 1/rate steps (at most 10**4,
        # the hash's resolution, whatever the world size); the whole world is
        # scanned only when it is small enough that none of it is under the rate.
        if any(rank_hash(r) < self.rate for r in range(world_size)):
            return False
        return min(range(world_size), key=rank_hash) == rank

    def __str__(self) -> str:
        if self.mode == "list":
            return ",".join(str(r) for r in sorted(self.ranks))
        if self.mode == "sampled":
            return f"sampled:{self.rate:g}"
        return self.mode


def rank_hash(rank: int) -> float:
    """A rank's place in ``[0, 1)``: the same on every run and host (nemo-lens's rule).

    Example:
        >>> rank_hash(0) == rank_hash(0)
        True
    """
    digest = hashlib.md5(str(rank).encode(), usedforsecurity=False).hexdigest()
    return (int(digest, 16) % 10000) / 10000.0


def parse_export_ranks(key: str, value: Any) -> ExportRanks:
    """*value* (a name, ``sampled:<rate>``, a list of ranks or ``"0,3"``) as :class:`ExportRanks`.

    Raises:
        ConfigurationError: naming *key*, the value and what is accepted.

    Example:
        >>> parse_export_ranks("export_ranks", "0, 8").ranks == frozenset({0, 8})
        True
    """
    if isinstance(value, ExportRanks):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        value = [value]
    if isinstance(value, str):
        text = value.strip().lower()
        if text in _NAMES:
            return ExportRanks(text)
        if text.startswith("sampled:"):
            rate = float_text(text.removeprefix("sampled:"))
            if rate is not None and 0.0 < rate <= 1.0:
                return ExportRanks("sampled", rate=rate)
            raise ConfigurationError(
                f"{key}: {value!r} is not accepted (the rate must be a number in (0, 1]); "
                f"accepted: {_accepted(key)}"
            )
        ranks = [int_text(part) for part in text.split(",") if part.strip()]
        if ranks and all(rank is not None and rank >= 0 for rank in ranks):
            return ExportRanks("list", frozenset(rank for rank in ranks if rank is not None))
    elif (
        isinstance(value, Sequence)
        and value
        and all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in value)
    ):
        return ExportRanks("list", frozenset(value))
    raise ConfigurationError(f"{key}: {value!r} is not accepted; accepted: {_accepted(key)}")
