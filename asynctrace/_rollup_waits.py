"""The rollup's waits: spans grouped by the parent they wait for, within max_pending."""

from __future__ import annotations

from collections import deque

from ._rollup_tree import OUTSIDE, Example, Group, Step

__all__ = ["RollupWaits"]

_MARKS_KEPT = 1024  # the fewest marks of given-up bucketed spans kept, whatever max_pending


class RollupWaits:
    """How a rollup keeps the groups waiting for a parent, and gives the oldest up."""

    _grace: float
    _max_pending: int | None
    _waits: deque[int]
    _remote: deque[tuple[float, int]]
    _remote_keys: set[int]
    _remote_open: int
    _stubs: dict[int, list[Step]]
    _stubbed: int
    _gone: dict[int, list[Example]]
    _load: int
    _limit: int
    evicted: int
    evicted_leaves: int
    dropped_stubs: int
    _next_seal: float
    _pending: dict[int, Group]

    def _wait(self, pkey: int) -> Group:
        """A new group of spans waiting for *pkey*; the caller gives the oldest up past
        max_pending (:meth:`_evict`) once it has put its span in the group."""
        group = self._pending[pkey] = Group()
        self._load += 1
        if self._remote_keys and pkey in self._remote_keys:
            self._remote_open += 1
        limit = self._max_pending
        if limit is not None:
            waits = self._waits
            waits.append(pkey)
            if len(waits) > 2 * limit + 64:  # forget keys no longer waiting
                pending = self._pending
                self._waits = deque(k for k in waits if k in pending)
        return group

    def _take(self, key: int) -> Group | None:
        """The group waiting for *key* (which has arrived), no longer waiting."""
        group = self._pending.pop(key, None)
        if group is not None:
            self._load -= 1 + len(group.leaves)
            if self._remote_keys and key in self._remote_keys:
                self._remote_open -= 1
        return group

    def _evict(self) -> None:
        """Give the oldest waits up until the waiting groups and leaves fit max_pending."""
        pending, waits = self._pending, self._waits
        while waits and self._load > self._limit:
            key = waits.popleft()
            group = pending.pop(key, None)
            if group is None:
                continue
            self._load -= 1 + len(group.leaves)
            if self._remote_keys and key in self._remote_keys:
                self._remote_open -= 1
            self.evicted += 1
            self.evicted_leaves += self._give_up(key, group)

    def _give_up(self, key: int, group: Group) -> int:
        """Drop evicted *group*'s bucketed spans (and its candidates'); keep the candidates
        (per-prompt spans waiting to be ruled out by the step) as a stub for *key*.
        Returns the bucketed spans dropped."""
        dropped = len(group.leaves) + group.nb
        if dropped:
            self._mark_gone(key, group.examples())
        cands = group.cands
        if cands:
            for cand in cands:
                raw = cand.raw
                if raw is not None:
                    dropped += len(raw)
                    self._load -= len(raw)
                    cand.raw = None  # bucketed spans arriving under it: see _attach
                    if raw and cand.gone is None:
                        cand.gone = [(raw[0][3], raw[0][4])]
                cand.stub = True
            stub = self._stubs.get(key)
            if stub is None:
                self._stubs[key] = cands
            else:
                stub.extend(cands)
            group.cands = None
            self._stubbed += len(cands)
        group.leaves.clear()
        group.nb = 0
        group.pre = group.phases = group.stalls = None
        group.fwd = OUTSIDE
        if self._stubbed > self._limit:
            self._trim_stubs()
        return dropped

    def _mark_gone(self, key: int, examples: list[Example]) -> None:
        """Bucketed spans under *key* were given up: remembered, by one of them (for the
        last max_pending keys, at least 1,024), so that *key*, or its nearest bucketed
        ancestor, arriving bucketed is still said to nest buckets, not counted whole."""
        gone = self._gone
        if key not in gone:
            gone[key] = examples[:1]
            if len(gone) > max(self._limit, _MARKS_KEPT):
                del gone[next(iter(gone))]

    def _trim_stubs(self) -> None:
        """Give the oldest stubs up until at most max_pending candidates wait in them.

        Their candidates are no steps (``dropped_stubs``): their bucketed spans
        are gone (``evicted_leaves``), so as steps they would report a wall with
        no bucket in it, and most are per-prompt spans that their step, still
        open, would rule out. Bucketed spans arriving under one later still
        count in ``evicted_leaves`` (``stub`` stays set)."""
        stubs = self._stubs
        while stubs and self._stubbed > self._limit:
            cands = stubs.pop(next(iter(stubs)))
            self._stubbed -= len(cands)
            self.dropped_stubs += len(cands)

    def _unstub(self, key: int, children: Group | None) -> Group | None:
        """*children* with the candidates of *key*'s evicted waits, *key* having arrived."""
        cands = self._stubs.pop(key, None)
        if cands is None:
            return children
        self._stubbed -= len(cands)
        for cand in cands:
            cand.stub = False
        if children is None:
            children = Group()
        if children.cands is None:
            children.cands = cands
        else:
            children.cands.extend(cands)
        return children

    def awaited(self) -> int:
        """Parents spans wait for now, those of other processes (remote) left out.

        Any thread: it reads two counts, never a collection the feeding thread changes.
        """
        return max(0, len(self._pending) - self._remote_open)

    def _remote_wait(self, pkey: int, end: float) -> None:
        """Note a wait for the remote parent *pkey*: settled if it has not come by
        *end* plus the grace (a span of this process ends that soon after its child)."""
        if pkey not in self._remote_keys:
            self._remote_keys.add(pkey)
            if pkey in self._pending:
                self._remote_open += 1
            deadline = end + self._grace
            self._remote.append((deadline, pkey))
            if deadline < self._next_seal:  # _seal settles it, on the span-time clock
                self._next_seal = deadline
