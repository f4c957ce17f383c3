"""Scopes: set for a block and reset by token, all in one ContextVar.

Every span reads every scope, so they live together in one immutable
:class:`ScopeState` behind one ContextVar: a span pays one ContextVar read
instead of five (each read after a context change is a lookup), and the
state carries the scope stamps ready-made, with a small cache of finished
attribute sets per group. Each concern keeps its own handle
(:data:`ITERATION`, :data:`BUCKET`, ...) with ``get``/``set``/``reset``;
``set`` installs a copy of the state with that one field changed.
"""

from __future__ import annotations

import operator
import os
import sys
from contextvars import ContextVar, Token
from types import TracebackType
from typing import Any, Final, Generic, TypeVar

from ._cm import DONE, Done, SyncAndAsync
from ._errors import ConfigurationError
from ._group_types import Bucket, validate_bucket
from ._semconv import RL_ITERATION, RL_SESSION_ID, RL_TASK_ID
from ._session_names import redacted_name

__all__ = [
    "bucket_scope",
    "current_bucket",
    "current_iteration",
    "in_per_prompt_scope",
    "iteration_scope",
    "per_prompt_scope",
]

T = TypeVar("T")


class ScopeState:
    """The scopes in effect: immutable; a scope entry installs a modified copy.

    ``stamps`` holds the ``rl.iteration`` / ``rl.task_id`` / ``rl.session_id``
    attributes in that order; ``cache`` is for :mod:`asynctrace._span_start` (the
    finished attributes of a span shape, per group).
    """

    __slots__ = (
        "_key",
        "_stamps",
        "_under_bucket",
        "_under_iteration",
        "_under_per_prompt",
        "_under_session_id",
        "_under_task_id",
        "bucket",
        "cache",
        "iteration",
        "per_prompt",
        "session_id",
        "task_id",
    )
    # Set by a scope's entry on the state it installs, never in __init__ (so a state
    # costs nothing more to make): the state it was entered on, in the slot of its
    # field. Read only when scopes exit out of order (see leave).
    _under_bucket: ScopeState
    _under_per_prompt: ScopeState
    _under_iteration: ScopeState
    _under_task_id: ScopeState
    _under_session_id: ScopeState
    _key: ScopeState  # on a stand-in state (see leave): the entry's own state

    def __init__(
        self,
        bucket: Bucket | None = None,
        per_prompt: bool = False,
        iteration: int | None = None,
        task_id: int | str | None = None,
        session_id: str | None = None,
    ) -> None:
        self.bucket = bucket
        self.per_prompt = per_prompt
        self.iteration = iteration
        self.task_id = task_id
        self.session_id = session_id
        self._stamps: dict[str, Any] | None = None  # made when a span first needs them
        self.cache: dict[Any, Any] = {}

    @property
    def stamps(self) -> dict[str, Any]:
        """``rl.iteration`` / ``rl.task_id`` / ``rl.session_id``, in that order (do not change)."""
        stamps = self._stamps
        if stamps is None:
            stamps = {}
            if self.iteration is not None:
                stamps[RL_ITERATION] = self.iteration
            task_id = self.task_id
            if isinstance(task_id, str):  # a text id is redacted as a session record's is
                task_id = redacted_name(task_id)
            if task_id is not None:
                stamps[RL_TASK_ID] = task_id
            if self.session_id is not None:
                stamps[RL_SESSION_ID] = self.session_id
            self._stamps = stamps
        return stamps

    def replace(self, field: str, value: Any) -> ScopeState:
        """A copy with *field* set to *value* (positional: this runs per scope entry)."""
        bucket, per_prompt, iteration = self.bucket, self.per_prompt, self.iteration
        task_id, session_id = self.task_id, self.session_id
        if field == "session_id":
            session_id = value
        elif field == "task_id":
            task_id = value
        elif field == "iteration":
            iteration = value
        elif field == "bucket":
            bucket = value
        elif field == "per_prompt":
            per_prompt = value
        else:
            raise AttributeError(f"ScopeState has no field {field!r}")
        return ScopeState(bucket, per_prompt, iteration, task_id, session_id)


