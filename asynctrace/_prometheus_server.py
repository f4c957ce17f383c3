"""The Prometheus endpoint's HTTP server: ``/metrics`` on a thread, idle connections closed."""

from __future__ import annotations

import socket
import threading
from typing import Any, Final

from ._own_threads import leaving_signals

__all__ = ["SCRAPE_IDLE_S", "start_server"]

SCRAPE_IDLE_S: Final = 5.0  # a scrape connection idle this long is closed (it holds a thread)


def start_server(host: str, port: int, registry: Any) -> tuple[Any, threading.Thread]:
    """The Prometheus endpoint's server, serving on a daemon thread.

    As ``prometheus_client.start_http_server`` makes it (a thread per
    connection, the registry's ``/metrics``), except that a connection
    idle for :data:`SCRAPE_IDLE_S` is closed, and the connections still
    open when the endpoint shuts down are closed with it: each holds a
    thread, which an idle client would keep for as long as it liked.

    Raises:
        OSError: the host does not resolve, or *host*:*port* cannot be listened on.
    """
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from prometheus_client import make_wsgi_app
    from prometheus_client.exposition import ThreadingWSGIServer

    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, address = infos[0][0], str(infos[0][4][0])

    class Server(ThreadingWSGIServer):
        address_family = family

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._open: set[Any] = set()
            self._open_lock = threading.Lock()
            super().__init__(*args, **kwargs)

        def process_request(self, request: Any, client_address: Any) -> None:
            with self._open_lock:
                self._open.add(request)
            super().process_request(request, client_address)

        def shutdown_request(self, request: Any) -> None:
            with self._open_lock:
                self._open.discard(request)
            super().shutdown_request(request)

        def close_connections(self) -> None:
            """End every open connection: its thread reads the end and returns."""
            with self._open_lock:
                connections = list(self._open)
            for connection in connections:
                try:
                    connection.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    class Handler(WSGIRequestHandler):
        timeout = SCRAPE_IDLE_S  # each read and write of the connection

        def handle(self) -> None:
            try:
                super().handle()
            except OSError:  # idle past the timeout, reset, or closed at shutdown
                pass

        def log_message(self, format: str, *args: Any) -> None:
            """Log nothing (as prometheus_client's handler)."""

    server = make_server(address, port, make_wsgi_app(registry), Server, handler_class=Handler)
    thread = threading.Thread(
        target=leaving_signals(server.serve_forever),
        name="asynctrace-goodput-prometheus",
        daemon=True,
    )
    thread.start()
    return server, thread
