"""What the goodput rollup holds between spans: groups of arrived spans, steps, and the
rules that fold one into another (see :mod:`asynctrace._rollup`)."""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from typing import Any, Final

from ._scopes import _INT64_MAX as _I64_MAX
from ._scopes import _INT64_MIN as _I64_MIN

MASK: Final = (1 << 64) - 1
_EXAMPLES: Final = 3
_ZERO: Final = (0.0, 0.0, 0.0, 0.0)

# A bucketed leaf: (start, end, bucket index or -1 if unknown, name, key).
Leaf = tuple[float, float, int, str, int]
Example = tuple[str, int]  # (span name, key)


class _Settled:
    """Where spans outside any step go."""

    __slots__ = ()
    fwd = None


OUTSIDE: Final = _Settled()
CYCLE: Final = _Settled()  # outside too: under a span whose parent ids form a cycle


class Group:
    """Arrived spans waiting for an ancestor that has not arrived yet."""

    __slots__ = ("cands", "ex", "fwd", "leaves", "nb", "phases", "pre", "stalls")

    def __init__(self) -> None:
        self.leaves: list[Leaf] = []
        # Loop-stall spans (start, end), and those already clipped to a folded step.
        self.stalls: list[tuple[float, float]] | None = None
        self.pre: list[float] | None = None  # bucket seconds already summed (folded steps)
        self.phases: dict[str, float] | None = None  # ...and per leaf name, with ``pre``
        self.nb = 0  # bucketed spans folded into ``pre``
        self.ex: list[Example] | None = None  # a few bucketed spans of the subtree
        self.cands: list[Step] | None = None  # candidate steps whose parent is pending
        self.fwd: _Container | None = None

    def has_bucketed(self) -> bool:
        """Whether any bucketed span waits here, as a leaf or folded into ``pre``."""
        return bool(self.leaves) or self.nb > 0

    def examples(self) -> list[Example]:
        """A few bucketed spans of the subtree: its leaves' first, then those kept."""
        out = [(leaf[3], leaf[4]) for leaf in self.leaves[:_EXAMPLES]]
        if self.ex:
            out.extend(self.ex[: _EXAMPLES - len(out)])
        return out

    def add_examples(self, examples: Sequence[Example]) -> None:
        """Keep *examples* too, up to the few the group keeps."""
        if not examples:
            return
        if self.ex is None:
            self.ex = []
        if len(self.ex) < _EXAMPLES:
            self.ex.extend(examples[: _EXAMPLES - len(self.ex)])


