"""Fixtures for the command-line tests: run ``main()`` in-process, copies of the inputs."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from asynctrace.cli import main

from ._helpers import GOLDEN, Result


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    """Run ``asynctrace ARGS...`` in this process and capture what it prints."""

    def invoke(*argv: object) -> Result:
        capsys.readouterr()
        code = main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return Result(code, out, err)

    return invoke


@pytest.fixture
def golden(tmp_path: Path) -> Path:
    """A writable copy of the golden inputs (two ranks, traces and sessions)."""
    target = tmp_path / "golden"
    shutil.copytree(GOLDEN, target)
    return target
