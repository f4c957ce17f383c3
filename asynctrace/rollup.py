"""The goodput rollup as a library: the rules ``asynctrace goodput`` applies.

``asynctrace goodput``, ``asynctrace report`` and the live rollup
(``goodput: true``) run this one implementation, so a notebook, a dashboard
or a test of your own gets the same numbers for the same spans. Feed it
complete (``"ph": "X"``) events as a Chrome trace holds them, in the order
the spans ended, then call :meth:`Rollup.finish`. The rules (which spans are
steps, how seconds are counted, the invariants) are in
``docs/reading-a-trace.md``. :class:`GoodputSettings` is the validated
``goodput`` block (what ``TelemetryConfig.from_mapping`` makes of it), with
the live rollup's defaults.

Example:
    >>> from asynctrace.rollup import Rollup, step_numbers
    >>> rollup = Rollup()
    >>> rollup.add({"ph": "X", "name": "generate", "ts": 0, "dur": 600_000, "args": {
    ...     "rl.bucket": "productive", "trace_id": "a", "span_id": "2",
    ...     "parent_span_id": "1"}})
    >>> rollup.add({"ph": "X", "name": "rl.step", "ts": 0, "dur": 1_000_000, "args": {
    ...     "rl.iteration": 3, "trace_id": "a", "span_id": "1"}})
    >>> [step_numbers(row)["goodput"] for row in rollup.finish().steps]
    [0.6]
"""

from __future__ import annotations

from ._goodput_settings import GoodputSettings
from ._rollup import BUCKETS, DEFAULT_GRACE_US, Rollup, RollupResult, StepRow, Violation
from ._step_goodput import step_numbers

__all__ = [
    "BUCKETS",
    "DEFAULT_GRACE_US",
    "GoodputSettings",
    "Rollup",
    "RollupResult",
    "StepRow",
    "Violation",
    "step_numbers",
]
