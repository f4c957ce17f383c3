"""Outputs that are not regular files, many inputs, files still being written, and
what AReaL inputs and stray objects leave out: each written where named, read whole or
counted, never lost silently."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from asynctrace.cli._origins import Origins, ProcessInfo
from asynctrace.cli._output import Output
from asynctrace.cli._read_stats import ReadStats
from asynctrace.cli._records import iter_file

from ._helpers import GOLDEN, Result, one_line, write_lines

Run = Callable[..., Result]

# -- -o naming a FIFO, a symbolic link, a long name --------------------------------


@pytest.mark.parametrize("command", ["convert", "report"])
def test_an_output_fifo_is_written_into_not_replaced(
    run: Run, tmp_path: Path, command: str
) -> None:
    """A FIFO (what ``-o /dev/stdout`` resolves to under a pipe) gets the whole output and
    stays a FIFO."""
    fifo = tmp_path / "out.fifo"
    os.mkfifo(fifo)
    keep = tmp_path / "same.fifo"  # the FIFO under a second name, to unblock the reader
    os.link(fifo, keep)
    got: list[bytes] = []

    def reader() -> None:
        with open(keep, "rb") as stream:
            got.append(stream.read())

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        result = run(command, GOLDEN, "-o", fifo, "--no-progress")
    finally:
        if thread.is_alive():  # the command did not open it: let the reader go
            try:
                os.close(os.open(keep, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        thread.join(10)
    assert result.code == 0, result.err
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode), "the FIFO was replaced by a regular file"
    assert got, "the reader of the FIFO got nothing"
    assert got[0], "the reader of the FIFO got nothing"
    if command == "convert":
        assert json.loads(got[0])["traceEvents"]
    else:
        assert b"</html>" in got[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.fifo", "same.fifo"]


@pytest.mark.parametrize("command", ["convert", "report"])
def test_an_output_symlink_is_kept_and_its_file_replaced(
    run: Run, tmp_path: Path, command: str
) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (real / "out").write_text("old")
    link = tmp_path / "out.link"
    link.symlink_to(real / "out")
    result = run(command, GOLDEN, "-o", link, "--no-progress")
    assert result.code == 0, result.err
    assert link.is_symlink()
    assert os.readlink(link) == str(real / "out")
    assert (real / "out").read_text() != "old"
    assert "</html>" in link.read_text() or json.loads(link.read_text())["traceEvents"]
    assert sorted(p.name for p in real.iterdir()) == ["out"]  # no temporary file left


@pytest.mark.parametrize("command", ["convert", "report"])
def test_a_long_valid_output_name_is_written(run: Run, tmp_path: Path, command: str) -> None:
    """A name near NAME_MAX (255 bytes) is written: the temporary file's name is short."""
    target = tmp_path / ("a" * 250 + ".out")
    target.touch()  # the name itself is valid
    result = run(command, GOLDEN, "-o", target, "--no-progress")
    assert result.code == 0, result.err
    assert target.stat().st_size > 100
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]


