"""A disk that does not answer, for the session writer tests."""

from __future__ import annotations

import threading
from typing import Any


def hang_writes(out: Any) -> tuple[threading.Event, threading.Event]:
    """Make the writes of *out* (an ``AppendFile``) wait for a gate.

    Returns the gate and an event set once a writer thread is inside a write.
    """
    gate, inside = threading.Event(), threading.Event()
    write = out.write

    def hung(data: bytes, lines: int | None = None) -> tuple[int, OSError | None]:
        inside.set()
        gate.wait()
        return write(data, lines)  # type: ignore[no-any-return]

    out.write = hung
    return gate, inside
