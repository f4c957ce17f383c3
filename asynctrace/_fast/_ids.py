"""Span and trace ids: a per-process generator, independent of ``random``'s global state.

Training code seeds the global generator on every rank (``random.seed(0)``),
and OpenTelemetry SDK's default generator draws from it, so every rank then
produces the same ids. This one owns a ``random.Random`` seeded from the
operating system's entropy, and seeds it again in a child after ``os.fork()``
(a forked child would otherwise repeat its parent's ids).
"""

from __future__ import annotations

import os
import random
import weakref

__all__ = ["IDS", "IdGenerator"]


class IdGenerator:
    """Random 64-bit span ids and 128-bit trace ids, never zero.

    It has the methods of the SDK's ``IdGenerator``, so the SDK provider can
    use it too.

    Example:
        >>> ids = IdGenerator()
        >>> 0 < ids.generate_span_id() < 2**64
        True
    """

    def __init__(self) -> None:
        self._random = random.Random()  # seeded from os.urandom
        self.bits = self._random.getrandbits  # a C method: the hot path calls it directly
        if hasattr(os, "register_at_fork"):
            ref = weakref.ref(self)

            def _reseed() -> None:
                ids = ref()
                if ids is not None:
                    ids.reseed()

            os.register_at_fork(after_in_child=_reseed)

    def reseed(self) -> None:
        """Draw a new seed from the operating system (done after every fork)."""
        self._random.seed(os.urandom(32))

    def generate_span_id(self) -> int:
        """A random non-zero 64-bit span id."""
        span_id = self.bits(64)
        while not span_id:
            span_id = self.bits(64)
        return span_id

    def generate_trace_id(self) -> int:
        """A random non-zero 128-bit trace id."""
        trace_id = self.bits(128)
        while not trace_id:
            trace_id = self.bits(128)
        return trace_id

    def is_trace_id_random(self) -> bool:
        """Trace ids are random (W3C trace-context level 2's ``random`` flag)."""
        return True


IDS = IdGenerator()
"""The process's generator, shared by every provider asynctrace builds."""
