"""The rollup's span placement: each span into its parent's group, step or nowhere."""

from __future__ import annotations

import re
from collections import deque
from typing import Any, Final

from ._group_types import Bucket
from ._rollup_settle import RollupSettle
from ._rollup_tree import (
    CYCLE,
    MASK,
    OUTSIDE,
    Entry,
    Example,
    Group,
    Step,
    add_sums,
    merge,
    resolve,
)

__all__ = [
    "BUCKETS",
    "_BUCKETED",
    "_BUCKET_INDEX",
    "_HAS_ITERATION",
    "RollupSpans",
]

BUCKETS: Final = tuple(b.value for b in Bucket)
"""The bucket names in the order of :attr:`StepRow.sums`: productive, overhead, idle, wasted."""
_BUCKET_INDEX: Final = {name: i for i, name in enumerate(BUCKETS)}
_HAS_ITERATION: Final = 1
_BUCKETED: Final = 2
_STEP: Final = 4
_DISQUALIFIES: Final = _HAS_ITERATION | _BUCKETED | _STEP
_WALK_LIMIT: Final = 64


class RollupSpans(RollupSettle):
    """How a rollup places a span: its waiting children folded in, then moved up."""

    _step_name: re.Pattern[str] | None
    _window: int
    _order: deque[int]

    def _stall(self, name: str, key: int, pkey: int | None, start: float, end: float) -> None:
        """A loop-stall span: never a step, in no bucket; its seconds go to its step apart."""
        payload = self._take(key) or Group()
        if self._stubs:
            payload = self._unstub(key, payload) or payload
        if payload.cands:  # stamped spans under a stall span (not expected): steps
            for cand in payload.cands:
                self._confirm(cand)
            payload.cands = None
        if end > start:
            if payload.stalls is None:
                payload.stalls = []
            payload.stalls.append((start, end))
        self._attach(
            payload, key, pkey, self._home.get(pkey) if pkey is not None else None, 0, name
        )

    def _span(
        self,
        name: str,
        key: int,
        pkey: int | None,
        start: float,
        end: float,
        bucket: Any,
        iteration: int | None,
        group_step: bool,
        origin: int,
        remote: bool = False,
    ) -> None:
        children = self._pending.pop(key, None)  # _take, inline (it runs once per span)
        if children is not None:
            self._load -= 1 + len(children.leaves)
            if self._remote_keys and key in self._remote_keys:
                self._remote_open -= 1
        if self._stubs:
            children = self._unstub(key, children)
        # Bucketed spans under this one whose wait was given up (max_pending): one of them.
        gone = self._gone.pop(key, None) if self._gone else None
        flags = (_HAS_ITERATION if iteration is not None else 0) | (_STEP if group_step else 0)
        bucket_index = -1
        if bucket is not None:
            flags |= _BUCKETED
            bucket_index = _BUCKET_INDEX.get(bucket, -1) if isinstance(bucket, str) else -1
            if bucket_index < 0:
                self._violation(
                    "unknown-bucket",
                    f"span {name!r} (span {key & MASK:016x}) has an unknown bucket value "
                    f"{bucket!r} (known: {', '.join(BUCKETS)})",
                    [(name, key)],
                )
        if children is not None and children.cands:
            # This span is the parent the candidates were waiting for.
            if flags & _DISQUALIFIES:
                for cand in children.cands:
                    if cand.gone is not None and gone is None:  # given-up spans under it
                        gone = cand.gone
                    self._fold_step(cand, children)
            else:
                for cand in children.cands:
                    self._confirm(cand)
            children.cands = None
        candidate = (  # of no duration, a step in the making only (see _finished)
            bucket is None
            and iteration is not None
            and (self._step_name is None or self._step_name.search(name) is not None)
        )
        parent = self._home.get(pkey) if pkey is not None else None
        if group_step or (candidate and (pkey is None or parent is not None)):
            # A step for sure: marked as one, a root, or its parent is known.
            if group_step or parent is None or not parent[2] & _DISQUALIFIES:
                if bucket is not None:  # a bucketed step (group step): a bucketed span too
                    if children is not None and children.has_bucketed():
                        self._nested(name, key, children.examples())
                    elif gone:
                        self._nested(name, key, gone)
                    else:  # no bucketed descendant: it counts, over its whole interval
                        if children is None:
                            children = Group()
                        children.leaves.append((start, end, bucket_index, name, key))
                step = self._make_step(name, key, pkey, origin, iteration, start, end, children)
                self._remember(key, (pkey, step, flags | _STEP, name))
                self._confirm(step)
                return
        elif candidate and pkey is not None:
            # Its parent has not arrived: a step unless the parent carries an iteration.
            step = self._make_step(name, key, pkey, origin, iteration, start, end, children, True)
            step.gone = gone  # for its parent, should it turn out to be no step
            if self._stepped:  # judged now too: its step may be forgotten by the time
                step.within = self._ruled_out(step)
            target = self._pending.get(pkey)
            if target is None:
                target = self._wait(pkey)
            if target.cands is None:
                target.cands = []
            target.cands.append(step)
            self._remember(key, (pkey, step, flags, name))
            if self._load > self._limit:
                self._evict()
            return
        if children is None and parent is None and pkey is not None and gone is None:
            # The common case, inlined: a childless span whose parent is still open.
            target = self._pending.get(pkey)
            if target is None:
                target = self._wait(pkey)
            self._remember(key, (pkey, target, flags, name))
            if bucket is not None:
                target.leaves.append((start, end, bucket_index, name, key))
                self._load += 1
            if self._load > self._limit:
                self._evict()
            return
        payload = children if children is not None else Group()
        if bucket is not None:
            if payload.has_bucketed():
                self._nested(name, key, payload.examples())
            elif gone:  # and passed up: its bucketed ancestors nest buckets too
                self._nested(name, key, gone)
            else:
                payload.leaves.append((start, end, bucket_index, name, key))
        self._attach(payload, key, pkey, parent, flags, name, gone)

    def _attach(
        self,
        payload: Group,
        key: int,
        pkey: int | None,
        parent: Entry | None,
        flags: int,
        name: str,
        gone: list[Example] | None = None,
    ) -> None:
        """Place *payload* (the span *key* and its subtree) under its parent *pkey*: into the
        group waiting for it, into the step or group it went to, or outside any step.
        *gone*: bucketed spans of an unbucketed span's subtree given up past max_pending,
        passed on to the parent as such (counted nowhere, still nested)."""
        if pkey is None:
            payload.fwd = OUTSIDE
            payload.leaves.clear()  # outside any step: counted nowhere
            self._remember(key, (None, OUTSIDE, flags, name))
            return
        if parent is None:  # the parent is still open: wait in its group
            target = self._pending.get(pkey)
            if target is None:
                target = self._wait(pkey)
            self._load += len(payload.leaves)
            merge(payload, target)
            if gone:
                self._mark_gone(pkey, gone)
            self._remember(key, (pkey, target, flags, name))
            if self._load > self._limit:
                self._evict()
            return
        # A late child: its parent arrived (ended) before it.
        container = resolve(parent[1])
        if container is payload:
            # The parent's chain of parents leads back to this span (parent ids in a
            # cycle): no span of it has a parent, so none can wait for one.
            self._cycle(payload, key, pkey, flags, name)
            return
        if payload.has_bucketed() or gone:
            ancestor, waiting = self._ancestor(pkey)
            if ancestor is not None:
                self._nested(ancestor[0], ancestor[1], payload.examples() or gone or [])
                payload.leaves.clear()
                payload.pre = None
                payload.nb = 0
            elif gone and waiting is not None and not payload.has_bucketed():
                self._mark_gone(waiting, gone)  # (leaves are carried up as they are)
        if isinstance(container, Group):  # still waiting (a settled group forwards)
            self._load += len(payload.leaves)
            merge(payload, container)
        elif isinstance(container, Step):
            if container.sealed:
                if payload.has_bucketed():
                    self._late(container, payload.examples())
                payload.leaves.clear()
                payload.pre = payload.phases = payload.stalls = None
                payload.nb = 0
            else:
                if container.raw is not None:  # a candidate: clipped once confirmed
                    container.raw.extend(payload.leaves)
                    self._load += len(payload.leaves)
                    add_sums(container, payload)
                elif container.stub:  # its wait given up: its bucketed spans count nowhere
                    self.evicted_leaves += len(payload.leaves) + payload.nb
                    payload.pre = payload.phases = None
                    payload.nb = 0
                else:
                    container.add_leaves(payload.leaves)
                    add_sums(container, payload)
                container.add_stalls(payload)
                payload.leaves.clear()
            payload.fwd = container
        else:
            if container is CYCLE:  # under a cycle of parent ids: said, as its own spans
                self.cycle_leaves += len(payload.leaves) + payload.nb
                payload.nb = 0
            payload.fwd = container
            payload.leaves.clear()
        self._remember(key, (pkey, container, flags, name))
        if self._load > self._limit:
            self._evict()

    def _cycle(self, payload: Group, key: int, pkey: int, flags: int, name: str) -> None:
        """*key*'s parent ids come back to it: the cycle's spans are settled as spans whose
        parent is missing (their candidates steps, their bucketed spans outside any step),
        counted in ``cycles`` (and ``cycle_leaves``); their later children go outside."""
        self.cycles += 1
        self.cycle_leaves += self._missing(payload)
        payload.fwd = CYCLE  # (the groups forwarding to it, its spans' entries)
        self._remember(key, (pkey, CYCLE, flags, name))
        if self._cycle_first is None:
            self._cycle_first = f"{name!r} (span {key & MASK:016x}, parent {pkey & MASK:016x})"

    def _remember(self, key: int, entry: Entry) -> None:
        home = self._home
        home[key] = entry
        order = self._order
        order.append(key)
        if len(order) > self._window:
            home.pop(order.popleft(), None)

    def _ancestor(self, key: int | None) -> tuple[Example | None, int | None]:
        """Walking up from *key*, below any step: the first bucketed ancestor (its name and
        key), or else the first that has not arrived (or is forgotten), where a mark of
        given-up bucketed spans waits for it."""
        for _ in range(_WALK_LIMIT):
            if key is None:
                return None, None
            entry = self._home.get(key)
            if entry is None:
                return None, key
            if entry[2] & _BUCKETED:
                return (entry[3], key), None
            if entry[2] & _STEP:
                return None, None
            key = entry[0]
        return None, None
