"""The soak sessions: marked ``soak``, run by ``nox -s soak`` (never by ``nox -s tests``).

Their length comes from ``ASYNCTRACE_SOAK_SCALE`` (default 1: the whole soak
fits in about five minutes on two cores; ``nox -s soak -- full`` sets the
scale the figures in docs/reliability.md name). Each test prints its figures
on one ``soak:`` line.
"""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test in this directory is a soak test."""
    for item in items:
        if "tests/soak/" in str(item.path).replace(os.sep, "/"):
            item.add_marker(pytest.mark.soak)
