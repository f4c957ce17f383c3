"""What the server tests share: a websocket handshake's outcome, a span the server ends late."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp

from asynctrace.testing import CapturedSpans


def handshake_status(url: str) -> int:
    """101 if the server accepts the websocket at *url*, else the HTTP status it refused with."""

    async def main() -> int:
        async with aiohttp.ClientSession() as session:
            try:
                async with session.ws_connect(url):
                    return 101
            except aiohttp.WSServerHandshakeError as exc:
                return exc.status

    return asyncio.run(main())


def wait_for(captured: CapturedSpans, name: str, count: int = 1) -> list[Any]:
    """The spans called *name* once *count* have ended (the server ends its span late)."""
    deadline = time.monotonic() + 10
    while len(captured.by_name(name)) < count and time.monotonic() < deadline:
        time.sleep(0.01)
    return captured.by_name(name)
