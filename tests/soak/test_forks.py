"""Forks: hundreds of children forked while a user thread holds asynctrace's locks."""

from __future__ import annotations

from pathlib import Path

import pytest
from _forks import fork_under_load

from ._soak import report, scale


@pytest.mark.parametrize("provider", ["sdk", "fast"])
def test_no_forked_child_ever_hangs(tmp_path: Path, provider: str) -> None:
    """200 forks per provider by default (800 with ``-- full``): none hangs, each writes."""
    forks = int(200 * scale())
    found = fork_under_load(tmp_path, forks, provider)
    report(f"forks[{provider}]", forks=forks, **found)
    assert (found["hung"], found["failed"], found["written"]) == ([], [], forks)
