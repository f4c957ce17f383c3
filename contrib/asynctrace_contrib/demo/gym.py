"""A Gym-style environment server: FastAPI on uvicorn, instrumented with asynctrace.

It scores "rollouts" with a small CPU computation. Failures are injected
deterministically, so a test can predict every session's status:
:func:`fails` says whether an attempt of a prompt fails.
"""

from __future__ import annotations

import asyncio
import hashlib
import socket
import threading
from typing import Any

import asynctrace as at
from asynctrace_contrib.fastapi import instrument_fastapi

__all__ = ["GymServer", "fails", "make_app"]


def fails(prompt_id: int, attempt: int) -> bool:
    """Whether the Gym rejects this attempt (500): a first try of every 5th prompt
    fails and is retried; every 13th prompt fails on every attempt.

    Example:
        >>> fails(3, 0), fails(3, 1), fails(13, 2)
        (True, False, True)
    """
    return (prompt_id % 5 == 3 and attempt == 0) or prompt_id % 13 == 0


def _score(tokens: list[int], rounds: int = 400) -> float:
    digest = repr(tokens).encode()
    for _ in range(rounds):  # a little real CPU work, a fraction of a millisecond
        digest = hashlib.sha256(digest).digest()
    return digest[0] / 255.0


def make_app() -> Any:
    """The FastAPI app: ``POST /score`` and ``GET /healthz``, instrumented."""
    from fastapi import FastAPI, HTTPException

    app = FastAPI(title="demo gym")

    @app.get("/healthz")
    async def healthz() -> dict[str, bool]:
        return {"ok": True}

    @app.post("/score/{prompt_id}")
    async def score(prompt_id: int, payload: dict[str, Any]) -> dict[str, Any]:
        attempt = int(payload.get("attempt", 0))
        # One request per prompt attempt: per-item work that overlaps, so it is
        # gated on per_prompt and unbucketed, like the client's side of it.
        with (
            at.per_prompt_scope(),
            at.managed_span("reward", "gym.score", attributes={"gym.prompt_id": prompt_id}),
        ):
            if fails(prompt_id, attempt):
                raise HTTPException(status_code=500, detail="environment error")
            reward = _score(list(payload.get("tokens", [])))
        return {"prompt_id": prompt_id, "reward": reward}

    instrument_fastapi(app, excluded_urls=["^/healthz$"])
    return app


class GymServer:
    """Serves :func:`make_app` with uvicorn on 127.0.0.1 (a free port) in a thread.

    Example:
        >>> server = GymServer()  # doctest: +SKIP
        >>> server.start(); server.url  # doctest: +SKIP
        'http://127.0.0.1:41233'
    """

    def __init__(self) -> None:
        self.url = ""
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def start(self, timeout_s: float = 20.0) -> str:
        """Start serving; returns the base URL once the server accepts connections."""
        import uvicorn

        # proto=IPPROTO_TCP: asyncio then sets TCP_NODELAY on accepted connections;
        # without it, small keep-alive responses can stall ~40 ms (Nagle + delayed ACK).
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        config = uvicorn.Config(make_app(), log_level="warning", access_log=False, lifespan="off")
        self._server = uvicorn.Server(config)
        started = threading.Event()

        def run() -> None:
            async def main() -> None:
                task = asyncio.create_task(self._server.serve(sockets=[sock]))
                while not self._server.started and not task.done():
                    await asyncio.sleep(0.01)
                started.set()
                await task

            asyncio.run(main())

        # A raw thread on purpose: the server is a separate service, not part
        # of the driver's context; its spans join the trace through HTTP.
        self._thread = threading.Thread(target=run, name="gym-server", daemon=True)
        self._thread.start()
        if not started.wait(timeout_s):
            raise RuntimeError("the demo Gym server did not start")
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    def stop(self) -> None:
        """Stop serving and wait for the thread."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
