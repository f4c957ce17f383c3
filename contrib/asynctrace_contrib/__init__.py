"""Integrations for asynctrace (aiohttp client, FastAPI/ASGI server).

Each integration is a submodule with its own extra; importing this package
imports none of them.
"""

from __future__ import annotations

__all__: list[str] = []
