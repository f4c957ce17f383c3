"""Why ``bind_context(fn)()`` cannot be within 1.5x of ``copy_context().run(fn)``.

Usage: python benchmarks/bind_floor.py

Prints, for this Python, the baseline, asynctrace's ``bind_context``, an
unsafe ``partial(copy_context().run, fn)`` (a second concurrent call raises,
and changes leak from one call into the next) and a Python function that binds
nothing and returns ``fn`` unchanged. Any ``bind_context`` written in Python
costs at least that empty call plus the baseline's own work. A reference
script: it has no target and always exits 0.
"""

from __future__ import annotations

import functools
import platform
import timeit
from collections.abc import Callable
from contextvars import copy_context
from typing import Any

from asynctrace import bind_context


def _fn() -> int:
    return 1


def _unsafe(fn: Callable[[], Any]) -> Callable[[], Any]:
    return functools.partial(copy_context().run, fn)


def _identity(fn: Callable[[], Any]) -> Callable[[], Any]:
    return fn


def _ns(stmt: str, **names: Any) -> float:
    n = 500_000
    return min(timeit.repeat(stmt, globals={**names, "fn": _fn}, number=n, repeat=7)) / n * 1e9


def main() -> None:
    """Print the table."""
    base = _ns("copy().run(fn)", copy=copy_context)
    print(f"python {platform.python_version()}: baseline copy_context().run(fn) {base:.1f} ns")
    for name, bind in [
        ("asynctrace bind_context", bind_context),
        ("partial(ctx.run, fn), unsafe", _unsafe),
        ("python identity (binds nothing)", _identity),
    ]:
        ns = _ns("bind(fn)()", bind=bind)
        print(f"  {name:32s} {ns:6.1f} ns  {ns / base:5.2f}x")
    identity = _ns("bind(fn)()", bind=_identity)
    print(
        f"  lower bound for any Python bind_context: {identity + base:.1f} ns "
        f"(identity + baseline); the 1.5x budget is {1.5 * base:.1f} ns"
    )


if __name__ == "__main__":
    main()
