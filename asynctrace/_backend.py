"""Which async library runs the calling code, for helpers that take asyncio's own path.

anyio runs the same code on asyncio, uvloop and trio, at a price on every
call (it looks the backend up, and its thread hop and sleep add cancel
scopes and checkpoints). Helpers that run once per poll or per hop ask
:func:`asyncio_loop` first and use asyncio directly when they can.
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any

__all__ = ["asyncio_loop", "in_trio"]


def in_trio(trio: Any = None) -> bool:
    """Whether the calling code runs inside ``trio.run`` (also as a guest of another loop)."""
    trio = trio if trio is not None else sys.modules.get("trio")
    if trio is None:  # never imported: no trio run can be going on
        return False
    try:
        in_run = getattr(trio.lowlevel, "in_trio_run", None)
        if callable(in_run):
            return bool(in_run())
        trio.lowlevel.current_task()  # raises RuntimeError outside a run
        return True
    except Exception:
        return False


def asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio (or uvloop) loop of an asyncio task; ``None`` elsewhere.

    ``None`` outside a loop and for a trio task, including one that runs as a
    guest of an asyncio loop (the loop runs, but the task is trio's).
    """
    loop = asyncio._get_running_loop()
    if loop is None or in_trio():
        return None
    return loop
