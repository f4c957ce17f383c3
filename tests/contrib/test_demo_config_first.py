"""The demo replaces only its own earlier files, and only once its configuration is accepted."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from asynctrace_contrib.demo import run_demo

from asynctrace import ConfigurationError

OWN = ("traces-driver-r0.jsonl", "sessions-driver-r0.jsonl", "goodput-driver-r0.jsonl")
OTHERS = ("traces-r0.jsonl", "sessions-r0.jsonl", "goodput-r1.jsonl", "notes.txt")


def earlier_run(out: Path) -> dict[str, str]:
    """The demo's files of an earlier run and files of other programs, in *out*."""
    files = {name: f"earlier {name}\n" for name in (*OWN, *OTHERS)}
    for name, text in files.items():
        (out / name).write_text(text)
    return files


def contents(out: Path) -> dict[str, str]:
    """Every entry of *out* (hidden ones too) and its text."""
    return {path.name: path.read_text() for path in out.iterdir()}


@pytest.mark.parametrize(
    ("variable", "value", "exporters"),
    [
        ("ASYNCTRACE_RUN_ID", "bad/id", None),
        ("LOCAL_RANK", "abc", None),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", ["otlp"]),
    ],
)
def test_a_refused_environment_keeps_the_earlier_run(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str,
    exporters: list[str] | None,
) -> None:
    """An environment variable asynctrace refuses fails run_demo with its name, and the
    earlier run's files are all still there, unchanged; nothing else is left behind."""
    files = earlier_run(tmp_path)
    monkeypatch.delenv("ASYNCTRACE_RUN_ID", raising=False)  # init_driver exports it
    monkeypatch.setenv(variable, value)
    with pytest.raises(ConfigurationError, match=rf"^{variable}: '{value}' is not accepted"):
        run_demo(tmp_path, steps=1, prompts=1, exporters=exporters)
    assert contents(tmp_path) == files


def test_the_command_refuses_a_bad_run_id_and_keeps_the_earlier_run(tmp_path: Path) -> None:
    """``ASYNCTRACE_RUN_ID=bad/id asynctrace demo``: one line, status 2, files kept."""
    files = earlier_run(tmp_path)
    env = {**os.environ, "ASYNCTRACE_RUN_ID": "bad/id"}
    done = subprocess.run(
        [sys.executable, "-m", "asynctrace", "demo", "--steps", "1", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("asynctrace demo: error: ASYNCTRACE_RUN_ID: 'bad/id' is not")
    assert contents(tmp_path) == files


def test_a_rerun_replaces_only_the_demos_own_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run into a directory of an earlier one starts its own three files anew and
    leaves other programs' trace, session and goodput files alone; the result names
    only the demo's own files."""
    files = earlier_run(tmp_path)
    monkeypatch.delenv("ASYNCTRACE_RUN_ID", raising=False)
    result = run_demo(tmp_path, steps=1, prompts=1)
    after = contents(tmp_path)
    assert sorted(after) == sorted(files)  # no file set aside is left behind
    for name in OTHERS:
        assert after[name] == files[name], name
    for name in OWN:
        assert "earlier" not in after[name], name
        assert [json.loads(line) for line in after[name].splitlines()], name
    assert result.trace_files == [tmp_path / "traces-driver-r0.jsonl"]
    assert result.sessions_file == tmp_path / "sessions-driver-r0.jsonl"
