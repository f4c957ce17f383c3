"""The command line's inputs and outputs at their edges: a torn Chrome JSON frame, a
subdirectory removed while searched, an empty path, a reader of stdout that goes
away, stdout closed, SIGTERM while an output is written."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from asynctrace.cli._follower import Follower
from asynctrace.cli._output import Output, Terminated
from asynctrace.cli._watch_state import State
from asynctrace.cli.watch import _poll

from ._helpers import GOLDEN, Result, one_line

COMMAND = [sys.executable, "-m", "asynctrace"]


def _event(i: int) -> dict[str, object]:
    return {
        "ph": "X",
        "name": f"span-{i}",
        "cat": "rl",
        "ts": 1_700_000_000_000_000 + i * 10,
        "dur": 5,
        "pid": 1,
        "tid": 1,
        "args": {"padding": "x" * 100},
    }


# -- lines of a Chrome JSON document's frame -------------------------------------------------


def test_torn_one_line_document_is_malformed_not_empty(
    run: Callable[..., Result], tmp_path: Path
) -> None:
    """A one-line ``{"traceEvents": [...]}`` cut short by a killed writer is a line that
    is not JSON, named with its reason; never an empty file."""
    document = json.dumps({"traceEvents": [_event(i) for i in range(5)]})
    torn = tmp_path / "traces-r1.jsonl"
    torn.write_text(document[: len(document) * 2 // 3])
    result = run("convert", torn, "-o", tmp_path / "out.json", "--no-progress")
    assert result.code == 2
    line = one_line(result.err)
    assert "empty" not in line
    assert "1 line, none usable: 1 not JSON" in line


def test_one_line_document_cut_at_an_event_boundary_is_counted(
    run: Callable[..., Result], tmp_path: Path
) -> None:
    """A one-line ``{"traceEvents": [...]}`` cut right after an event's ``},`` (a killed
    ``json.dump``) completes into JSON as a header would: its events are kept, and the
    cut is counted and named, never a clean success with the rest silently missing."""
    document = json.dumps({"traceEvents": [_event(i) for i in range(6)]})
    cut = document[: document.index('{"ph"', document.index('"span-3"') - 60)]
    assert cut.endswith("}, ")
    torn = tmp_path / "traces-r0.jsonl"
    torn.write_text(cut + "\n\n")
    result = run("convert", torn, "-o", tmp_path / "out.json", "--no-progress")
    assert result.code == 0, result.err
    line = one_line(result.err)
    assert "skipped 1 malformed line (traces-r0.jsonl:1 (traceEvents document cut short))" in line
    names = [e["name"] for e in json.loads((tmp_path / "out.json").read_text())["traceEvents"]]
    assert [n for n in names if n.startswith("span-")] == ["span-0", "span-1", "span-2"]


def test_header_carrying_events_then_more_lines_is_not_cut_short(
    run: Callable[..., Result], tmp_path: Path
) -> None:
    """A document written one event per line whose first events are on its header line:
    the header is followed by more lines, so nothing is counted."""
    events = [json.dumps(_event(i)) for i in range(5)]
    trace = tmp_path / "traces-r0.jsonl"
    trace.write_text(
        '{"traceEvents": [' + events[0] + ", " + events[1] + ",\n"
        + ",\n".join(events[2:]) + "\n"
        + "]}\n"
    )  # fmt: skip
    result = run("convert", trace, "-o", tmp_path / "out.json", "--no-progress")
    assert result.code == 0, result.err
    assert "malformed" not in result.err
    assert "5 events" in result.err


def test_junk_lines_shaped_like_a_frame_are_counted(
    run: Callable[..., Result], tmp_path: Path
) -> None:
    """Lines that start as a document's header or trailer but are not one are malformed
    lines, counted and named, in a JSON-lines trace."""
    lines = (GOLDEN / "traces-r0.jsonl").read_text().splitlines()
    lines.insert(5, '],"garbage because of a crash')
    lines.insert(9, '{"traceEvents":[{"ph":"X","name":"torn"')
    trace = tmp_path / "traces-r0.jsonl"
    trace.write_text("\n".join(lines) + "\n")
    result = run("convert", trace, "-o", tmp_path / "out.json", "--no-progress")
    assert result.code == 0, result.err
    assert "skipped 2 malformed lines (traces-r0.jsonl:6, traces-r0.jsonl:10)" in result.err


def test_a_documents_frame_is_not_malformed(run: Callable[..., Result], tmp_path: Path) -> None:
    """``convert``'s own output read again, and a document with its first event on its
    header line and other keys after the array: no line counted as malformed."""
    first = tmp_path / "first.json"
    assert run("convert", GOLDEN, "-o", first, "--no-progress").code == 0
    again = run("convert", first, "-o", tmp_path / "again.json", "--no-progress")
    assert again.code == 0, again.err
    assert "malformed" not in again.err
    written = json.loads((tmp_path / "again.json").read_text())
    assert len(written["traceEvents"]) == len(json.loads(first.read_text())["traceEvents"])
    header = tmp_path / "header.json"
    header.write_text(
        '{"displayTimeUnit":"ns","traceEvents":[' + json.dumps(_event(0)) + ",\n"
        + json.dumps(_event(1)) + "\n"
        + '],"otherData":{"version":"x"}}\n'
    )  # fmt: skip
    result = run("convert", header, "-o", tmp_path / "h.json", "--no-progress")
    assert result.code == 0, result.err
    assert "malformed" not in result.err
    names = {e["name"] for e in json.loads((tmp_path / "h.json").read_text())["traceEvents"]}
    assert {"span-0", "span-1"} <= names


# -- a subdirectory removed while searched ---------------------------------------------------


class _Churn:
    """A job rotating its temporary directories under *directory* on a thread of its own
    (100 lasting ones beside them); ``cycles`` counts its rounds."""

    def __init__(self, directory: Path) -> None:
        for i in range(100):
            (directory / f"ckpt-{i}" / "shard").mkdir(parents=True)
        self.directory = directory
        self.cycles = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._churn, daemon=True)

    def _churn(self) -> None:
        while not self._stop.is_set():
            for i in range(4):
                place = self.directory / f"tmp-{i}"
                (place / "a" / "b").mkdir(parents=True, exist_ok=True)
                shutil.rmtree(place, ignore_errors=True)
            self.cycles += 1

    def __enter__(self) -> _Churn:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def test_watch_poll_survives_subdirectories_removed_meanwhile(tmp_path: Path) -> None:
    """A job rotating its temporary directories while ``watch`` walks DIR: every poll
    finds the goodput file, none ends the view."""
    shutil.copy(GOLDEN / "sessions-r0.jsonl", tmp_path)
    with _Churn(tmp_path) as churn:
        followers: dict[Path, Follower] = {}
        state = State()
        polls = 0
        while polls < 300 or churn.cycles < 300:
            _poll(tmp_path, followers, state)
            assert tmp_path / "sessions-r0.jsonl" in followers
            polls += 1
            if polls > 5000:
                break


def test_inputs_survive_subdirectories_removed_meanwhile(
    run: Callable[..., Result], tmp_path: Path
) -> None:
    """The one-shot commands search a directory the same way."""
    shutil.copy(GOLDEN / "traces-r0.jsonl", tmp_path)
    from asynctrace.cli._inputs import expand_inputs

    with _Churn(tmp_path):
        for _ in range(300):
            assert expand_inputs([str(tmp_path)], ["traces*.jsonl"], "trace") == [
                tmp_path / "traces-r0.jsonl"
            ]


def test_convert_and_report_survive_subdirectories_removed_meanwhile(
    run: Callable[..., Result], tmp_path: Path
) -> None:
    """``convert`` and ``report`` on a directory whose subdirectories come and go: the
    search for profiler captures passes them over too, never an internal error."""
    directory = tmp_path / "run"
    directory.mkdir()
    shutil.copy(GOLDEN / "traces-r0.jsonl", directory)
    with _Churn(directory):
        for i in range(20):
            # the directory named, and matched by a glob
            spec = directory if i % 2 else tmp_path / "ru[n]"
            result = run("convert", spec, "-o", tmp_path / "out.json", "--no-progress", "-q")
            assert result.code == 0, result.err
            result = run("report", spec, "-o", tmp_path / "out.html", "--no-progress")
            assert result.code == 0, result.err


# -- an empty path ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["goodput", ""],
        ["convert", "", "-o", "{tmp}/out.json"],
        ["report", "", "-o", "{tmp}/out.html"],
        ["watch", "", "--once"],
    ],
)
def test_an_empty_path_is_refused(
    run: Callable[..., Result], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, argv: list[str]
) -> None:
    """``asynctrace goodput "$RUN"`` with RUN unset: refused, never the current directory
    searched (here it holds a trace)."""
    shutil.copy(GOLDEN / "traces-r0.jsonl", tmp_path)
    monkeypatch.chdir(tmp_path)
    result = run(*(a.format(tmp=tmp_path) for a in argv))
    assert result.code == 2
    assert "empty path" in one_line(result.err)
    assert result.out == ""
    assert not (tmp_path / "out.json").exists()


# -- stdout: its reader gone, closed ---------------------------------------------------------


def _reader_goes_away(*argv: object) -> tuple[int, str]:
    """Run the command into a pipe of one page (Linux) whose reader takes 1,000 bytes and
    goes away: the command's status and its standard error. An output written in one
    write larger than the pipe is taken only in part (a short count, no error): the rest
    must still be tried, and fail."""
    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, getattr(fcntl, "F_SETPIPE_SZ", 1031), 4096)
    child = subprocess.Popen(
        [*COMMAND, *map(str, argv), "-o", "-", "--no-progress"],
        stdout=write_end,
        stderr=subprocess.PIPE,
    )
    os.close(write_end)
    assert child.stderr is not None
    with open(read_end, "rb") as reader:
        assert len(reader.read(1000)) == 1000
    err = child.stderr.read().decode()
    child.stderr.close()
    return child.wait(timeout=60), err


def test_convert_to_stdout_whose_reader_goes_away_is_not_success(tmp_path: Path) -> None:
    """``convert -o - | head -c 1000``: the document (about 0.5 MB) is cut short, so the
    status is 141 (as a shell reports SIGPIPE), with no message and no traceback."""
    trace = tmp_path / "traces-r0.jsonl"
    trace.write_text("".join(json.dumps(_event(i)) + "\n" for i in range(3000)))
    assert _reader_goes_away("convert", trace) == (141, "")


def test_report_to_stdout_whose_reader_goes_away_is_not_success() -> None:
    """``report -o - | head -c 1000``: the page (about 25 kB) is cut short: 141 too."""
    assert _reader_goes_away("report", GOLDEN) == (141, "")


@pytest.mark.parametrize("argv", [["goodput", "{golden}"], ["convert", "{golden}", "-o", "-"]])
def test_stdout_closed_is_named(argv: list[str]) -> None:
    """Started with ``>&-``: one line naming stdout, status 2, not an internal error."""
    result = subprocess.run(
        ["sh", "-c", 'exec "$0" "$@" >&-', *COMMAND, *(a.format(golden=GOLDEN) for a in argv)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    line = one_line(result.stderr)
    assert "stdout" in line
    assert "closed" in line
    assert "internal error" not in line


# -- SIGTERM while an output is written ------------------------------------------------------


@contextlib.contextmanager
def _convert_child(source: Path, output: Path) -> Iterator[subprocess.Popen[str]]:
    """``convert SOURCE -o OUTPUT`` in a child process, killed if still running after."""
    child = subprocess.Popen(
        [*COMMAND, "convert", str(source), "-o", str(output), "--no-progress"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield child
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_sigterm_while_convert_writes_removes_the_temporary_file(tmp_path: Path) -> None:
    """``timeout`` or a scheduler ending ``convert``: its temporary output is removed, and
    the status is 143. The input is a FIFO nobody writes, so the command is surely in
    the middle of its output when the signal comes: anywhere from the temporary file's
    creation on (still in ``open()``, before ``convert`` is in its ``try``, or blocked
    on the FIFO), which tests/cli/test_cli_sigterm_output.py tries point by point."""
    fifo = tmp_path / "traces-r0.jsonl"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    out.mkdir()
    with _convert_child(fifo, out / "trace.json") as child:
        deadline = time.monotonic() + 60
        while not list(out.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [p.name.endswith(".tmp") for p in out.iterdir()] == [True]
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=60)
    assert child.returncode == 143
    assert "terminated (SIGTERM); the partial output was removed" in one_line(err)
    assert list(out.iterdir()) == []


def test_sigterm_handler_put_back_after_an_output(tmp_path: Path) -> None:
    """While an output is open SIGTERM raises Terminated (the output removed on abort);
    once committed or aborted the previous handler is back."""
    before = signal.getsignal(signal.SIGTERM)
    done = Output(str(tmp_path / "done.json"))
    done.open().write(b"{}")
    done.commit()
    assert signal.getsignal(signal.SIGTERM) is before
    assert (tmp_path / "done.json").read_bytes() == b"{}"
    cut = Output(str(tmp_path / "cut.json"))
    try:
        cut.open().write(b"{")
        assert signal.getsignal(signal.SIGTERM) is not before  # or the signal ends pytest
        with pytest.raises(Terminated):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises first
    finally:
        cut.abort()  # the handler put back whatever happened above
    assert signal.getsignal(signal.SIGTERM) is before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["done.json"]


def test_sigterm_as_the_temporary_file_is_made_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SIGTERM that arrives the moment the temporary file exists, before the output
    has noted it, still removes it: the signal waits until the file is noted."""
    real_open = os.open

    def open_then_sigterm(path: Any, flags: int, mode: int = 0o777) -> int:
        fd = real_open(path, flags, mode)
        if str(path).endswith(".tmp"):
            signal.raise_signal(signal.SIGTERM)  # a real signal, as the file is made
        return fd

    before = signal.getsignal(signal.SIGTERM)
    output = Output(str(tmp_path / "trace.json"))
    monkeypatch.setattr(os, "open", open_then_sigterm)
    try:
        with pytest.raises(Terminated) as raised:
            output.open()
    finally:
        monkeypatch.undo()
        output.abort()
    assert str(raised.value) == "the partial output was removed"  # the temporary file noted
    assert signal.getsignal(signal.SIGTERM) is before
    assert list(tmp_path.iterdir()) == []


