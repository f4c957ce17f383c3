"""Property-test budgets: small in the suite, large in ``nox -s fuzz``.

The suite runs every property test with a budget that keeps it to a second or
two; ``nox -s fuzz`` (``ASYNCTRACE_FUZZ=1``) runs the tests marked ``fuzz``
with the large budget, for as long as that takes.
"""

from __future__ import annotations

import os

FUZZ = os.environ.get("ASYNCTRACE_FUZZ", "") not in ("", "0")


def examples(quick: int, fuzz: int) -> int:
    """The ``max_examples`` of a property test: *fuzz* under ``nox -s fuzz``, else *quick*."""
    return fuzz if FUZZ else quick