# The default is never replaced in place (only its stamps cache fills up, which is shared
# on purpose): one empty state for every context that set no scope.
SCOPES: ContextVar[ScopeState] = ContextVar("asynctrace.scopes", default=ScopeState())  # noqa: B039


_EMPTY = SCOPES.get()


def leave(field: str, token: Token[ScopeState], state: ScopeState) -> None:
    """Undo the entry of one scope that set *field* (and installed *state*).

    When it is the innermost scope (the usual case: ``with`` blocks nest),
    the state before it is put back by *token*, exactly. Exited out of order
    (scopes entered and exited by hand), the scopes entered after it keep
    their values: each field holds the value of the latest scope of that field
    still open, or, with none open, the value it had before the first.
    Exited in another context than the one it was entered in (a copy of it, a
    generator resumed elsewhere), its field goes back there only if it still
    holds this scope's value: one that context set for itself is not this
    scope's to undo.
    """
    current = SCOPES.get()
    try:
        SCOPES.reset(token)
    except ValueError:  # a token of another context
        if getattr(current, field) != getattr(state, field):
            return
        old = token.old_value
        SCOPES.set(
            current.replace(field, getattr(old if isinstance(old, ScopeState) else _EMPTY, field))
        )
        return
    if current is not state:  # not the innermost: reset put back a state from before it
        _leave_out_of_order(field, token, state, current)


_UNDER: Final = tuple(
    (name, "_under_" + name)
    for name in ("bucket", "per_prompt", "iteration", "task_id", "session_id")
)


def _link(state: ScopeState) -> tuple[str, ScopeState] | None:
    """The field a scope's entry installed *state* for, and the state it was entered on."""
    for name, slot in _UNDER:
        under: ScopeState | None = getattr(state, slot, None)
        if under is not None:
            return name, under
    return None


def _stand_in(fresh: ScopeState, state: ScopeState) -> ScopeState:
    """Make *fresh* take the place of *state* in the chain of open entries."""
    link = _link(state)
    if link is not None:
        setattr(fresh, "_under_" + link[0], link[1])
        fresh._key = getattr(state, "_key", state)
    return fresh


def _value_under(field: str, state: ScopeState) -> Any:
    """*field* as the open entries from *state* down set it: the latest one of that field,
    or what it was before them all."""
    while (link := _link(state)) is not None and link[0] != field:
        state = link[1]
    return getattr(state, field)


def _leave_out_of_order(
    field: str, token: Token[ScopeState], state: ScopeState, current: ScopeState
) -> None:
    """:func:`leave` of a scope that is not the innermost (its token was reset already).

    The entries still open form a chain from the current state down (each
    entry's state points to the one it was entered on; a state put in place of
    an entry's keeps the entry's link). This entry is cut out of the chain; its
    field goes back to what the entries below it set, unless an entry of the
    same field entered after it is still open. A new state is installed either
    way, so no entry left open is the innermost by identity any more: each one
    exits here too, and never puts back a state holding this entry's value.
    """
    above: ScopeState | None = None
    later = False
    node = current
    while getattr(node, "_key", node) is not state:
        link = _link(node)
        if link is None:  # an entry made without a link (a carrier's, say): by value
            _leave_unlinked(field, token, state, current)
            return
        later = later or link[0] == field
        above, node = node, link[1]
    own = _link(node)
    if own is None:
        _leave_unlinked(field, token, state, current)
        return
    under = own[1]
    if above is not None:
        link = _link(above)
        assert link is not None
        setattr(above, "_under_" + link[0], under)  # cut this entry out
        top = current
    else:  # the innermost after all (a state stands in for its own): the one below takes over
        top = under
    value = getattr(current, field) if later else _value_under(field, under)
    SCOPES.set(_stand_in(current.replace(field, value), top))


def _leave_unlinked(
    field: str, token: Token[ScopeState], state: ScopeState, current: ScopeState
) -> None:
    """Out of order, without a chain to follow: the field goes back only if it
    still holds this scope's value."""
    value = getattr(current, field)
    if value == getattr(state, field):
        old = token.old_value
        value = getattr(old if isinstance(old, ScopeState) else _EMPTY, field)
    SCOPES.set(_stand_in(current.replace(field, value), current))


