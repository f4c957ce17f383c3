"""A websocket handshake's outcome, for the server tests."""

from __future__ import annotations

import asyncio

import aiohttp


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
