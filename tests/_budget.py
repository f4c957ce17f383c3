"""Property-test budgets: small in the suite, large in ``nox -s fuzz``.

The suite runs every property test with a budget that keeps it to a second or
two. ``nox -s fuzz`` (``ASYNCTRACE_FUZZ=1``) runs the tests marked ``fuzz``
with their fuzz budgets, chosen so that the whole session takes at most five
minutes on two cores; ``ASYNCTRACE_FUZZ_EXAMPLES=N`` (``nox -s fuzz -- N``)
gives every target *N* examples instead, for a longer run.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

FUZZ = os.environ.get("ASYNCTRACE_FUZZ", "") not in ("", "0")
_EXAMPLES = os.environ.get("ASYNCTRACE_FUZZ_EXAMPLES", "").strip()
EXAMPLES = int(_EXAMPLES) if _EXAMPLES.isdigit() and int(_EXAMPLES) > 0 else None

if FUZZ:
    # Volume, not replay: no example database (nothing to read or write per example),
    # no deadline, no health check about slow or large data; explicit examples,
    # generation, and shrinking of a failure (which costs nothing until one fails).
    settings.register_profile(
        "fuzz",
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
    )
    settings.load_profile("fuzz")


def examples(quick: int, fuzz: int) -> int:
    """The ``max_examples`` of a property test.

    *quick* in the suite; under ``nox -s fuzz``, *fuzz*, or
    ``ASYNCTRACE_FUZZ_EXAMPLES`` when it is set.
    """
    if not FUZZ:
        return quick
    return EXAMPLES if EXAMPLES is not None else fuzz
