"""Whether the calling code is an asyncio task or a trio task, for asyncio's cheaper paths.

anyio runs the same code on asyncio, uvloop and trio, at a price on every
call (it looks the backend up each time). ``wait_until`` asks
:func:`asyncio_loop` once per wait and then polls with asyncio's own sleep
when the caller is an asyncio task; the stall monitor asks
:func:`in_trio_task`. Both ask for a trio *task*, not a trio run: during a
guest run the host loop's own tasks, on the same thread, are asyncio's.
"""

from __future__ import annotations

import asyncio
import sys

__all__ = ["asyncio_loop", "in_trio_task"]


def in_trio_task() -> bool:
    """Whether the calling code runs in a trio task (also one of a guest run on another loop).

    Not the same as being inside a trio run: during a guest run, the host
    loop's own tasks run on the same thread and are not trio's.
    """
    trio = sys.modules.get("trio")
    if trio is None:  # never imported: no trio task can be running
        return False
    try:
        lowlevel = trio.lowlevel
        in_task = getattr(lowlevel, "in_trio_task", None)
        if callable(in_task):
            return bool(in_task())
        lowlevel.current_task()  # raises RuntimeError outside a trio task
        return True
    except Exception:
        return False


def asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio (or uvloop) loop of an asyncio task; ``None`` elsewhere.

    ``None`` outside a loop and for a trio task, including one that runs as a
    guest of an asyncio loop (the loop runs, but the task is trio's).
    """
    loop = asyncio._get_running_loop()
    if loop is None or in_trio_task():
        return None
    return loop
