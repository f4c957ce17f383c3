"""The docs cannot drift: every code block that claims an output is run and compared.

A fenced block is marked by an HTML comment on the line just above it:

- ``<!-- docs-test: run SESSION [setup=NAME] -->`` above a ``python`` or
  ``console`` block runs it. Blocks of one page with the same SESSION run in
  order in one scratch directory (``setup`` prepares it first: see
  :data:`SETUPS`). A ``python`` block runs as a script; a ``console`` block runs
  each ``$ `` line in a shell (``asynctrace`` and ``python`` are this
  interpreter's) and compares what it prints, stdout and stderr as a terminal
  shows them, with the lines under it.
- ``<!-- docs-test: output [numbers] -->`` above a ``text`` block: what the
  ``python`` block just before it prints.
- ``<!-- docs-test: not run: REASON -->``: a ``text`` or ``console`` block that
  is an illustration (a diagram, a layout, output of a real cluster).

Every ``text`` and ``console`` block of the README and the docs must carry one
of these marks, so an output claim cannot be added unchecked. In expected
output, a line ``...`` stands for any number of lines and ``...`` inside a line
for any text; with ``numbers``, every run of digits (and every hex id) matches
any other and any run of spaces any other, so timings, ids and the alignment
they shift may vary while words and columns may not.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
DATA = ROOT / "tests" / "cli" / "data"

_FENCE = re.compile(r"^(\s*)```(\w*)")
_MARK = re.compile(r"^\s*<!-- docs-test: (.*?) -->\s*$")


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    lang: str
    body: str
    mark: str | None


@dataclass
class Session:
    page: Path
    name: str
    setup: str | None
    steps: list[tuple[Block, Block | None]] = field(default_factory=list)  # (run, output)


def blocks(page: Path) -> Iterator[Block]:
    """The fenced blocks of *page*, each with the docs-test mark above it (if any)."""
    lines = page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        found = _FENCE.match(lines[i])
        if not found:
            i += 1
            continue
        indent, lang = found.groups()
        mark = _MARK.match(lines[i - 1]) if i else None
        body: list[str] = []
        j = i + 1
        while j < len(lines) and lines[j].strip() != "```":
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j])
            j += 1
        yield Block(page, i + 1, lang, "\n".join(body), mark.group(1) if mark else None)
        i = j + 1


def sessions() -> list[Session]:
    """Every run session of every page, with its blocks paired with their outputs."""
    found: list[Session] = []
    for page in PAGES:
        by_name: dict[str, Session] = {}
        last_run: Block | None = None
        for block in blocks(page):
            mark = block.mark or ""
            if mark.startswith("run "):
                name, *options = mark[4:].split()
                setups = [o.split("=", 1)[1] for o in options if o.startswith("setup=")]
                session = by_name.get(name)
                if session is None:
                    session = by_name[name] = Session(page, name, setups[0] if setups else None)
                    found.append(session)
                session.steps.append((block, None))
                last_run = block
            elif mark.startswith("output"):
                where = f"{page.name}:{block.line}"
                assert last_run is not None, f"{where}: an output block with no run block before"
                assert last_run.lang == "python", f"{where}: output of a non-python block"
                session = next(s for s in by_name.values() if s.steps[-1][0] is last_run)
                session.steps[-1] = (last_run, block)
    return found


# -- setups: what a session's scratch directory holds before its first block ----


def _golden(cwd: Path) -> None:
    shutil.copytree(DATA / "golden", cwd / "run")


def _golden_malformed(cwd: Path) -> None:
    _golden(cwd)
    path = cwd / "run" / "traces-r1.jsonl"
    lines = path.read_text().splitlines(keepends=True)
    lines.insert(6, '{"ph": "X", "name": "torn\n')  # a line cut by a kill, as line 7
    path.write_text("".join(lines))


def _repository(cwd: Path) -> None:
    (cwd / "tests").symlink_to(ROOT / "tests")


SETUPS: dict[str, Callable[[Path], None]] = {
    "golden": _golden,
    "golden-malformed": _golden_malformed,
    "repository": _repository,
}


# -- running and comparing ------------------------------------------------------------


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASYNCTRACE_", "OTEL_"))}
    env.update(COLUMNS="100", NO_COLOR="1", PYTHONHASHSEED="0", PYTHONWARNINGS="")
    return env


def _run(command: list[str] | str, cwd: Path, *, shell: bool = False) -> str:
    done = subprocess.run(
        command,
        cwd=cwd,
        shell=shell,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
        check=False,
    )
    return done.stdout


def _console(body: str) -> Iterator[tuple[str, str]]:
    """``(command, expected output)`` pairs of a console block."""
    command: str | None = None
    expected: list[str] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            if command is not None:
                yield command, "\n".join(expected)
            command, expected = line[2:], []
        else:
            expected.append(line)
    if command is not None:
        yield command, "\n".join(expected)


def _shell(command: str) -> str:
    """*command* with ``asynctrace`` and ``python`` as this interpreter's."""
    python = f'"{sys.executable}"'
    command = re.sub(r"(^|&& |\| )python ", rf"\g<1>{python} ", command)
    return re.sub(r"(^|&& |\| )asynctrace ", rf"\g<1>{python} -m asynctrace ", command)


