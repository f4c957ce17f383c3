"""Context-manager helpers: a sync context manager's ``async with`` form, and
OpenTelemetry's context manager that is also a decorator."""

from __future__ import annotations

from types import TracebackType
from typing import Generic, TypeVar

try:  # the API's decorator-and-context-manager helper (opentelemetry-api 1.24+)
    from opentelemetry.util._decorator import _agnosticcontextmanager as otel_contextmanager
except ImportError:  # pragma: no cover - older opentelemetry-api
    from contextlib import contextmanager as otel_contextmanager  # type: ignore[assignment]

__all__ = ["SyncAndAsync", "otel_contextmanager"]

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