@pytest.mark.parametrize("command", ["convert", "report"])
def test_an_output_that_cannot_be_written_is_one_line(
    run: Run, tmp_path: Path, command: str
) -> None:
    """A device that refuses the bytes (``/dev/full``, through a link): one line naming
    the output, no internal error, the link kept."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    full = tmp_path / "full"
    full.symlink_to("/dev/full")
    # Written into, never replaced: checked first, so that a regression can never swap
    # the machine's /dev/full for a file.
    assert Output(str(full)).direct
    result = run(command, GOLDEN, "-o", full, "--no-progress")
    assert result.code == 2
    line = one_line(result.err)
    assert str(full) in line
    assert "space" in line.lower()
    assert full.is_symlink()


# -- more inputs than open files allowed -------------------------------------------


def _many_ranks(directory: Path, count: int) -> Path:
    directory.mkdir()
    for rank in range(count):
        write_lines(
            directory / f"traces-r{rank}.jsonl",
            [
                {"ph": "M", "name": "process_name", "pid": 1000 + rank, "args": {"rank": rank}},
                {
                    "ph": "X",
                    "name": "rl.step",
                    "ts": 1_700_000_000_000_000 + rank,
                    "dur": 1000,
                    "pid": 1000 + rank,
                    "tid": 1,
                    "args": {
                        "asynctrace.group": "step",
                        "rl.iteration": 1,
                        "trace_id": f"{rank + 1:032x}",
                        "span_id": f"{rank + 1:016x}",
                    },
                },
            ],
        )
    return directory


def _limited(soft: int, hard: int) -> Callable[[], None]:
    def limit() -> None:
        import resource

        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return limit


def _over_many_files(
    tmp_path: Path, command: str, *, soft: int, hard: int
) -> subprocess.CompletedProcess[str]:
    """*command* over 150 rank files in a child whose open-file limits are *soft*, *hard*."""
    pytest.importorskip("resource")
    inputs = _many_ranks(tmp_path / "many", 150)
    argv = [sys.executable, "-m", "asynctrace", command, str(inputs), "--no-progress"]
    if command != "goodput":
        argv += ["-o", str(tmp_path / "out")]
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=120, preexec_fn=_limited(soft, hard)
    )


@pytest.mark.parametrize("command", ["convert", "goodput", "report"])
def test_more_inputs_than_the_soft_open_file_limit_are_read(tmp_path: Path, command: str) -> None:
    """The soft limit is raised towards the hard one: 150 files under ``ulimit -Sn 64``."""
    done = _over_many_files(tmp_path, command, soft=64, hard=4096)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("command", ["convert", "goodput"])
def test_more_inputs_than_the_hard_open_file_limit_say_so(tmp_path: Path, command: str) -> None:
    done = _over_many_files(tmp_path, command, soft=64, hard=64)
    assert done.returncode == 2, done.stderr
    line = one_line(done.stderr)
    assert "150 input files" in line
    assert "64" in line
    assert "ulimit -n" in line
    assert not (tmp_path / "out").exists()


# -- a file still being written ----------------------------------------------------


def _span_line(i: int) -> str:
    event = {"ph": "X", "name": "x" * 300, "ts": 1, "dur": 1, "pid": 1, "tid": 1}
    event["args"] = {"span_id": f"{i:016x}"}
    return json.dumps(event) + "\n"


def test_a_line_half_written_by_a_live_writer_is_at_most_one_torn_line(tmp_path: Path) -> None:
    """A writer flushing half a line then the rest: a read that reaches the half line
    joins it with the rest when it is there, else stops there (one torn line), never
    reading the rest as a second malformed line."""
    path = tmp_path / "traces-r0.jsonl"
    path.write_text("".join(_span_line(i) for i in range(1, 2001)))
    stop = threading.Event()

    def writer() -> None:
        i = 10**6
        with open(path, "a") as stream:
            while not stop.is_set():
                line = _span_line(i)
                i += 1
                stream.write(line[:150])
                stream.flush()
                time.sleep(0.0002)
                stream.write(line[150:])
                stream.flush()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    runs = 0
    deadline = time.monotonic() + 1.0
    try:
        while runs < 300 and time.monotonic() < deadline:
            stats = ReadStats()
            ids = [event["args"]["span_id"] for event, _ in iter_file(path, stats)]
            runs += 1
            assert stats.malformed <= 1, (runs, stats.summary())
            assert len(ids) == len(set(ids)) >= 2000
    finally:
        stop.set()
        thread.join(10)


def test_a_last_line_without_a_newline_is_read(tmp_path: Path) -> None:
    path = tmp_path / "traces-r0.jsonl"
    path.write_text(_span_line(1) + _span_line(2).rstrip("\n"))
    stats = ReadStats()
    assert len(list(iter_file(path, stats))) == 2
    assert stats.malformed == 0


# -- process labels ------------------------------------------------------------------


def _naive_label(origins: Origins, origin: int) -> str:
    """What a label is: the rank (and role), the file name when unknown, the pid when shared."""
    info = origins.infos[origin]
    label = info.label
    if label == "?":
        label = origins.paths[origins.keys[origin][0]].name
    if sum(1 for other in origins.infos if other.label == info.label) > 1:
        label += f" pid {origins.keys[origin][1]}"
    return label


def test_process_labels_are_made_once_not_per_row(monkeypatch: pytest.MonkeyPatch) -> None:
    """Labels (the pid added where two processes share one) equal the rule, and asking for
    every origin's label, row after row, looks at each process a bounded number of times."""
    paths = [Path(f"traces-r{i % 150}.jsonl") for i in range(200)] + [Path("odd.jsonl")]
    origins = Origins(paths)
    for index in range(len(paths)):
        origins.origin(index, 4000 + index)
    origins.set_metadata(0, 77, {"rank": 3, "role": "driver"})
    origins.origin(0, 77)
    expected = [_naive_label(origins, i) for i in range(len(origins.infos))]
    assert "odd.jsonl" in expected
    assert "r3 pid 4003" in expected
    assert "driver r3" in expected
    looked = 0
    plain = ProcessInfo.label

    def counted(self: ProcessInfo) -> str:
        nonlocal looked
        looked += 1
        return plain.fget(self)  # type: ignore[attr-defined,no-any-return]

    monkeypatch.setattr(ProcessInfo, "label", property(counted))
    rows = [origins.label(i % len(expected)) for i in range(20 * len(expected))]
    assert rows == expected * 20
    assert looked <= 2 * len(expected), looked
    origins.origin(1, 4242)  # a process added later: labels made again, the new one shared
    assert origins.label(len(expected)) == "r1 pid 4242"
    assert origins.label(1) == "r1 pid 4001"


