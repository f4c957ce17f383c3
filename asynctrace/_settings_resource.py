"""What the environment says of the resource: detected attributes and ``service.name``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._detect import detect_resource

__all__ = ["detected", "env_service_name"]


def detected(env: Mapping[str, str]) -> dict[str, Any]:
    """The environment's resource attributes, less those ``OTEL_RESOURCE_ATTRIBUTES`` sets.

    The SDK's resource merges ``OTEL_RESOURCE_ATTRIBUTES`` under the
    attributes given here, so a detected key it also names is left out for
    its value to win.
    """
    detected = detect_resource(env)
    for item in env.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","):
        key, sep, _ = item.partition("=")
        if sep:  # the SDK skips an entry without "=": it sets nothing, so it takes nothing
            detected.pop(key.strip(), None)
    return detected


def env_service_name(env: Mapping[str, str]) -> str:
    """``OTEL_SERVICE_NAME``, else ``service.name`` of ``OTEL_RESOURCE_ATTRIBUTES`` (or "")."""
    name = env.get("OTEL_SERVICE_NAME", "").strip()
    if name:
        return name
    for item in env.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","):
        key, _, value = item.partition("=")
        if key.strip() == "service.name" and value.strip():
            from urllib.parse import unquote

            return unquote(value.strip())
    return ""
