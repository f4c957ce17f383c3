"""The README's Quick start, as a new user meets it: a fresh virtual environment, the
documented install line, the documented program, and its output opened by ``convert``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _install_line() -> str:
    """The one ``pip install`` line of the README's Install section."""
    section = README[README.index("## Install") : README.index("## Quick start")]
    (line,) = re.findall(r"^pip install [^#\n]*", section, flags=re.MULTILINE)
    return line.strip()


def _quick_start() -> str:
    """The program of the README's Quick start (the block the docs test runs too)."""
    start = README.index("<!-- docs-test: run quickstart -->")
    block = README[start:].split("```python\n", 1)[1]
    return block.split("\n```", 1)[0]


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    done = subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    assert done.returncode == 0, f"{args} failed:\n{done.stdout}\n{done.stderr}"
    return done.stdout + done.stderr


@pytest.mark.slow
def test_quick_start_in_a_fresh_environment(tmp_path: Path) -> None:
    """Only the documented install line, then the program: a trace that convert opens."""
    line = _install_line()
    assert line == "pip install -e '.[sdk,cli]'"  # what the README tells a new user
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = str(env_dir / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ASYNCTRACE_", "VIRTUAL_ENV"))}
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTHONPATH", None)
    _run([python, "-m", "pip", "install", "-q", "-e", f"{ROOT}[sdk,cli]"], tmp_path, env)
    work = tmp_path / "work"
    work.mkdir()
    (work / "quickstart.py").write_text(_quick_start())
    printed = _run([python, "quickstart.py"], work, env)
    assert printed.splitlines()[0] == "wrote 7 spans to traces/traces-r0.jsonl"
    assert "next: asynctrace goodput traces" in printed
    # The asynctrace command is on the environment's PATH, as the README says.
    converted = _run(["asynctrace", "convert", "traces", "-o", "trace.json"], work, env)
    assert "wrote trace.json" in converted
    events = json.loads((work / "trace.json").read_text())["traceEvents"]
    names = sorted(e["name"] for e in events if e.get("ph") == "X")
    assert names == ["rl.job", *["rl.step"] * 3, *["train_step"] * 3]
    # Nothing but the documented extras was needed (no test dependency leaked in).
    listed = _run([python, "-m", "pip", "list", "--format", "json"], tmp_path, env)
    installed = {p["name"].lower() for p in json.loads(listed.splitlines()[0])}
    assert "pytest" not in installed
    assert {"asynctrace", "opentelemetry-sdk", "msgspec"} <= installed
