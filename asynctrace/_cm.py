"""Context-manager helpers: a sync context manager's ``async with`` form, and
OpenTelemetry's context manager that is also a decorator."""

from __future__ import annotations

from collections.abc import Generator
from types import TracebackType
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

try:  # the API's decorator-and-context-manager helper (opentelemetry-api 1.24+)
    from opentelemetry.util._decorator import _agnosticcontextmanager as otel_contextmanager
except ImportError:  # pragma: no cover - older opentelemetry-api
    from contextlib import contextmanager as otel_contextmanager  # type: ignore[assignment]

__all__ = ["DONE", "Done", "SyncAndAsync", "otel_contextmanager"]

T = TypeVar("T")


class Done(tuple[()]):
    """An empty tuple that is also an awaitable finishing at once with ``None``.

    A sync ``__exit__`` that returns :data:`DONE` serves as ``__aexit__`` too:
    called by ``with``, its result is false (the exception, if any, goes on);
    awaited by ``async with``, it finishes at once with ``None`` (false again)
    without a coroutine or a frame of its own: ``__await__`` is the tuple's
    iterator, which is empty.
    """

    __slots__ = ()

    if TYPE_CHECKING:

        def __await__(self) -> Generator[Any, None, None]: ...

    else:
        __await__ = tuple.__iter__


DONE: Final = Done()


class SyncAndAsync(Generic[T]):
    """``async with`` delegates to ``__enter__``/``__exit__`` (nothing here awaits).

    A subclass on a hot path may return :data:`DONE` from ``__exit__`` and set
    ``__aexit__ = __exit__``, which saves a coroutine and a frame per exit.
    """

    __slots__ = ()

    def __enter__(self) -> T:
        raise NotImplementedError

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Any:
        raise NotImplementedError

    async def __aenter__(self) -> T:
        return self.__enter__()

    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Done:
        self.__exit__(exc_type, exc, tb)
        return DONE
