"""Property-test budgets: small in the suite, large in ``nox -s fuzz``.

The suite runs every property test with a budget that keeps it to a second or
two. ``nox -s fuzz`` (``ASYNCTRACE_FUZZ=1``) runs the tests marked ``fuzz``
on the fuzz driver (``tests/_fuzz.py``) with their fuzz budgets;
``ASYNCTRACE_FUZZ_SECONDS=S`` stops each target after *S* seconds (its
examples so far are reported), which holds the session to five minutes on
two cores when the machine is loaded. ``ASYNCTRACE_FUZZ_EXAMPLES=N``
(``nox -s fuzz -- N``) gives every target *N* examples instead, without a
time limit, for a longer run.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

FUZZ = os.environ.get("ASYNCTRACE_FUZZ", "") not in ("", "0")
_EXAMPLES = os.environ.get("ASYNCTRACE_FUZZ_EXAMPLES", "").strip()
EXAMPLES = int(_EXAMPLES) if _EXAMPLES.isdigit() and int(_EXAMPLES) > 0 else None
_SECONDS = os.environ.get("ASYNCTRACE_FUZZ_SECONDS", "").strip()
SECONDS = float(_SECONDS) if _SECONDS.replace(".", "", 1).isdigit() and EXAMPLES is None else None

if FUZZ:
    # What the driver's replay of a failure runs with (tests/_fuzz.py): no deadline,
    # no health check about slow or large data, and shrinking; no example database
    # for a test run without the driver.
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
