"""The fuzz driver: a property test's examples without Hypothesis's search engine.

In the suite a property test runs as usual (``@given``, a small budget). Under
``nox -s fuzz`` (``ASYNCTRACE_FUZZ=1``) :func:`target` and :func:`run` run it
with this driver instead: each example is drawn from the test's own strategies
by Hypothesis's generator (a fresh ``ConjectureData`` on a seeded random, the
generation phase's own distribution) and passed to the test's body; there is
no example database, no deadline, no search for novel prefixes and no
shrinking until an example fails. A failing example is then replayed through
the normal ``@given`` engine, from an in-memory example database, so that
Hypothesis shrinks it and reports the minimal example (with its
``@reproduce_failure`` blob); one that does not replay fails with the blob of
the example as drawn.

Each target's examples (and its budget), invalid draws and seconds are
appended, one JSON object per line, to the file named by
``ASYNCTRACE_FUZZ_REPORT`` (the ``fuzz`` session prints them as a table).
"""

from __future__ import annotations

import functools
import json
import math
import os
import random
import time
from collections.abc import Callable
from typing import Any, TypeVar

from _budget import FUZZ, SECONDS
from hypothesis import Phase, __version__, settings
from hypothesis import strategies as st
from hypothesis.control import BuildContext
from hypothesis.core import encode_failure
from hypothesis.database import InMemoryExampleDatabase, choices_to_bytes
from hypothesis.errors import StopTest, UnsatisfiedAssumption
from hypothesis.internal.conjecture.data import ConjectureData
from hypothesis.internal.reflection import function_digest

F = TypeVar("F", bound=Callable[..., Any])
REPORT = os.environ.get("ASYNCTRACE_FUZZ_REPORT", "")


class FuzzFailure(AssertionError):
    """An example that failed in the driver but not when the engine replayed it."""


def target(test: F) -> F:
    """Decorate a ``@given`` test (above ``@given``): the driver runs it under ``nox -s fuzz``.

    In the suite the test is returned unchanged. Under ``ASYNCTRACE_FUZZ`` the
    test pytest calls takes the same fixtures and runs :func:`drive` with them.
    """
    if not FUZZ:
        return test

    @functools.wraps(test)
    def fuzzed(*args: Any, **kwargs: Any) -> None:
        drive(test, *args, **kwargs)

    return fuzzed  # type: ignore[return-value]


def run(test: Callable[[], None]) -> None:
    """Run a ``@given`` test defined inside another: as usual, or with the driver under fuzz."""
    if FUZZ:
        drive(test)
    else:
        test()


def drive(test: Any, *args: Any, **kwargs: Any) -> None:
    """Run *test*'s body on ``max_examples`` examples drawn from its strategies.

    *args* and *kwargs* are the arguments pytest passes (fixtures); the drawn
    values are passed by name, as ``@given`` passes them. Examples that
    overrun or fail an ``assume`` are drawn again and not counted. With
    ``ASYNCTRACE_FUZZ_SECONDS`` the target stops at that time, with the
    examples it has run.
    """
    budget = test._hypothesis_internal_use_settings.max_examples
    body = test.hypothesis.inner_test
    strategy = st.fixed_dictionaries(test.hypothesis._given_kwargs)
    seed = int.from_bytes(os.urandom(8), "big")
    rng = random.Random(seed)
    valid = invalid = 0
    started = time.perf_counter()
    stop = started + SECONDS if SECONDS is not None else math.inf
    while valid < budget and time.perf_counter() < stop:
        data = ConjectureData(random=rng)
        try:
            with BuildContext(data, wrapped_test=test):
                body(*args, **kwargs, **data.draw(strategy))
        except (StopTest, UnsatisfiedAssumption):
            invalid += 1
            continue
        except BaseException as exc:
            _replay(test, data.choices, args, kwargs)
            blob = encode_failure(data.choices)
            raise FuzzFailure(
                f"example {valid + 1} of seed {seed} failed, but not when replayed;"
                f" drawn: @reproduce_failure({__version__!r}, {blob!r})"
            ) from exc
        valid += 1
    _record(test, valid, budget, invalid, time.perf_counter() - started)


def _replay(test: Any, choices: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Run *test* through the engine on the failing *choices* only: it shrinks and re-raises.

    The example goes in the secondary corpus, as ``fuzz_one_input`` keeps its
    failures: a failure from the primary one is taken as shrunk already.
    """
    database = InMemoryExampleDatabase()
    key = function_digest(test.hypothesis.inner_test) + b".secondary"
    database.save(key, choices_to_bytes(choices))
    own = test._hypothesis_internal_use_settings
    test._hypothesis_internal_use_settings = settings(
        own, database=database, phases=[Phase.reuse, Phase.shrink], print_blob=True
    )
    try:
        test(*args, **kwargs)
    finally:
        test._hypothesis_internal_use_settings = own


def _record(test: Any, examples: int, budget: int, invalid: int, seconds: float) -> None:
    if not REPORT:
        return
    current = os.environ.get("PYTEST_CURRENT_TEST", test.__qualname__)
    line = {
        "target": current.rsplit(" (", 1)[0],
        "examples": examples,
        "budget": budget,
        "invalid": invalid,
        "seconds": round(seconds, 3),
    }
    with open(REPORT, "a", encoding="utf-8") as report:
        report.write(json.dumps(line) + "\n")