_FIELDS = ("bucket", "per_prompt", "iteration", "task_id", "session_id")


def leave_all(token: Token[ScopeState], state: ScopeState) -> None:
    """Undo an entry that installed *state* whole (a carrier's scopes, say).

    By token when it is the innermost; otherwise every field that the entry
    changed goes back to what it was, and the rest stays as later entries left
    it. In another context than its own, only the fields that still hold this
    entry's values go back (as :func:`leave`).
    """
    current = SCOPES.get()
    foreign = False
    try:
        SCOPES.reset(token)
    except ValueError:  # a token of another context
        foreign = True
    else:
        if current is state:
            return
    old = token.old_value
    before = old if isinstance(old, ScopeState) else _EMPTY
    for name in _FIELDS:
        if foreign and getattr(current, name) != getattr(state, name):
            continue
        if getattr(state, name) != getattr(before, name):
            current = current.replace(name, getattr(before, name))
    SCOPES.set(current)


class ScopeField(Generic[T]):
    """One concern of :class:`ScopeState`, used like a ContextVar of its own."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def get(self) -> T:
        """The value in the current context."""
        value: T = getattr(SCOPES.get(), self.name)
        return value

    def set(self, value: T) -> Token[ScopeState]:
        """Set it in the current context (for a context that is thrown away after)."""
        return SCOPES.set(SCOPES.get().replace(self.name, value))


BUCKET: ScopeField[Bucket | None] = ScopeField("bucket")
PER_PROMPT: ScopeField[bool] = ScopeField("per_prompt")
ITERATION: ScopeField[int | None] = ScopeField("iteration")
TASK_ID: ScopeField[int | str | None] = ScopeField("task_id")
SESSION_ID: ScopeField[str | None] = ScopeField("session_id")


class _Scope(SyncAndAsync[T]):
    """Sets one ContextVar on enter and resets it by token on exit.

    Usable with ``with`` and ``async with``; each scope object is single-use
    per entry, so a token never outlives the block that set it.
    """

    __slots__ = ("_state", "_token", "_value")
    _var: ScopeField[Any]

    def __init__(self, value: T) -> None:
        self._value = value
        self._token: Token[ScopeState] | None = None
        self._state: Any = None  # the ScopeState it installed, once entered

    def __enter__(self) -> T:
        if self._token is not None:
            raise RuntimeError(f"{type(self).__name__} is already entered")
        under = SCOPES.get()
        name = self._var.name
        state = self._state = under.replace(name, self._value)
        setattr(state, "_under_" + name, under)  # see leave
        self._token = SCOPES.set(state)
        return self._value

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Done:
        token, self._token = self._token, None
        if token is not None:  # entered: _state is set too
            leave(self._var.name, token, self._state)
        return DONE

    __aexit__ = __exit__  # type: ignore[assignment]  # DONE: awaited, it finishes at once


class bucket_scope(_Scope[Bucket]):
    """Tag every leaf span opened inside with *bucket* instead of its group's.

    Umbrella spans stay unbucketed, an explicit ``bucket=`` argument wins, and
    efficiency spans keep their category's bucket.

    Raises:
        ConfigurationError: *bucket* is not a :class:`Bucket`.

    Example:
        >>> with bucket_scope(Bucket.OVERHEAD):
        ...     pass  # validation work charged to overhead
    """

    __slots__ = ()
    _var = BUCKET

    def __init__(self, bucket: Bucket) -> None:
        validated = validate_bucket(bucket, "bucket_scope(bucket)")
        assert validated is not None
        super().__init__(validated)

    def __enter__(self) -> Bucket:
        if self._token is not None:
            raise RuntimeError("bucket_scope is already entered")
        under = SCOPES.get()  # ScopeState.replace, inline
        self._state = state = ScopeState(
            self._value, under.per_prompt, under.iteration, under.task_id, under.session_id
        )
        state._under_bucket = under  # see leave
        self._token = SCOPES.set(state)
        return self._value


class per_prompt_scope(_Scope[bool]):
    """Declare a region whose spans are emitted once per item (prompt).

    Inside it every span is gated on the ``per_prompt`` group instead of its
    own and carries no bucket: per-item work overlaps, so its durations would
    sum past the wall clock.

    Example:
        >>> with per_prompt_scope():
        ...     assert in_per_prompt_scope()
    """

    __slots__ = ()
    _var = PER_PROMPT

    def __init__(self) -> None:
        self._value = True  # _Scope.__init__, inline: this runs once per item
        self._token = None
        self._state = None

    def __enter__(self) -> bool:
        if self._token is not None:
            raise RuntimeError("per_prompt_scope is already entered")
        under = SCOPES.get()  # ScopeState.replace, inline
        self._state = state = ScopeState(
            under.bucket, True, under.iteration, under.task_id, under.session_id
        )
        state._under_per_prompt = under  # see leave
        self._token = SCOPES.set(state)
        return True


class iteration_scope(_Scope[int]):
    """Stamp ``rl.iteration = step`` on every span started inside.

    A span that passes its own ``rl.iteration`` attribute keeps its value.

    Raises:
        ConfigurationError: *step* is not an int.

    Example:
        >>> with iteration_scope(7):
        ...     assert current_iteration() == 7
    """

    __slots__ = ()
    _var = ITERATION

    def __init__(self, step: int) -> None:
        super().__init__(step if step.__class__ is int and _INT64_MIN <= step <= _INT64_MAX
                         else check_step(step, "iteration_scope(step)"))  # fmt: skip

    def __enter__(self) -> int:
        if self._token is not None:
            raise RuntimeError("iteration_scope is already entered")
        under = SCOPES.get()  # ScopeState.replace, inline
        self._state = state = ScopeState(
            under.bucket, under.per_prompt, self._value, under.task_id, under.session_id
        )
        state._under_iteration = under  # see leave
        self._token = SCOPES.set(state)
        return self._value


# What a step, an iteration or an integer task id may be: a 64-bit attribute.
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def check_step(value: object, where: str, *, least: int = _INT64_MIN) -> int:
    """*value* as a plain int: any integer (a numpy one, an ``IntEnum``) from *least*
    up to what a 64-bit attribute holds; ``ConfigurationError`` naming *where* otherwise."""
    if not isinstance(value, bool):
        try:
            number = operator.index(value)  # type: ignore[arg-type]
        except TypeError:
            pass
        else:
            if least <= number <= _INT64_MAX:
                return number
    raise ConfigurationError(f"{where}: expected an int from {least} to 2**63 - 1, got {value!r}")


def in_per_prompt_scope() -> bool:
    """Whether the caller runs inside :class:`per_prompt_scope`.

    Lets a shared client (a data-plane client, say) pick its gating.

    Example:
        >>> in_per_prompt_scope()
        False
    """
    return PER_PROMPT.get()


def current_iteration() -> int | None:
    """The step set by the innermost :class:`iteration_scope`, if any.

    Example:
        >>> current_iteration() is None
        True
    """
    return ITERATION.get()


def current_bucket() -> Bucket | None:
    """The bucket set by the innermost :class:`bucket_scope`, if any.

    Example:
        >>> current_bucket() is None
        True
    """
    return BUCKET.get()


def _no_scopes_in_child(_: object) -> None:
    """In a process multiprocessing started by forking: none of the forking caller's scopes.

    Such a process (a pool's worker, started from whichever call first needed
    it) starts with no scope, as a spawned one does: a call's scopes travel
    with the call (see ``context_executor``). A bare ``os.fork()`` child runs
    on in the same code and keeps them: multiprocessing runs this hook only in
    the processes it starts.
    """
    SCOPES.set(_EMPTY)


_registered_with_multiprocessing = False


def _before_fork() -> None:
    """Register :func:`_no_scopes_in_child` with multiprocessing once it is in use.

    Before every fork, so that a process multiprocessing forks inherits it;
    lazily, so that importing asynctrace does not import multiprocessing.
    """
    global _registered_with_multiprocessing
    if not _registered_with_multiprocessing:
        util = sys.modules.get("multiprocessing.util")
        if util is not None:
            util.register_after_fork(_no_scopes_in_child, _no_scopes_in_child)
            _registered_with_multiprocessing = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork)
