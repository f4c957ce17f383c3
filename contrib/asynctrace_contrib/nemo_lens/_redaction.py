"""lens's attribute rule: what a span may hold, and which values are recorded redacted."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Final

from opentelemetry import trace

import asynctrace

__all__ = ["DEFAULT_REDACT_KEYS", "clean", "redact_value", "safe_set_span_attributes"]

DEFAULT_REDACT_KEYS: frozenset[str] = frozenset(
    {"prompt", "input_text", "output_text", "text", "password", "token", "secret", "key"}
)
"""Attributes under these keys are recorded as ``"[REDACTED]"``, whatever their type.

A key is listed when it, or its trailing words, is one of these, compared
case-insensitively with ``.``, ``_``, ``-`` and camelCase as word breaks:
``token``, ``access_token``, ``OPENAI_API_KEY``, ``apiKey`` and
``gen_ai.prompt`` are; ``max_tokens``, ``prompt_len`` and ``context`` are not.
"""

_REDACTED: Final = "[REDACTED]"  # what any value under a listed key becomes (lens's marker)

_SCALARS = (bool, int, float, str)


# Word breaks of an attribute key: any run of non-alphanumerics, and camelCase
# ("apiKey", "HTTPToken").
def _redacts(key: object, redact_keys: Collection[str]) -> bool:
    # OpenTelemetry drops a key that is not a str; a listed key's rule is asynctrace's,
    # and asynctrace's own credential names (authorization, cookie, passwd, ...) count too.
    return isinstance(key, str) and (
        asynctrace.is_credential_key(key, redact_keys) or asynctrace.is_credential_key(key)
    )


def _scrubbed_text(text: str) -> str:
    """*text* redacted as asynctrace redacts text when it holds a URL (its userinfo, a
    secret query value) or is an ``Authorization`` value (``Bearer ...``); any other text
    as it is: a value such as ``"max_new_tokens=64, temperature=0.7"`` is data."""
    if "://" in text or text[:7].lower() == "bearer " or text[:6].lower() == "basic ":
        return asynctrace.redact_text(text)
    return text


def _scrubbed(value: Any) -> Any:
    """*value* with credentials inside its text redacted (:func:`_scrubbed_text`); a
    list's strings each."""
    if isinstance(value, str):
        return _scrubbed_text(value)
    if isinstance(value, list | tuple):
        return [_scrubbed_text(v) if isinstance(v, str) else v for v in value]
    return value


def redact_value(key: str, value: str, redact_keys: frozenset[str] = DEFAULT_REDACT_KEYS) -> str:
    """``"[REDACTED]"`` if *key* is listed, else *value* with its credentials redacted.

    Listed is :data:`DEFAULT_REDACT_KEYS`'s rule: the key or its trailing
    words, case-insensitively, in *redact_keys* or asynctrace's credential
    names (``authorization``, ``cookie``, ``passwd``, ``credentials``, ...).
    Another string holding a URL, or a ``Bearer``/``Basic`` value, goes
    through :func:`asynctrace.redact_text` (URL userinfo, a secret query
    value, the credential); any other text is recorded as it is.

    Example:
        >>> redact_value("prompt", "hello"), redact_value("OPENAI_API_KEY", "sk-1")
        ('[REDACTED]', '[REDACTED]')
        >>> redact_value("max_tokens", "8")
        '8'
    """
    if _redacts(key, redact_keys):
        return _REDACTED
    return _scrubbed_text(value) if isinstance(value, str) else value


def clean(
    attributes: Mapping[str, Any], redact_keys: Collection[str] = DEFAULT_REDACT_KEYS
) -> dict[str, Any]:
    """lens's attribute rule: scalars and scalar lists, ``None`` skipped, keys redacted.

    A value under a listed key, or under one of asynctrace's credential names
    (:func:`asynctrace.is_credential_key`), is recorded as ``"[REDACTED]"``
    whatever its type: a batch of prompts or a numeric secret is as secret as
    one string. Another string holding a URL, or a ``Bearer``/``Basic`` value,
    goes through :func:`asynctrace.redact_text` (:func:`_scrubbed_text`); any
    other text is recorded as it is.
    """
    out: dict[str, Any] = {}
    for key, value in attributes.items():
        if value is None:
            continue
        if _redacts(key, redact_keys):
            out[key] = _REDACTED
        elif isinstance(value, _SCALARS) or (
            isinstance(value, list | tuple) and all(isinstance(v, _SCALARS) for v in value)
        ):
            out[key] = _scrubbed(value)
    return out


def safe_set_span_attributes(
    span: trace.Span,
    attributes: Mapping[str, Any],
    redact_keys: frozenset[str] = DEFAULT_REDACT_KEYS,
) -> None:
    """Set *attributes* on *span*, skipping what OpenTelemetry cannot hold, redacting keys.

    ``None`` values are skipped, as are values that are neither a scalar
    nor a list or tuple of scalars. A non-``None`` value under a key listed
    in *redact_keys* (:data:`DEFAULT_REDACT_KEYS`'s rule) or under one of
    asynctrace's credential names is set as the string ``"[REDACTED]"``,
    whatever its type. Another string holding a URL, or a ``Bearer``/``Basic``
    value, goes through :func:`asynctrace.redact_text`; any other text (a
    ``"password=..."`` note under an ordinary key included) is recorded as it is.

    Example:
        >>> safe_set_span_attributes(trace.INVALID_SPAN, {"n": 1, "skip": None})
    """
    if not span.is_recording():
        return
    for key, value in clean(attributes, redact_keys).items():
        span.set_attribute(key, value)
