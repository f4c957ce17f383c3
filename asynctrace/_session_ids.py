"""Session ids: the process-wide counter, the process nonce, the ids made with the tracer off.

A session id is a prefix that tells this process from every other one, then a
number. The tracer's prefix carries the rank; an id made while no session
tracer runs (spans are stamped the same way) starts with ``u``. Both carry the
pid and the process nonce, drawn again in a forked child.
"""

from __future__ import annotations

import itertools
import os

__all__ = ["next_session_number", "process_nonce", "untracked_id"]

next_session_number = itertools.count(1).__next__
"""The numbers of the tracer's session ids: process-wide, so a reconfigured tracer never
reuses an id."""

# With the pid, what tells this process's session ids from another's: 64 random
# bits, since many processes of a run may share a rank and a pid (Ray actors
# left at rank 0, each its container's pid 1). A forked child draws its own: it
# inherits the parent's counter, and a pid freed by one child may be given to
# the next.
_NONCE_BYTES = 8
_nonce = (os.getpid(), os.urandom(_NONCE_BYTES).hex())


def process_nonce() -> str:
    """This process's nonce, drawn again in a forked child (read when ids get a prefix)."""
    global _nonce
    if _nonce[0] != os.getpid():
        _nonce = (os.getpid(), os.urandom(_NONCE_BYTES).hex())
    return _nonce[1]


_untracked = itertools.count(1).__next__
_untracked_prefix = f"u{os.getpid():x}{process_nonce()}-"  # again in a child


def untracked_id() -> str:
    """A new session id, made while no session tracer runs."""
    return _untracked_prefix + str(_untracked())


def _new_untracked_prefix() -> None:
    global _untracked_prefix
    _untracked_prefix = f"u{os.getpid():x}{process_nonce()}-"


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_new_untracked_prefix)