_NUMBER = re.compile(r"[0-9a-f]{16,32}|\d+")


def _literal(text: str, numbers: bool) -> str:
    if not numbers:
        return re.escape(text)
    # Any number for any number; and any run of spaces for another (a wider
    # number shifts a table's columns).
    pieces = [r" +".join(map(re.escape, re.split(r" +", piece))) for piece in _NUMBER.split(text)]
    return r"(?:[0-9a-f]{16,32}|\d+)".join(pieces)


def _line_pattern(expected: str, numbers: bool) -> re.Pattern[str]:
    return re.compile(".*".join(_literal(part, numbers) for part in expected.split("...")))


def matches(expected: str, actual: str, *, numbers: bool = False) -> bool:
    """Whether *actual* fits *expected* (``...`` lines and parts, optionally any numbers)."""
    want = [line.rstrip() for line in expected.strip("\n").splitlines()]
    got = [line.rstrip() for line in actual.strip("\n").splitlines()]

    def fit(i: int, j: int) -> bool:
        if i == len(want):
            return j == len(got)
        if want[i] == "...":
            return any(fit(i + 1, k) for k in range(j, len(got) + 1))
        if j == len(got) or not _line_pattern(want[i], numbers).fullmatch(got[j]):
            return False
        return fit(i + 1, j + 1)

    return fit(0, 0)


@dataclass
class Outcome:
    """What one run block printed, against what its page says."""

    block: Block  # the block holding the expected text (an output block, or the console block)
    what: str
    expected: str
    actual: str
    numbers: bool
    command: str | None = None  # for a console block: the command it ran

    @property
    def ok(self) -> bool:
        return matches(self.expected, self.actual, numbers=self.numbers)


def run_session(session: Session, cwd: Path) -> list[Outcome]:
    """Run *session*'s blocks in *cwd*; what each printed against what the page says."""
    if session.setup is not None:
        SETUPS[session.setup](cwd)
    outcomes: list[Outcome] = []
    for run, output in session.steps:
        if run.lang == "python":
            script = cwd / f"block_{run.line}.py"
            script.write_text(run.body + "\n")
            actual = _run([sys.executable, str(script)], cwd)
            if output is not None:  # else run for its effect on the session (files it writes)
                numbers = "numbers" in (output.mark or "").split()
                outcomes.append(Outcome(output, "the code", output.body, actual, numbers))
            continue
        assert run.lang == "console", f"{run.page.name}:{run.line}: cannot run {run.lang!r}"
        numbers = "numbers" in (run.mark or "").split()
        for command, expected in _console(run.body):
            actual = _run(_shell(command), cwd, shell=True)
            outcomes.append(Outcome(run, f"`{command}`", expected, actual, numbers, command))
    return outcomes


ALL = sessions()


@pytest.mark.slow
@pytest.mark.parametrize("session", ALL, ids=[f"{s.page.relative_to(ROOT)}:{s.name}" for s in ALL])
def test_documented_output_is_what_the_code_prints(session: Session, tmp_path: Path) -> None:
    """Each run session of each page prints exactly what the page says it prints."""
    for outcome in run_session(session, tmp_path):
        if not outcome.ok:
            pytest.fail(
                f"{outcome.block.page.relative_to(ROOT)}:{outcome.block.line}: {outcome.what} "
                f"printed\n{outcome.actual}\nbut the page says\n{outcome.expected}\n"
                "(python tests/test_docs.py --update rewrites the blocks that differ)",
                pytrace=False,
            )


