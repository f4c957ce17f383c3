"""AppendFile: a torn line cut only when it is the writer's own, a file truncated in place."""

from __future__ import annotations

import json
import os
import resource
from collections.abc import Iterator
from pathlib import Path

import pytest

from asynctrace import _files
from asynctrace._files import AppendFile


def lines(writer: str, first: int, count: int) -> bytes:
    return b"".join(b'{"w":"%s","i":%d}\n' % (writer.encode(), i) for i in range(first, count))


@pytest.fixture
def unlimited_size() -> Iterator[None]:
    """Restore the file-size limit the test lowers (a full disk: EFBIG, as ENOSPC)."""
    before = resource.getrlimit(resource.RLIMIT_FSIZE)
    yield
    resource.setrlimit(resource.RLIMIT_FSIZE, before)


def test_a_failed_write_never_cuts_lines_another_writer_appended_meanwhile(
    tmp_path: Path, unlimited_size: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two writers on one file, the disk full while the second appends: nothing of it is cut."""
    path = tmp_path / "t.jsonl"
    a, b = AppendFile(path), AppendFile(path)
    a.write(lines("a", 0, 1))
    b.write(lines("b", 0, 1))
    real_write = os.write
    armed = [True]

    def b_appends_first(fd: int, data: bytes) -> int:
        # The other writer's lines land between a's size check and a's write;
        # then the disk fills, a few bytes into a's write.
        if armed[0] and fd == a._fd:
            armed[0] = False
            assert b.write(lines("b", 1, 6), 5) == (5, None)
            limit = os.path.getsize(path) + 20
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
        return real_write(fd, data)

    monkeypatch.setattr(_files.os, "write", b_appends_first)
    written, error = a.write(lines("a", 1, 6), 5)
    monkeypatch.undo()
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))

    assert error is not None
    assert written == 1  # '{"w":"a","i":1}\n' is 16 bytes: one whole line in 20
    whole = []
    for raw in path.read_bytes().splitlines():
        try:
            whole.append(json.loads(raw))
        except ValueError:
            pass
    assert [r["i"] for r in whole if r["w"] == "b"] == [0, 1, 2, 3, 4, 5]
    assert [r["i"] for r in whole if r["w"] == "a"] == [0, 1]
    a.write(lines("a", 6, 7), 1)  # on a fresh line
    assert json.loads(path.read_bytes().splitlines()[-1]) == {"w": "a", "i": 6}
    a.close()
    b.close()


def test_a_failed_write_of_the_only_writer_leaves_no_torn_line(
    tmp_path: Path, unlimited_size: None
) -> None:
    """Alone on its file, a writer still cuts the half line a full disk left."""
    path = tmp_path / "t.jsonl"
    out = AppendFile(path)
    out.write(lines("a", 0, 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(path) + 20, resource.RLIM_INFINITY))
    written, error = out.write(lines("a", 1, 6), 5)
    resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    assert (written, error is not None) == (1, True)
    assert path.read_bytes() == lines("a", 0, 2)
    assert not out.moved()  # its own cut is no truncation
    out.close()


def test_a_file_truncated_in_place_counts_as_moved_and_growth_does_not(tmp_path: Path) -> None:
    """copytruncate: the size falls below this writer's last end; appends only grow it."""
    path = tmp_path / "t.jsonl"
    out, other = AppendFile(path), AppendFile(path)
    out.write(lines("a", 0, 3), 3)
    other.write(lines("b", 0, 3), 3)  # another writer appending: not a truncation
    assert not out.moved()
    os.truncate(path, 0)
    assert out.moved()
    out.reopen()
    assert not out.moved()
    out.write(lines("a", 3, 4), 1)
    assert path.read_bytes() == lines("a", 3, 4)
    out.close()
    other.close()
