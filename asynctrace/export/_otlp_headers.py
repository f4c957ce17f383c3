"""The OTLP headers variable, parsed as OpenTelemetry parses it and checked per transport."""

from __future__ import annotations

import re
from urllib.parse import unquote

from .._redact import redact_text
from .._secret_words import REDACTED
from ._otlp_vars import refuse

__all__ = ["check_headers", "parse_headers"]

# OpenTelemetry's parsing of ..._HEADERS (opentelemetry.util.re): URL-encoded items, else
# (liberal) items taken as they are; an item matching neither is logged and left out.
_OWS = r"[ \t]*"
_KEY = r"[\x21\x23-\x27\x2a\x2b\x2d\x2e\x30-\x39\x41-\x5a\x5e-\x7a\x7c\x7e]+"
_ENCODED_ITEM = re.compile(
    rf"{_OWS}{_KEY}{_OWS}={_OWS}[\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*{_OWS}"
)
_LIBERAL_ITEM = re.compile(
    rf"{_OWS}{_KEY}{_OWS}={_OWS}[\x20\x21\x23-\x2b\x2d-\x3a\x3c-\x5b\x5d-\x7e]*{_OWS}"
)
_ITEM_SEPARATOR = re.compile(r"[ \t]*,[ \t]*")
_HTTP_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an RFC 9110 token
_HTTP_VALUE = re.compile(r"[^\x00-\x08\x0a-\x1f\x7f]*")  # no control character but tab
_GRPC_NAME = re.compile(r"[0-9a-z_.\-]+")
_GRPC_VALUE = re.compile(r"[\x20-\x7e]*")


def parse_headers(text: str) -> list[tuple[str, str]]:
    """*text* parsed as OpenTelemetry's ``parse_env_headers(text, liberal=True)`` does."""
    parsed = []
    for item in _ITEM_SEPARATOR.split(text):
        item = item.strip()
        if not item:
            continue
        if _ENCODED_ITEM.fullmatch(item):
            name, _, value = item.partition("=")
            parsed.append((unquote(name).strip().lower(), unquote(value).strip()))
        elif _LIBERAL_ITEM.fullmatch(item):
            name, _, value = item.partition("=")
            parsed.append((name.strip().lower(), value.strip()))
        # anything else OpenTelemetry logs (redacted) and leaves out
    return parsed


def check_headers(key: str, text: str, *, grpc: bool) -> None:
    """Each header of *text* must be one a request can carry: else every request would fail."""
    for name, value in parse_headers(text):
        shown = redact_text(f"{name}={REDACTED}")
        if grpc:
            if not _GRPC_NAME.fullmatch(name) or name.endswith("-bin"):
                raise refuse(
                    key,
                    shown,
                    "has a header name gRPC metadata cannot carry here",
                    "lower-case names of letters, digits, '-', '_' and '.', not ending in "
                    "'-bin' (binary metadata cannot be given as text)",
                )
            if not _GRPC_VALUE.fullmatch(value):
                raise refuse(
                    key,
                    shown,
                    "has a header value gRPC metadata cannot carry (a line break, tab, other "
                    "control character or non-ASCII character, once URL-decoded)",
                    "printable ASCII values; URL-encode only what the variable's syntax needs",
                )
            continue
        if not _HTTP_NAME.fullmatch(name):
            raise refuse(
                key,
                shown,
                "has a header name HTTP cannot carry",
                "names of letters, digits and !#$%&'*+-.^_`|~",
            )
        if not _HTTP_VALUE.fullmatch(value) or not _latin1(value):
            raise refuse(
                key,
                shown,
                "has a header value HTTP cannot carry (a line break or other control "
                "character, or a character outside Latin-1, once URL-decoded)",
                "Latin-1 values without control characters (tab aside)",
            )


def _latin1(value: str) -> bool:
    try:
        value.encode("latin-1")
    except UnicodeEncodeError:
        return False
    return True