# -- AReaL events left out, objects that are not events, a non-UTF-8 stdout ----------


def _areal_event(name: str, cat: str, ts: int | None, dur: int, **args: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"ph": "X", "name": name, "cat": cat, "dur": dur, "pid": 7, "tid": 7}
    event["args"] = {"rank": 0, **args}
    if ts is not None:
        event["ts"] = ts
    return event


def test_areal_events_without_a_ts_are_counted(run: Run, tmp_path: Path) -> None:
    write_lines(
        tmp_path / "traces-r0.jsonl",
        [
            _areal_event("step", "misc", 0, 1000, global_step=1),
            _areal_event("gen", "compute", 100, 400),
            _areal_event("lost", "compute", None, 300),
            _areal_event("lost2", "compute", None, 300),
        ],
    )
    result = run("goodput", tmp_path, "--json", "--no-progress")
    assert result.code == 0, result.err
    assert result.json()["inputs"]["without_ids"] == 2
    assert "2 complete events without trace/span ids or finite times" in result.err
    assert "2 of them AReaL events without a ts" in result.err


def test_areal_events_under_no_step_are_said_everywhere(run: Run, tmp_path: Path) -> None:
    """In goodput's notes (prefixed, escaped) and --json inputs, and report's summary and
    page."""
    write_lines(
        tmp_path / "traces-r0.jsonl",
        [
            _areal_event("step", "misc", 0, 1000, global_step=1),
            _areal_event("gen", "compute", 100, 400),
            _areal_event("outside\x1b[2J", "compute", 5000, 900_000),
        ],
    )
    result = run("goodput", tmp_path, "--json", "--no-progress")
    assert result.code == 0, result.err
    inputs = result.json()["inputs"]
    assert inputs["areal_outside_steps"] == 1
    assert inputs["areal_outside_steps_s"] == pytest.approx(0.9)
    said = "1 bucketed AReaL event(s) (0.900s) lie under no step"
    assert f"asynctrace goodput: {said}" in result.err
    assert "note:" not in result.err
    assert "\x1b" not in result.err
    page = tmp_path / "r.html"
    result = run("report", tmp_path, "-o", page, "--no-progress")
    assert result.code == 0, result.err
    assert said in one_line(result.err)
    assert said in page.read_text()


