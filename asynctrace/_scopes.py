"""Scopes: one ContextVar per concern, set for a block and reset by token."""

from __future__ import annotations

from contextvars import ContextVar, Token
from types import TracebackType
from typing import Any, TypeVar

from ._cm import SyncAndAsync
from ._errors import ConfigurationError
from ._groups import Bucket, validate_bucket

__all__ = [
    "bucket_scope",
    "current_bucket",
    "current_iteration",
    "in_per_prompt_scope",
    "iteration_scope",
    "per_prompt_scope",
]

BUCKET: ContextVar[Bucket | None] = ContextVar("asynctrace.bucket", default=None)
PER_PROMPT: ContextVar[bool] = ContextVar("asynctrace.per_prompt", default=False)
ITERATION: ContextVar[int | None] = ContextVar("asynctrace.iteration", default=None)
TASK_ID: ContextVar[int | str | None] = ContextVar("asynctrace.task_id", default=None)
SESSION_ID: ContextVar[str | None] = ContextVar("asynctrace.session_id", default=None)

T = TypeVar("T")


class _Scope(SyncAndAsync[T]):
    """Sets one ContextVar on enter and resets it by token on exit.

    Usable with ``with`` and ``async with``; each scope object is single-use
    per entry, so a token never outlives the block that set it.
    """

    __slots__ = ("_token", "_value")
    _var: ContextVar[Any]

    def __init__(self, value: T) -> None:
        self._value = value
        self._token: Token[T] | None = None

    def __enter__(self) -> T:
        if self._token is not None:
            raise RuntimeError(f"{type(self).__name__} is already entered")
        self._token = self._var.set(self._value)
        return self._value

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        token, self._token = self._token, None
        if token is not None:
            self._var.reset(token)


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
        super().__init__(True)


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
        if not isinstance(step, int) or isinstance(step, bool):
            raise ConfigurationError(f"iteration_scope(step): expected an int, got {step!r}")
        super().__init__(step)


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
