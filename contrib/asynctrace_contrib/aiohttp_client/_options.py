"""What one trace config records, checked when made, and its user callables run safely."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from typing import Any

from opentelemetry.trace import Span

import asynctrace
from asynctrace_contrib._http import DEFAULT_SECRET_KEYS, SecretKeys, callable_option, names_option

__all__ = ["Options", "RequestHook", "custom_name", "run_hook"]

logger = logging.getLogger("asynctrace")

RequestHook = Callable[[Span, Any], None]


class Options:
    """What one trace config records."""

    __slots__ = (
        "plain",
        "record_request_headers",
        "record_response_headers",
        "request_hook",
        "response_hook",
        "secret_keys",
        "span_name",
        "warned",
    )

    def __init__(
        self,
        *,
        span_name: Callable[[str, Any], str] | None = None,
        secret_keys: Iterable[str] = DEFAULT_SECRET_KEYS,
        record_request_headers: Iterable[str] = (),
        record_response_headers: Iterable[str] = (),
        request_hook: RequestHook | None = None,
        response_hook: RequestHook | None = None,
    ) -> None:
        callable_option("span_name", span_name, "(method, request) -> str")
        callable_option("request_hook", request_hook, "(span, request) -> None")
        callable_option("response_hook", response_hook, "(span, request) -> None")
        self.span_name = span_name
        self.secret_keys = SecretKeys(names_option("secret_keys", secret_keys, "query keys"))
        # An exception raised after the span ended (raise_for_status(), json()'s
        # ContentTypeError) names the URL too, and is recorded by spans that never
        # knew this request: its secret keys are secret-like names everywhere.
        try:
            asynctrace.register_secret_words(self.secret_keys)
        except asynctrace.ConfigurationError as error:  # too many words in the process
            raise asynctrace.ConfigurationError(f"secret_keys: {error}") from None
        self.record_request_headers = names_option(
            "record_request_headers", record_request_headers, "header names"
        )
        self.record_response_headers = names_option(
            "record_response_headers", record_response_headers, "header names"
        )
        self.request_hook = request_hook
        self.response_hook = response_hook
        self.warned: set[str] = set()
        # Nothing per request before the span starts: no custom name, no headers recorded.
        self.plain = span_name is None and not self.record_request_headers


def run_hook(options: Options, name: str, hook: RequestHook, span: Span, params: Any) -> None:
    """Call a user hook; a failure is logged once per hook of this config, never raised."""
    try:
        hook(span, params)
    except Exception:
        if name not in options.warned:
            options.warned.add(name)
            logger.warning("asynctrace: the aiohttp %s raised; ignored", name, exc_info=True)


def custom_name(
    options: Options, span_name: Callable[[str, Any], str], default: str, method: str, params: Any
) -> str:
    """*span_name*'s name for the request, or *default* if it raises or returns no str.

    Either is logged once per trace config, never raised.
    """
    try:
        name = span_name(method, params)
    except Exception:
        if "span_name" not in options.warned:
            options.warned.add("span_name")
            logger.warning(
                "asynctrace: the aiohttp span_name raised; using the default name", exc_info=True
            )
        return default
    if type(name) is str:
        return name
    if "span_name result" not in options.warned:
        options.warned.add("span_name result")
        logger.warning(
            "asynctrace: the aiohttp span_name returned a %s, not a str; using the default name",
            type(name).__name__,
        )
    return default
