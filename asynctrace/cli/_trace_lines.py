"""``convert``'s output document, written as its events come: a MiB at a time."""

from __future__ import annotations

from typing import IO

__all__ = ["Lines"]

_HEADER = b'{"traceEvents":[\n'


class Lines:
    """The output document: its header, then events comma-separated, written a MiB at a time."""

    __slots__ = ("_chunk", "_separator", "_size", "_stream")

    def __init__(self, stream: IO[bytes]) -> None:
        self._stream = stream
        self._chunk: list[bytes] = [_HEADER]
        self._separator = b""
        self._size = 0

    def add(self, line: bytes) -> None:
        """One event's JSON."""
        self._chunk.append(self._separator)
        self._chunk.append(line)
        self._separator = b",\n"
        self._size += len(line)
        if self._size > 1 << 20:
            self._stream.write(b"".join(self._chunk))
            self._chunk.clear()
            self._size = 0

    def end(self, tail: bytes) -> None:
        """The document's end: written with what is left, and flushed."""
        self._chunk.append(tail)
        self._stream.write(b"".join(self._chunk))
        self._chunk.clear()
        self._stream.flush()