def test_goodput_counts_json_objects_without_ph(run: Run, tmp_path: Path) -> None:
    """A sessions file matched by a glob of trace files: its records are said to be skipped,
    as convert says it."""
    for path in GOLDEN.iterdir():
        (tmp_path / path.name).write_bytes(path.read_bytes())
    sessions = sum(1 for line in (GOLDEN / "sessions-r0.jsonl").read_text().splitlines() if line)
    result = run("goodput", f"{tmp_path}/*.jsonl", "--json", "--no-progress")
    assert result.code == 0, result.err
    assert result.json()["inputs"]["without_ph"] == sessions
    assert f"skipped {sessions} JSON objects without 'ph' (not trace events)" in result.err
    result = run("convert", f"{tmp_path}/*.jsonl", "-o", tmp_path / "t.json", "--no-progress")
    assert f"skipped {sessions} JSON objects without 'ph'" in result.err


@pytest.mark.parametrize("form", ["--csv", "--json", "--text"])
def test_goodput_writes_utf8_whatever_the_locale(tmp_path: Path, form: str) -> None:
    lines = (GOLDEN / "traces-r0.jsonl").read_text().replace('"rl.step"', '"步骤"')
    (tmp_path / "traces-r0.jsonl").write_text(lines)
    argv = [sys.executable, "-m", "asynctrace", "goodput", str(tmp_path), "--no-progress"]
    if form != "--text":
        argv.append(form)
    env = {**os.environ, "PYTHONIOENCODING": "ascii", "LC_ALL": "C"}
    done = subprocess.run(argv, capture_output=True, timeout=60, env=env)
    assert done.returncode == 0, done.stderr.decode()
    assert "步骤" in done.stdout.decode("utf-8")


# -- -o naming a descriptor, permissions, ACLs, loops, read-only directories --------

_CLI = [sys.executable, "-m", "asynctrace"]


def _cli(*argv: object) -> list[str]:
    return [*_CLI, *(str(a) for a in argv)]


