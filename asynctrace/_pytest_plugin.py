"""pytest plugin: the ``captured_spans`` fixture (registered via the pytest11 entry point)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from .testing import CapturedSpans


@pytest.fixture
def captured_spans() -> Iterator[CapturedSpans]:
    """Every span group on, spans captured in memory; restored after the test.

    Example::

        def test_scores(captured_spans):
            score(sample)
            assert captured_spans.by_name("score")
    """
    from .testing import capture_spans

    with capture_spans("all") as captured:
        yield captured