def update(pages: list[Path]) -> None:
    """Rewrite the expected output of every block that differs with what it printed now."""
    import tempfile

    for page in pages:
        bodies: dict[int, list[str]] = {}  # fence line -> new body lines
        for session in (s for s in ALL if s.page == page):
            with tempfile.TemporaryDirectory() as tmp:
                outcomes = run_session(session, Path(tmp))
            by_block: dict[int, list[Outcome]] = {}
            for outcome in outcomes:
                by_block.setdefault(outcome.block.line, []).append(outcome)
            for line, group in by_block.items():
                if all(o.ok for o in group):
                    continue
                body: list[str] = []
                for o in group:
                    text = o.actual.rstrip("\n").replace(sys.executable, "...")
                    body.extend([f"$ {o.command}"] if o.command is not None else [])
                    body.extend(text.splitlines())
                bodies[line] = body
        if not bodies:
            continue
        lines = page.read_text(encoding="utf-8").splitlines()
        for line in sorted(bodies, reverse=True):
            indent = _FENCE.match(lines[line - 1]).group(1)  # type: ignore[union-attr]
            end = line
            while lines[end].strip() != "```":
                end += 1
            lines[line:end] = [indent + text if text else text for text in bodies[line]]
        page.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"updated {len(bodies)} blocks of {page.relative_to(ROOT)}")


def test_every_output_claim_is_marked() -> None:
    """Every text and console block is run, the output of a run, or says why it is not."""
    unmarked = [
        f"{b.page.relative_to(ROOT)}:{b.line}"
        for page in PAGES
        for b in blocks(page)
        if b.lang in ("text", "console") and b.mark is None
    ]
    assert not unmarked, f"blocks without a docs-test mark: {unmarked}"


def test_the_runner_fails_on_a_changed_output() -> None:
    """The comparison is strict where it should be: a changed word or line is caught."""
    table = "step  wall s\nrl.step  1.0000\n"
    assert matches(table, "step  wall s\nrl.step  1.0000")
    assert matches(table, "step  wall s\nrl.step  0.0312", numbers=True)
    assert not matches(table, "step  wall s\nrl.step  0.0312")  # numbers are exact by default
    assert not matches(table, "step  wall\nrl.step  1.0000", numbers=True)  # a header changed
    assert not matches(table, "step  wall s\nrl.step  1.0000\nextra")  # a line added
    assert matches("first\n...\nlast", "first\na\nb\nlast")
    assert matches("wrote ... events", "wrote 12 events")
    assert not matches("first\n...\nlast", "first\na\nb\nlast but one")
    assert matches("span 0000000000000101", "span 00000000000001ff", numbers=True)
    assert matches("r0   99.6%", "r0  100.0%", numbers=True)
    assert not matches("r0   99.6%", "r0  100.0% 0.0", numbers=True)


if __name__ == "__main__":
    if sys.argv[1:2] != ["--update"]:
        sys.exit("usage: python tests/test_docs.py --update [PAGE ...]")
    update([Path(arg).resolve() for arg in sys.argv[2:]] or PAGES)


@pytest.mark.slow
def test_a_changed_page_fails(tmp_path: Path) -> None:
    """The README's Quick start with one word of its output changed no longer passes."""
    (session,) = [s for s in ALL if s.page.name == "README.md" and s.name == "quickstart"]
    (tmp_path / "as-is").mkdir()
    assert all(outcome.ok for outcome in run_session(session, tmp_path / "as-is"))
    page = tmp_path / "README.md"
    page.write_text(session.page.read_text().replace("wrote 7 spans to", "wrote 8 spans to"))
    changed = Session(page, session.name, session.setup)
    for run, output in session.steps:
        moved = [b for b in blocks(page) if b.line in (run.line, output.line if output else -1)]
        changed.steps.append((moved[0], moved[1] if output else None))
    (tmp_path / "changed").mkdir()
    outcomes = run_session(changed, tmp_path / "changed")
    assert [o.ok for o in outcomes] == [False, True, True]