@pytest.mark.parametrize("link", ["/dev/stdout", "/dev/fd/1", "/proc/self/fd/1"])
@pytest.mark.parametrize("how", ["append", "shared offset"])
def test_a_descriptor_output_is_written_into_the_descriptor(
    tmp_path: Path, link: str, how: str
) -> None:
    """``-o /dev/stdout`` with stdout a file (``>> log``, ``{ ...; } > out``): the bytes go
    where the descriptor is, after what was there; the file is never replaced by name."""
    if not os.path.exists(link):
        pytest.skip(f"no {link} here")
    out = tmp_path / "out.link"
    out.symlink_to(link)  # the named descriptor, through a name under tmp_path
    log = tmp_path / "log"
    log.write_bytes(b"BEFORE\n")
    with open(log, "ab" if how == "append" else "r+b") as stream:
        stream.seek(0, os.SEEK_END)
        done = subprocess.run(
            _cli("convert", GOLDEN, "-o", out, "--no-progress", "-q"),
            stdout=stream,
            stderr=subprocess.PIPE,
            timeout=60,
        )
        os.write(stream.fileno(), b"AFTER\n")  # at its offset, as a group's next command
    assert done.returncode == 0, done.stderr
    data = log.read_bytes()
    assert data.startswith(b"BEFORE\n")
    assert data.endswith((b"}\nAFTER\n", b"}AFTER\n"))
    assert json.loads(data[len(b"BEFORE\n") : -len(b"AFTER\n")])["traceEvents"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["log", "out.link"]


@pytest.mark.parametrize("command", ["convert", "report"])
def test_a_descriptor_output_reaches_a_pipe(tmp_path: Path, command: str) -> None:
    """``-o /dev/stdout`` into ``| wc -c`` and ``-o /dev/fd/N`` from a process substitution:
    the bytes arrive through the pipe."""
    if not os.path.exists("/dev/fd/1"):
        pytest.skip("no /dev/fd here")
    stdout = tmp_path / "stdout.link"
    stdout.symlink_to("/dev/stdout")
    done = subprocess.run(
        _cli(command, GOLDEN, "-o", stdout, "--no-progress"), capture_output=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert b"</html>" in done.stdout if command == "report" else json.loads(done.stdout)
    read_end, write_end = os.pipe()
    substituted = tmp_path / "fd.link"
    substituted.symlink_to(f"/dev/fd/{write_end}")  # what <(...) or >(...) names
    got: list[bytes] = []

    def reader() -> None:
        with open(read_end, "rb") as stream:
            got.append(stream.read())

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    try:
        done = subprocess.run(
            _cli(command, GOLDEN, "-o", substituted, "--no-progress"),
            capture_output=True,
            timeout=60,
            pass_fds=(write_end,),
        )
    finally:
        os.close(write_end)
        thread.join(30)
    assert done.returncode == 0, done.stderr
    assert got
    assert b"</html>" in got[0] if command == "report" else json.loads(got[0])


def test_the_temporary_file_is_named_after_the_output(tmp_path: Path) -> None:
    """A file left by a killed command says whose it is; a long name still fits."""

    for name in ("trace.json", "é" * 60 + "a" * 130 + ".json"):
        output = Output(str(tmp_path / name))
        stream = output.open()
        try:
            (temporary,) = [p.name for p in tmp_path.iterdir() if p.name != name]
            assert temporary.startswith("." + name[:40])
            assert temporary.endswith(".tmp")
            assert len(os.fsencode(temporary)) <= 255
        finally:
            stream.close()
            output.abort()
    assert list(tmp_path.iterdir()) == []


def test_writing_an_output_never_sets_the_umask(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The umask is the process's: set for a moment, a file another thread creates then
    would be world-writable. The kernel applies it (and a default ACL) as open() does."""

    calls: list[int] = []
    real_umask = os.umask

    def seen(mask: int) -> int:
        calls.append(mask)
        return real_umask(mask)

    monkeypatch.setattr(os, "umask", seen)
    for _ in range(2):  # a new file, then one replaced
        output = Output(str(tmp_path / "out.json"))
        output.open().write(b"{}")
        output.commit()
    assert calls == []


def test_a_new_output_gets_the_mode_the_umask_gives(tmp_path: Path) -> None:
    out = tmp_path / "new.json"
    done = subprocess.run(
        _cli("convert", GOLDEN, "-o", out, "--no-progress", "-q"),
        capture_output=True,
        timeout=60,
        preexec_fn=lambda: os.umask(0o027),
    )
    assert done.returncode == 0, done.stderr
    assert stat.S_IMODE(out.stat().st_mode) == 0o640


def _acl(entries: list[tuple[int, int, int]]) -> bytes:
    import struct

    return struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *entry) for entry in entries)


@pytest.mark.parametrize("command", ["convert", "report"])
def test_an_output_in_a_directory_with_a_default_acl_gets_it(
    run: Run, tmp_path: Path, command: str
) -> None:
    """As a file open() creates there: the ACL's mode (group write, a named user's write),
    not the umask's."""
    directory = tmp_path / "shared"
    directory.mkdir()
    anyone = 0xFFFFFFFF
    # user::rw- user:65534:rw- group::rw- mask::rw- other::r--
    entries = [(0x01, 6, anyone), (0x02, 6, 65534), (0x04, 6, anyone), (0x10, 6, anyone)]
    try:
        os.setxattr(directory, "system.posix_acl_default", _acl([*entries, (0x20, 4, anyone)]))
    except (OSError, AttributeError) as exc:
        pytest.skip(f"no POSIX ACLs here: {exc}")
    reference = directory / "by_open"
    old_umask = os.umask(0o022)  # what open() ignores under a default ACL
    try:
        with open(reference, "wb"):
            pass
        out = directory / "out"
        result = run(command, GOLDEN, "-o", out, "--no-progress")
    finally:
        os.umask(old_umask)
    assert result.code == 0, result.err
    assert stat.S_IMODE(out.stat().st_mode) == stat.S_IMODE(reference.stat().st_mode) == 0o664
    access = "system.posix_acl_access"
    assert os.getxattr(out, access) == os.getxattr(reference, access)


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o604])
@pytest.mark.parametrize("command", ["convert", "report"])
def test_a_replaced_output_keeps_its_permissions(
    run: Run, tmp_path: Path, command: str, mode: int
) -> None:
    out = tmp_path / "out"
    out.write_text("private")
    out.chmod(mode)
    result = run(command, GOLDEN, "-o", out, "--no-progress")
    assert result.code == 0, result.err
    assert out.read_text() != "private"
    assert stat.S_IMODE(out.stat().st_mode) == mode


