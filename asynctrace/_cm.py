"""A mixin giving a sync context manager its ``async with`` form."""

from __future__ import annotations

from types import TracebackType
from typing import Generic, TypeVar

T = TypeVar("T")


class SyncAndAsync(Generic[T]):
    """``async with`` delegates to ``__enter__``/``__exit__`` (nothing here awaits)."""

    __slots__ = ()

    def __enter__(self) -> T:
        raise NotImplementedError

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        raise NotImplementedError

    async def __aenter__(self) -> T:
        return self.__enter__()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.__exit__(exc_type, exc, tb)