def test_sigterm_ignored_at_start_stays_ignored(tmp_path: Path) -> None:
    """A command started with SIGTERM ignored (``trap '' TERM``, as a wrapper may start
    it) is not ended by one while it writes: it finishes its output. The input is a
    FIFO written only after the signal was sent."""
    fifo = tmp_path / "traces-r0.jsonl"
    os.mkfifo(fifo)
    out = tmp_path / "out"
    out.mkdir()
    child = subprocess.Popen(
        ["bash", "-c", "trap '' TERM; exec \"$@\"", "_", *COMMAND, "convert", str(fifo),
         "-o", str(out / "trace.json"), "--no-progress"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not list(out.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [p.name.endswith(".tmp") for p in out.iterdir()] == [True]
        child.send_signal(signal.SIGTERM)
        while True:  # the command opens its input after its output: it may not have yet
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
                break
            except OSError as exc:  # ENXIO: no reader yet, or none any more
                if child.poll() is not None or time.monotonic() > deadline:
                    _, err = child.communicate(timeout=60)
                    pytest.fail(f"{exc}; status {child.returncode}: {err}")
                time.sleep(0.01)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "wb") as writer:
            writer.write((GOLDEN / "traces-r0.jsonl").read_bytes())
        _, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err
    assert "wrote" in one_line(err)
    assert [p.name for p in out.iterdir()] == ["trace.json"]


def test_sigterm_while_writing_a_fifo_says_the_output_was_cut_short(tmp_path: Path) -> None:
    """A FIFO is written into directly: nothing is removed, and the message says the
    output was cut short. The reader stops reading, so ``convert`` is surely in the
    middle of its output when the signal comes."""
    trace = tmp_path / "traces-r0.jsonl"
    trace.write_text("".join(json.dumps(_event(i)) + "\n" for i in range(5000)))
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    with _convert_child(trace, fifo) as child, open(fifo, "rb") as reader:
        assert reader.read(1) == b"{"  # opened to write, then written: the output is open
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=60)
    assert child.returncode == 143
    line = one_line(err)
    assert "terminated (SIGTERM); the output was cut short" in line
    assert "removed" not in line
    assert fifo.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.fifo", "traces-r0.jsonl"]


def test_sigterm_ignored_is_left_alone_by_an_output(tmp_path: Path) -> None:
    """In process: with SIGTERM ignored, an output leaves it ignored while open and after."""
    before = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        output = Output(str(tmp_path / "out.json"))
        output.open().write(b"{")
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
        os.kill(os.getpid(), signal.SIGTERM)  # ignored: nothing raised
        output.commit()
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, before)
    assert (tmp_path / "out.json").read_bytes() == b"{"


def test_watch_leaves_an_ignored_sigterm_ignored() -> None:
    """``watch``'s SIGTERM handling, like the outputs', leaves an ignored SIGTERM alone."""
    from asynctrace.cli._sigterm import sigterm_leaves

    before = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with sigterm_leaves():
            assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
            os.kill(os.getpid(), signal.SIGTERM)  # ignored: nothing raised
            time.sleep(0.01)
        assert signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, before)