class Step:
    """A step, or a candidate that is one unless its parent carries an iteration."""

    __slots__ = (
        "child",
        "end",
        "ex",
        "fwd",
        "gone",
        "iteration",
        "key",
        "leaves",
        "name",
        "nb",
        "origin",
        "orphan",
        "overlaps",
        "parent",
        "phases",
        "raw",
        "sealed",
        "stall_spans",
        "stalled",
        "start",
        "stub",
        "sums",
        "top_end",
        "top_key",
        "top_name",
        "top_start",
        "twice",
        "within",
    )

    def __init__(
        self,
        name: str,
        key: int,
        origin: int,
        iteration: int | None,
        start: float,
        end: float,
        parent: int | None = None,
    ) -> None:
        self.name = name
        self.key = key
        self.parent = parent  # its parent's key: steps sharing it are siblings
        self.origin = origin
        self.iteration = iteration
        self.start = start
        self.end = end
        self.sums: list[float] | tuple[float, ...] = _ZERO  # a list once written
        self.phases: dict[str, float] | None = None  # leaf name -> µs counted in the step
        self.sealed = False  # finished: nothing changes its numbers any more
        self.leaves = 0  # bucketed leaves counted in a bucket (with time inside the step)
        # Loop-stall µs inside the step (in no bucket): the union of the stall spans,
        # clipped to it, kept as disjoint intervals in time order (overlapping stalls of
        # several loops or processes are one stretch of wall clock, counted once).
        self.stalled = 0.0
        self.stall_spans: list[tuple[float, float]] | None = None
        self.nb = 0
        self.ex: Sequence[Example] = ()
        self.overlaps: Sequence[tuple[Example, Example]] = ()
        self.child: Group | None = None  # the group of its children, forwarding here
        self.orphan = False  # confirmed because its parent never arrived
        self.raw: list[Leaf] | None = None  # a candidate's leaves, clipped once confirmed
        # A candidate whose wait was given up (max_pending), waiting outside the limit:
        # bucketed spans arriving under it count nowhere (``evicted_leaves``).
        self.stub = False
        # A candidate that a step of its trace and iteration contained when it arrived:
        # no step should its parent never arrive, however many steps end meanwhile.
        self.within = False
        # Bucketed spans under this candidate given up past max_pending (one of them): its
        # parent nests buckets if it is bucketed and this turns out to be no step.
        self.gone: list[Example] | None = None
        self.fwd: _Container | None = None  # set when folded into its parent
        # The counted leaf that ends last (clipped), to find leaves counted over one another
        # in one test each: arriving in end order, a leaf overlaps an earlier one exactly
        # when it overlaps this one. *twice*: µs seen counted twice so far (a lower bound).
        self.top_start = self.top_end = 0.0
        self.top_name = ""
        self.top_key = -1
        self.twice = 0.0

    def add_leaves(self, leaves: list[Leaf]) -> None:
        """Count *leaves* in the step: each one's overlap with it goes to its bucket and name.

        A leaf of an unknown bucket (index < 0; reported when it arrived) is
        counted in no bucket, and neither it nor a leaf clipped to nothing
        (outside the step) counts in ``leaves``. A span of no duration, which
        is no step (see ``Rollup._finished``), takes its leaves all the same: they
        count in no bucket and ``leaves`` counts them, to say what it took.
        """
        first, last = self.start, self.end
        if not last > first:
            self.leaves += sum(1 for leaf in leaves if leaf[2] >= 0)
            return
        sums: list[float] | None = None
        phases = self.phases
        counted = 0
        top_start, top_end, top_name, top_key = (  # locals in the loop, stored after it
            self.top_start,
            self.top_end,
            self.top_name,
            self.top_key,
        )
        for start, end, bucket, name, key in leaves:
            if bucket < 0:
                continue
            # min(end, last) - max(start, first), with the operands min and max return
            if last < end:
                end = last
            if first > start:
                start = first
            overlap = end - start
            if overlap > 0:
                counted += 1
                if sums is None:
                    sums = self.writable_sums()
                sums[bucket] += overlap
                if phases is None:
                    phases = self.phases = {}
                phases[name] = phases.get(name, 0.0) + overlap
                if start < top_end and top_start < end:  # counted over another leaf
                    self.twice += min(end, top_end) - max(start, top_start)
                    if len(self.overlaps) < _EXAMPLES:
                        self.overlaps = [*self.overlaps, ((top_name, top_key), (name, key))]
                if end > top_end:
                    top_start, top_end, top_name, top_key = start, end, name, key
        self.top_start, self.top_end, self.top_name, self.top_key = (
            top_start,
            top_end,
            top_name,
            top_key,
        )
        self.leaves += counted

    def add_stalls(self, group: Group) -> None:
        """Take *group*'s stall spans, clipped to the step: ``stalled`` counts the
        time at least one of them covers (their union), never a stretch twice."""
        stalls = group.stalls
        if stalls:
            first, last = self.start, self.end
            for start, end in stalls:
                if first > start:
                    start = first
                if last < end:
                    end = last
                if end > start:
                    self.add_stall(start, end)
            group.stalls = None

    def add_stall(self, start: float, end: float) -> None:
        """Cover [*start*, *end*) (inside the step) in the stall union."""
        spans = self.stall_spans
        if spans is None:
            self.stall_spans = [(start, end)]
            self.stalled += end - start
        elif spans[-1][1] < start:  # after every stall so far (spans arrive in end order)
            spans.append((start, end))
            self.stalled += end - start
        else:
            self.stalled += _cover(spans, start, end)

    def writable_sums(self) -> list[float]:
        """The step's bucket sums as a list of its own (a shared tuple copied first)."""
        sums = self.sums
        if isinstance(sums, tuple):
            sums = self.sums = list(sums)
        return sums


_Container = Group | Step | _Settled
# What the window remembers of an arrived span: (parent key, container, flags, name).
Entry = tuple[int | None, _Container, int, str]


