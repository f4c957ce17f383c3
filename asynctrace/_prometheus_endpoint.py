"""The Prometheus endpoint of goodput metrics: its port, its address, its meter provider.

This module keeps the registry of the endpoints this process serves (closed
in a forked child); the HTTP server is :mod:`asynctrace._prometheus_server`'s.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
from collections.abc import Callable
from typing import Any

from ._errors import ConfigurationError, MissingExtraError
from ._goodput_settings import GoodputSettings
from ._prometheus_server import start_server

__all__ = [
    "endpoint",
    "listen_error",
    "prometheus_meter_provider",
    "prometheus_port",
    "serving",
]


def prometheus_port(settings: GoodputSettings, local_rank: int | None) -> int:
    """The port the Prometheus endpoint listens on: ``prometheus_port + LOCAL_RANK``.

    Raises:
        ConfigurationError: the sum is past 65535.

    Example:
        >>> prometheus_port(GoodputSettings(prometheus_port=9464), 2)
        9466
    """
    if not settings.prometheus_port:
        return 0
    rank = local_rank or 0
    port = settings.prometheus_port + rank
    if port > 65535:
        var = _local_rank_var(rank)
        ports = (
            f"1 to {65535 - rank} with {var}={rank} (the port is prometheus_port + the local "
            "rank, at most 65535), or 0 for any free port"
            if rank < 65535
            else f"only 0 (any free port) with {var}={rank}: prometheus_port + the local rank "
            "is past 65535 for every other port"
        )
        raise ConfigurationError(
            f"goodput.prometheus_port: {settings.prometheus_port} + {var} {rank} = {port} "
            f"is not a port; accepted: {ports}"
        )
    return port


def _local_rank_var(rank: int) -> str:
    """The variable the local rank *rank* was read from (for an error message)."""
    from ._rank_env import env_local_rank_var

    try:
        found = env_local_rank_var(os.environ)
    except ConfigurationError:  # pragma: no cover - read without error at configure()
        found = None
    return found[0] if found is not None and found[1] == rank else "the local rank"


def serving(address: str, port: int) -> tuple[bool, str | None]:
    """How *address*:*port* meets this process's own goodput endpoint on *port*.

    Returns ``(same, overlapped)``: *same* when the endpoint listens on that
    very address (``localhost`` resolved to ``127.0.0.1`` is ``127.0.0.1``):
    ``configure()`` stops it before the new one starts, so the port is free
    by then. *overlapped* is the address of an endpoint on *port* that
    *address* is not but may share the port with (either one a wildcard
    such as ``0.0.0.0``, or an address that cannot be compared): this
    process's own socket answers for it, so no trial bind can tell whether
    the port is free. Two distinct specific addresses (``127.0.0.1`` and
    ``127.0.0.2``) are neither: each takes the port on its own.

    Example:
        >>> serving("127.0.0.1", 9464)  # nothing served by this process
        (False, None)
    """
    same, overlapped = False, None
    for (_, on), server in list(_serving.items()):
        if on != port:
            continue
        running = str(server.server_address[0])
        found = _ip(address), _ip(running)
        if found[0] is None or found[1] is None:
            if address == running:
                same = True
            else:
                overlapped = running
        elif found[0] == found[1]:
            same = True
        elif found[0].is_unspecified or found[1].is_unspecified:
            overlapped = running
    return same, overlapped


def _ip(address: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """*address* as an IP address (an IPv4-mapped IPv6 one as its IPv4), or ``None``."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    return ip


def endpoint(address: str, port: int) -> str:
    """``address:port``, an IPv6 address in brackets.

    Example:
        >>> endpoint("::1", 9464)
        '[::1]:9464'
    """
    return f"[{address}]:{port}" if ":" in address else f"{address}:{port}"


def listen_error(host: str, port: int, exc: OSError, rank_words: str) -> ConfigurationError:
    """The configuration error of an endpoint that cannot listen on *host*:*port*.

    A host that does not resolve, or is no address of this machine, is
    ``goodput.prometheus_host``'s error; a port in use or refused is
    ``goodput.prometheus_port``'s.
    """
    if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
        return ConfigurationError(
            f"goodput.prometheus_host: {host!r} cannot be listened on ({exc}); accepted: a "
            "host name or address of this machine, such as localhost, 127.0.0.1, or 0.0.0.0 "
            "for every interface"
        )
    return ConfigurationError(
        f"goodput.prometheus_port: cannot listen on {host}:{port} ({exc}); accepted: a free "
        f"port (the port is prometheus_port + {rank_words}), or 0 for any free port"
    )


def _close_in_child() -> None:
    """A forked child: close the inherited listening sockets (the parent serves them)."""
    for server in list(_serving.values()):
        try:
            server.socket.close()
        except Exception:
            pass
    _serving.clear()


# (host, port) as configured -> the server of this process's Prometheus endpoint there
_serving: dict[tuple[str, int], Any] = {}
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_in_child)


def prometheus_meter_provider(
    settings: GoodputSettings, resource: Any, local_rank: int | None
) -> tuple[Any, Callable[[float], None], tuple[str, int]]:
    """The endpoint's ``MeterProvider``, its shutdown and the address it listens on.

    Raises:
        MissingExtraError: the ``prometheus`` extra is missing.
        ConfigurationError: the host or port cannot be listened on.
    """
    try:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import CollectorRegistry
    except ImportError as exc:
        raise MissingExtraError("prometheus", "opentelemetry.exporter.prometheus") from exc
    from opentelemetry.sdk.metrics import MeterProvider

    registry = CollectorRegistry()  # the process-wide default is left alone
    reader = PrometheusMetricReader(registry=registry)
    port = prometheus_port(settings, local_rank)
    host = settings.prometheus_host
    try:
        server, thread = start_server(host, port, registry)
    except OSError as exc:
        raise listen_error(host, port, exc, "the local rank") from None
    provider = MeterProvider(resource=resource, metric_readers=[reader], shutdown_on_exit=False)
    where = (host, port)
    if port:
        _serving[where] = server
    pid = os.getpid()

    def shutdown(timeout_s: float) -> None:
        try:
            provider.shutdown(timeout_millis=max(0.0, timeout_s) * 1000.0)
        finally:
            if _serving.get(where) is server:
                del _serving[where]
            if os.getpid() == pid:  # a forked child has no serving thread to stop
                server.shutdown()
                thread.join(max(0.0, timeout_s))
                server.close_connections()
            server.server_close()

    bound_host, bound = server.server_address[:2]
    return provider, shutdown, (str(bound_host), int(bound))
