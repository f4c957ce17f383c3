"""The profilers alive, and the one pair of fork hooks for the process that reaches them.

``os.register_at_fork`` cannot take a hook back, so the hooks are registered
once here, not once per ``configure()``.
"""

from __future__ import annotations

import os
import weakref
from typing import TYPE_CHECKING

from ._profiling import warn_once

if TYPE_CHECKING:
    from ._profiler import Profiler

__all__ = ["LIVE"]

LIVE: weakref.WeakValueDictionary[int, Profiler] = weakref.WeakValueDictionary()


def _before_fork() -> None:
    for profiler in list(LIVE.values()):
        try:
            profiler._before_fork()
        except Exception as exc:  # the fork goes on
            warn_once("a profiler could not get ready for a fork", exc)


def _in_child() -> None:
    for profiler in list(LIVE.values()):
        try:
            profiler._in_child()
        except Exception as exc:  # the child goes on, unprofiled
            warn_once("a profiler could not be reset in a forked child", exc)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_in_child)