@pytest.mark.parametrize("command", ["convert", "report"])
def test_an_output_symlink_loop_is_one_line(run: Run, tmp_path: Path, command: str) -> None:
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    result = run(command, GOLDEN, "-o", tmp_path / "a", "--no-progress")
    assert result.code == 2
    line = one_line(result.err)
    assert "symbolic link loop" in line
    assert str(tmp_path / "a") in line
    assert "internal error" not in line
    assert os.readlink(tmp_path / "a") == "b"
    assert os.readlink(tmp_path / "b") == "a"


def _unprivileged() -> list[str]:
    """A command prefix under which permissions apply (root's capabilities dropped)."""
    if os.geteuid() != 0:
        return []
    import shutil

    setpriv = shutil.which("setpriv")
    prefix = [setpriv or "setpriv", "--bounding-set=-all", "--inh-caps=-all"]
    if setpriv is None or subprocess.run([*prefix, "true"], capture_output=True).returncode:
        pytest.skip("root, and no way to drop its capabilities here")
    return prefix


@pytest.mark.parametrize("command", ["convert", "report"])
def test_an_output_in_a_read_only_directory_is_written_in_place(
    tmp_path: Path, command: str
) -> None:
    """A link in a writable directory to a writable file in a read-only one: written in
    place, as a shell's ``>`` would; a new file there: refused, naming the directory."""
    prefix = _unprivileged()
    locked = tmp_path / "ro"
    locked.mkdir()
    (locked / "out").write_text("old")
    link = tmp_path / "link"
    link.symlink_to(locked / "out")
    locked.chmod(0o555)
    try:
        done = subprocess.run(
            [*prefix, *_cli(command, GOLDEN, "-o", link, "--no-progress")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert link.is_symlink()
        text = (locked / "out").read_text()
        assert "</html>" in text if command == "report" else json.loads(text)
        assert sorted(p.name for p in locked.iterdir()) == ["out"]
        done = subprocess.run(
            [*prefix, *_cli(command, GOLDEN, "-o", locked / "new", "--no-progress")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 2
        line = one_line(done.stderr)
        assert f"cannot write in {locked}" in line
        assert "ermission denied" in line
    finally:
        locked.chmod(0o755)


@pytest.mark.parametrize("form", ["--text", "--json", "--csv"])
def test_goodput_on_a_full_stdout_is_one_line(form: str) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    argv = _cli("goodput", GOLDEN, "--no-progress")
    if form != "--text":
        argv.append(form)
    with open("/dev/full", "wb") as full:
        done = subprocess.run(argv, stdout=full, stderr=subprocess.PIPE, text=True, timeout=60)
    assert done.returncode == 2
    line = one_line(done.stderr)
    assert line == "asynctrace goodput: error: stdout: No space left on device"


_LIBRARY_LIMIT = """
import resource, sys
from pathlib import Path
from asynctrace.cli._collect import collect
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
paths = sorted(Path(sys.argv[1]).iterdir())
collect(paths, step_name=None, progress=False, prog="lib")
print(resource.getrlimit(resource.RLIMIT_NOFILE)[0])
"""


def test_goodput_as_a_library_puts_the_open_file_limit_back(tmp_path: Path) -> None:
    """The soft limit is raised for the read of 50 files under ``ulimit -Sn 64``, then put
    back: the caller's process is left as it was."""
    pytest.importorskip("resource")
    inputs = _many_ranks(tmp_path / "many", 50)
    done = subprocess.run(
        [sys.executable, "-c", _LIBRARY_LIMIT, str(inputs)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "64"
