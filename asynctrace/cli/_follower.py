"""``watch``'s reading of one file: its new complete lines, by polling, read again from
its start when it is no longer the file read so far."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["Follower"]

_CHUNK = 1 << 20  # bytes read at a time: memory stays bounded whatever a poll finds new
_MAX_LINE = 16 << 20  # a longer unfinished line is skipped (and counted), not held
_PRINT = 4096  # bytes of the file's start, and before where reading stopped, checked


class Follower:
    """New complete lines of one file, by polling.

    Reading goes on from where the last poll stopped as long as the file is
    the same one: same device and inode, not shorter, and the same bytes at
    its start and just before that point (checked when its size or mtime
    changed). Otherwise (deleted and written anew, even on a reused inode;
    replaced by a rename; truncated, even if it has grown again) it is read
    from its start and :attr:`restarted` is true after that call, so that
    what the earlier file gave can be dropped.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._stat: tuple[int, int, int, int] | None = None  # dev, inode, size, mtime
        self._head = b""  # the file's first bytes, up to _PRINT
        self._tail = b""  # the last bytes before _offset, up to _PRINT
        self._partial = b""
        self._discarding = False  # inside an overlong line, already counted
        self.modified = 0.0
        self.skipped = 0  # lines that are not a JSON object (NaN, an overlong line, not JSON)
        self.restarted = False

    @property
    def torn(self) -> bool:
        """Whether the file ends in an unfinished line, held until its newline arrives."""
        return bool(self._partial)

    def lines(self) -> Iterator[dict[str, Any]]:
        """The JSON objects of the lines completed since the last call.

        The file is checked (and :attr:`restarted` set) by the call; it is read,
        a chunk at a time, as the iterator is consumed, which it must be before
        the next call.
        """
        self.restarted = False
        try:
            info = self.path.stat()
        except OSError:
            return iter(())
        key = (info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns)
        if key != self._stat:
            try:
                same = self._stat is None or self._same_file(info)
            except OSError:
                return iter(())
            if not same:
                self._restart()
            self._stat = key
        self.modified = info.st_mtime
        if info.st_size <= self._offset:
            return iter(())
        return self._read(info.st_size)

    def _same_file(self, info: os.stat_result) -> bool:
        assert self._stat is not None
        if (info.st_dev, info.st_ino) != self._stat[:2] or info.st_size < self._offset:
            return False
        if not self._offset:
            return True
        with self.path.open("rb") as handle:
            if handle.read(len(self._head)) != self._head:
                return False
            handle.seek(self._offset - len(self._tail))
            return handle.read(len(self._tail)) == self._tail

    def _restart(self) -> None:
        self._offset, self._head, self._tail, self._partial = 0, b"", b"", b""
        self._discarding = False
        self.skipped = 0
        self.restarted = True

    def _read(self, end: int) -> Iterator[dict[str, Any]]:
        try:
            handle = self.path.open("rb")
        except OSError:
            return
        with handle:
            handle.seek(self._offset)
            while self._offset < end:
                try:
                    chunk = handle.read(min(_CHUNK, end - self._offset))
                except OSError:
                    return
                if not chunk:  # shrunk since: the next call sees it
                    return
                if self._offset < _PRINT:
                    self._head += chunk[: _PRINT - self._offset]
                self._tail = (self._tail + chunk[-_PRINT:])[-_PRINT:]
                self._offset += len(chunk)
                yield from self._parse(chunk)

    def _parse(self, chunk: bytes) -> Iterator[dict[str, Any]]:
        *complete, rest = chunk.split(b"\n")
        if complete:
            # the first completes the line held from before (or ends an overlong one)
            complete[0] = b"" if self._discarding else self._partial + complete[0]
            self._partial, self._discarding = b"", False
        if not self._discarding:
            if len(self._partial) + len(rest) > _MAX_LINE:
                self._partial, self._discarding = b"", True
                self.skipped += 1
            else:
                self._partial += rest
        for raw in complete:
            if not raw.strip():
                continue
            try:
                item = json.loads(raw, parse_constant=_no_constant)
            except (ValueError, RecursionError):  # torn, NaN, not JSON, nested too deep
                self.skipped += 1
                continue
            if isinstance(item, dict):
                yield item
            else:
                self.skipped += 1


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON holds")
