"""Carriers through environment variables, for subprocesses.

``TRACEPARENT``, ``TRACESTATE`` and, with ``propagate_scopes`` on,
``BAGGAGE``, as the OpenTelemetry environment-carrier convention names them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, MutableMapping
from typing import Final, cast

from ._carriers import (
    BAGGAGE,
    ENV_BAGGAGE,
    ENV_TRACEPARENT,
    ENV_TRACESTATE,
    TRACEPARENT,
    TRACESTATE,
    current_trace_carrier,
)
from ._remote_context import remote_trace_context
from ._state import GATE

__all__ = ["extract_env", "inject_env"]

_ENV_PAIRS: Final = ((ENV_TRACEPARENT, TRACEPARENT), (ENV_TRACESTATE, TRACESTATE))
_ENV_PAIRS_SCOPES: Final = (*_ENV_PAIRS, (ENV_BAGGAGE, BAGGAGE))


def inject_env(env: MutableMapping[str, str] | None = None) -> MutableMapping[str, str]:
    """Put the current trace context into ``TRACEPARENT``/``TRACESTATE`` of *env*.

    *env* defaults to a copy of ``os.environ``. Stale values are removed when
    there is no valid span context, so a child never inherits an old parent.
    With ``propagate_scopes`` on, ``BAGGAGE`` carries the scopes (and is
    removed likewise when there are none); with it off, ``BAGGAGE`` is left
    as it is. Returns *env*, ready for ``subprocess.run(..., env=...)``.

    Example:
        >>> env = inject_env({"PATH": "/usr/bin"})
        >>> "TRACEPARENT" in env
        False
    """
    target: MutableMapping[str, str] = dict(os.environ) if env is None else env
    carrier = current_trace_carrier()
    # BAGGAGE is asynctrace's only with propagate_scopes on; else it is the caller's own
    pairs = _ENV_PAIRS_SCOPES if GATE.propagate_scopes else _ENV_PAIRS
    for env_key, key in pairs:
        if key in carrier:
            target[env_key] = carrier[key]
        else:
            target.pop(env_key, None)
    return target


def extract_env(environ: Mapping[str, str] | None = None) -> remote_trace_context:
    """The trace context carried in ``TRACEPARENT``/``TRACESTATE`` (default ``os.environ``).

    Returns a :class:`remote_trace_context`: ``with extract_env(): ...`` runs
    the block under the parent process's span (and, with ``propagate_scopes``
    on, in the scopes ``BAGGAGE`` carries). Missing or malformed values make
    it a no-op (a value that is not ``str`` is counted, as in any carrier).

    Example:
        >>> with extract_env({}):
        ...     pass
    """
    source = os.environ if environ is None else environ
    carrier: dict[str, object] = {}
    try:
        parent = source.get(ENV_TRACEPARENT)
        state = source.get(ENV_TRACESTATE)
        bag = source.get(ENV_BAGGAGE)
    except Exception:
        parent = state = bag = None
    # Whatever is there goes to the carrier, where a value that is not text is counted
    if parent is not None:
        carrier[TRACEPARENT] = parent
        if state is not None:
            carrier[TRACESTATE] = state
    if bag is not None:
        carrier[BAGGAGE] = bag
    return remote_trace_context(cast("dict[str, str]", carrier))