def step_label(step: Step) -> str:
    """How a violation names *step*."""
    return f"step {step.name!r} (span {step.key & MASK:016x}" + (
        f", rl.iteration={step.iteration})" if step.iteration is not None else ")"
    )


def as_iteration(value: Any) -> int | None:
    """*value* as an ``rl.iteration``: an int (subclasses such as ``IntEnum`` too, not
    ``bool``) in the signed 64-bit range the trace file keeps exactly; else ``None``.

    A trace file's reader may read a larger integer as a float, so the live rollup
    and ``asynctrace goodput`` agree by taking neither for an iteration.
    """
    if not isinstance(value, int) or isinstance(value, bool):
        return None
    value = int(value)
    return value if _I64_MIN <= value <= _I64_MAX else None


def resolve(container: _Container) -> _Container:
    """The container *container* forwards to in the end (itself if it does not)."""
    while container.fwd is not None:
        container = container.fwd
    return container


def _cover(spans: list[tuple[float, float]], start: float, end: float) -> float:
    """Add [*start*, *end*) to *spans* (disjoint, in time order); return the time added.

    The spans it overlaps or touches become one: at most as many spans stay as
    there are separate stretches of stall, however many stalls overlap.
    """
    lo = bisect_left(spans, start, key=_span_end)  # the first ending at or after start
    hi = bisect_right(spans, end, key=_span_start)  # ...up to the last starting by end
    if lo >= hi:
        spans.insert(lo, (start, end))
        return end - start
    covered = 0.0
    for first, last in spans[lo:hi]:
        covered += last - first
    first = min(start, spans[lo][0])
    last = max(end, spans[hi - 1][1])
    spans[lo:hi] = [(first, last)]
    return (last - first) - covered


def _span_start(span: tuple[float, float]) -> float:
    return span[0]


def _span_end(span: tuple[float, float]) -> float:
    return span[1]


def add_sums(step: Step, group: Group) -> None:
    """Add *group*'s summed bucket seconds, phases and counts to *step*; *group* keeps none."""
    if group.pre is not None:
        sums = step.writable_sums()
        for i, seconds in enumerate(group.pre):
            sums[i] += seconds
        group.pre = None
    if group.phases:
        step.phases = merged(step.phases, group.phases)
        group.phases = None
    step.nb += group.nb
    group.nb = 0


def merge(source: Group, target: Group) -> None:
    """Move *source*'s content into *target*; *source* forwards there from now on."""
    if source.leaves:
        if len(source.leaves) > len(target.leaves):
            source.leaves, target.leaves = target.leaves, source.leaves
        target.leaves.extend(source.leaves)
        source.leaves.clear()
    if source.pre is not None:
        if target.pre is None:
            target.pre = source.pre
        else:
            for i, seconds in enumerate(source.pre):
                target.pre[i] += seconds
        source.pre = None
    if source.phases:
        target.phases = merged(target.phases, source.phases)
        source.phases = None
    if source.nb:
        target.nb += source.nb
        source.nb = 0
    if source.stalls:
        if target.stalls is None:
            target.stalls = []
        target.stalls.extend(source.stalls)
        source.stalls = None
    if source.ex:
        target.add_examples(source.ex)
        source.ex = None
    if source.cands:
        if target.cands is None:
            target.cands = []
        target.cands.extend(source.cands)
        source.cands = None
    source.fwd = target


def merged(into: dict[str, float] | None, more: dict[str, float]) -> dict[str, float]:
    """*more*'s seconds per name added to *into* (a new dict when *into* is ``None``)."""
    if into is None:
        return dict(more)
    for name, seconds in more.items():
        into[name] = into.get(name, 0.0) + seconds
    return into


def overlapping_pairs(leaves: Iterable[Leaf]) -> list[tuple[Example, Example]]:
    """A few pairs of bucketed leaves that overlap in time (why buckets exceed the wall)."""
    pairs: list[tuple[Example, Example]] = []
    latest: Leaf | None = None
    for leaf in sorted(leaf for leaf in leaves if leaf[2] >= 0):
        if latest is not None and leaf[0] < latest[1]:
            pairs.append(((latest[3], latest[4]), (leaf[3], leaf[4])))
            if len(pairs) >= _EXAMPLES:
                break
        if latest is None or leaf[1] > latest[1]:
            latest = leaf
    return pairs
