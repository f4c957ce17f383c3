"""Whether the calling code is an asyncio task or a trio task, for asyncio's cheaper paths.

anyio runs the same code on asyncio, uvloop and trio, at a price on every
call (it looks the backend up each time). ``wait_until`` asks
:func:`asyncio_loop` once per wait and then polls with asyncio's own sleep
when the caller is an asyncio task; the stall monitor asks
:func:`in_trio_task`, and the chrome exporter :func:`trio_task` for a span's
track. They ask for a trio *task*, not a trio run: during a guest run the
host loop's own tasks, on the same thread, are asyncio's.
"""

from __future__ import annotations

import asyncio
import sys

__all__ = ["asyncio_loop", "in_trio_task", "trio_task"]


def trio_task() -> object | None:
    """The trio task the calling code runs in (also one of a guest run on another loop).

    ``None`` outside a trio task, which is not the same as outside a trio
    run: during a guest run, the host loop's own tasks run on the same thread
    and are not trio's.
    """
    trio = sys.modules.get("trio")
    if trio is None:  # never imported: no trio task can be running
        return None
    try:
        lowlevel = trio.lowlevel
        in_task = getattr(lowlevel, "in_trio_task", None)
        if in_task is not None and not in_task():
            return None
        return lowlevel.current_task()  # type: ignore[no-any-return]  # raises outside a task
    except Exception:  # RuntimeError outside trio, or an unexpected trio
        return None


def in_trio_task() -> bool:
    """Whether the calling code runs in a trio task (see :func:`trio_task`)."""
    return trio_task() is not None


def asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio (or uvloop) loop of an asyncio task; ``None`` elsewhere.

    ``None`` outside a loop and for a trio task, including one that runs as a
    guest of an asyncio loop (the loop runs, but the task is trio's).
    """
    loop = asyncio._get_running_loop()
    if loop is None or in_trio_task():
        return None
    return loop
