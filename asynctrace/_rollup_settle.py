"""The rollup's settling: steps past their grace, and waits whose parent never arrives."""

from __future__ import annotations

import heapq
import math

from ._rollup_steps import RollupSteps
from ._rollup_tree import OUTSIDE, Group, Step, merged
from ._rollup_waits import RollupWaits

__all__ = ["RollupSettle"]


def _start_of(step: Step) -> float:
    return step.start


class RollupSettle(RollupSteps, RollupWaits):
    """How a rollup finishes the steps past their grace and settles missing parents."""

    def _seal(self, now: float) -> None:
        """Settle the waits for remote parents past their deadline, then finish the held
        steps whose end plus grace is before *now* (µs)."""
        remote = self._remote
        if remote and remote[0][0] < now:
            self._settle_remote(now)
        held = self._held
        while held and held[0][0] < now:
            self._finished(heapq.heappop(held)[2])
        self._next_seal = min(
            held[0][0] if held else math.inf, remote[0][0] if remote else math.inf
        )

    def _settle_remote(self, now: float) -> None:
        """Settle the waits for remote parents past their deadline: parents missing."""
        remote, keys = self._remote, self._remote_keys
        while remote and remote[0][0] < now:
            _, pkey = remote.popleft()
            group = self._take(pkey)
            keys.discard(pkey)
            if group is not None:  # its leaves: outside any step of this process
                self._missing(group, rule_out=False)
            if self._stubs:
                self.evicted_leaves += self._settle_stub(pkey, rule_out=False)

    def _settle_stub(self, key: int, rule_out: bool) -> int:
        """The candidates of *key*'s evicted waits: its parent is missing. Returns the
        bucketed spans dropped (counted in ``evicted_leaves`` by the caller)."""
        cands = self._stubs.pop(key, None)
        if cands is None:
            return 0
        self._stubbed -= len(cands)
        for cand in cands:
            cand.stub = False
        group = Group()
        group.cands = cands
        return self._missing(group, rule_out)

    def _missing(self, group: Group, rule_out: bool = True) -> int:
        """*group*'s parent never arrives: its candidates are steps, its leaves outside.

        A candidate inside a step of its trace with its ``rl.iteration`` is no
        step (a detached finalize span whose bucketed parent left the window),
        whether that step is known now or was when the candidate arrived (the
        last 64 trace and iteration pairs of steps are remembered): its leaves
        go with the group's. Not when *rule_out* is false: the parent is
        another process's, so no finalize span of this one.
        Returns the bucketed leaves counted nowhere.

        With *rule_out*, the candidates (siblings: *group* waits for their
        parent) are decided earliest start first, whatever order they ended in,
        and those of one origin and ``rl.iteration`` that overlap make one step:
        the per-prompt spans of a step span never written. The earliest is the
        step; each later one starting before the step's end so far joins it
        (:meth:`_join`), its end extending the step's, so a chain of overlapping
        prompts, started as an async pump dispatches them, is one step with
        every prompt's bucketed spans, not one step each.
        """
        cands = group.cands
        if cands:
            if rule_out:
                if len(cands) > 1:
                    cands = sorted(cands, key=_start_of)
                heads: dict[tuple[int | None, int], Step] = {}  # the latest per kind
                steps = []
                for cand in cands:
                    where = (cand.iteration, cand.origin)
                    head = heads.get(where)
                    if head is not None and cand.start < head.end:
                        self._join(cand, head)
                    elif cand.within or self._ruled_out(cand):
                        self._fold_step(cand, group)
                    else:
                        heads[where] = cand
                        cand.orphan = True
                        steps.append(cand)
                # Confirmed once whole: clipped to, and remembered with, the joined interval.
                for cand in steps:
                    self._confirm(cand)
            else:
                for cand in cands:
                    cand.orphan = True
                    self._confirm(cand)
            group.cands = None
        dropped = len(group.leaves) + group.nb
        group.nb = 0
        group.leaves.clear()
        group.pre = group.phases = group.stalls = None
        group.fwd = OUTSIDE
        return dropped

    def _join(self, cand: Step, head: Step) -> None:
        """*cand*, a sibling candidate overlapping *head* (unconfirmed), is part of its step:
        *head*'s interval extends over it and takes its subtree; the spans arriving for
        *cand* later go to *head*."""
        if cand.end > head.end:
            head.end = cand.end
        raw = cand.raw
        if raw is not None:
            cand.raw = None
            if head.raw is None:  # a given-up wait's candidate: its own leaves are gone
                head.raw = raw  # still in _load: they wait with the head
            else:
                head.raw.extend(raw)
        if isinstance(cand.sums, list):
            sums = head.writable_sums()
            for i, seconds in enumerate(cand.sums):
                sums[i] += seconds
        if cand.phases:
            head.phases = merged(head.phases, cand.phases)
        head.nb += cand.leaves + cand.nb
        if cand.stall_spans:
            for start, end in cand.stall_spans:
                head.add_stall(start, end)
            cand.stall_spans = None
        if cand.ex and len(head.ex) < 3:
            head.ex = [*head.ex, *cand.ex][:3]
        cand.fwd = head
        if cand.child is not None:
            cand.child.fwd = head
            cand.child = None
        entry = self._home.get(cand.key)
        if entry is not None and entry[1] is cand:
            self._home[cand.key] = (entry[0], head, entry[2], entry[3])

    def _ruled_out(self, cand: Step) -> bool:
        """Whether a step of *cand*'s trace and ``rl.iteration`` contains its start, other
        than a sibling of another origin (a step of the same parent from another process
        or file: another rank's step of the iteration under the one job span, missing
        from the inputs). A sibling of its own origin rules it out: the per-prompt spans
        of a step span never written (a killed run) are one step, not one each."""
        if cand.iteration is None:
            return False
        seen = self._stepped.get((cand.key >> 64, cand.iteration))
        if seen:
            start, parent, origin = cand.start, cand.parent, cand.origin
            for first, last, key, pkey, source in seen:
                if (
                    first <= start < last
                    and key != cand.key
                    and (pkey != parent or source == origin)
                ):
                    return True
        return False
