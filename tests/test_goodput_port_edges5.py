"""The Prometheus endpoint configured again on the running endpoint's port under another
address: the same address takes the endpoint over, an address that shares the port with it
(a wildcard on either side) is refused, and another specific address is tried, all before
anything changes. Real sockets on 127.0.0.1 and 127.0.0.2 (Linux routes all of 127/8 to lo)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

import asynctrace as at
from asynctrace import ConfigurationError

pytest.importorskip("opentelemetry.exporter.prometheus")
pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="127.0.0.2 is an address of lo on Linux only"
)

BASE: dict[str, Any] = {"enabled": True, "span_groups": "all", "exporters": ["memory"]}


def _configure(host: str, port: int) -> at.Telemetry:
    goodput = {"file": False, "grace_s": 0, "metrics": "prometheus"}
    return at.configure(
        {**BASE, "goodput": {**goodput, "prometheus_host": host, "prometheus_port": port}}
    )


async def _steps(count: int) -> None:
    for i in range(1, count + 1):
        with at.iteration_scope(i), at.umbrella_span("step", "rl.step"):
            with at.managed_span("policy_update", "rl.policy_update"):
                await asyncio.sleep(0.001)


def _scrape(host: str, port: int) -> str:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as reply:
        text: str = reply.read().decode()
        return text


def _port_free_on_both() -> int:
    """A port nothing listens on, on 127.0.0.1 nor on 127.0.0.2."""
    for _ in range(50):
        with socket.socket() as first:
            first.bind(("127.0.0.1", 0))
            port: int = first.getsockname()[1]
            with socket.socket() as second:
                try:
                    second.bind(("127.0.0.2", port))
                except OSError:
                    continue
            return port
    raise AssertionError("no port free on both 127.0.0.1 and 127.0.0.2")


@contextlib.contextmanager
def _another_program(host: str, port: int) -> Iterator[None]:
    """A socket listening on *host*:*port*, as another program's would."""
    with socket.socket() as other:
        other.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        other.bind((host, port))
        other.listen()
        yield


def _still_serving(running: at.Telemetry, host: str, port: int) -> None:
    """The running telemetry was left as it was: its endpoint serves what it records."""
    asyncio.run(_steps(2))
    assert running.flush()
    assert "rl_goodput" in _scrape(host, port)


@pytest.mark.parametrize(
    ("first", "then", "other"),
    [
        ("127.0.0.1", "0.0.0.0", "127.0.0.2"),
        ("0.0.0.0", "127.0.0.1", None),
        ("0.0.0.0", "localhost", None),
    ],
)
def test_an_address_sharing_the_running_port_is_refused_before_anything_changes(
    first: str, then: str, other: str | None
) -> None:
    """A wildcard on either side: the running endpoint's own socket holds the port for the
    new address too, so no trial bind tells whether it is free (with *other*, another
    program holds it on 127.0.0.2 as well): configure() fails, the running one serves on."""
    port = _port_free_on_both()
    telemetry = _configure(first, port)
    try:
        with contextlib.ExitStack() as stack:
            if other is not None:
                stack.enter_context(_another_program(other, port))
            with pytest.raises(ConfigurationError) as raised:
                _configure(then, port)
        message = str(raised.value)
        assert message.startswith(f"goodput.prometheus_host: {then!r}"), message
        assert f"already serves goodput metrics on {first}:{port}" in message, message
        assert f"accepted: that host ({first}) to take the endpoint over" in message, message
        assert "another port" in message, message
        _still_serving(telemetry, "127.0.0.1", port)
    finally:
        telemetry.shutdown()


def test_another_address_whose_port_is_taken_is_refused_before_anything_changes() -> None:
    """127.0.0.2 does not share the port with 127.0.0.1: it is tried, and found taken."""
    port = _port_free_on_both()
    telemetry = _configure("127.0.0.1", port)
    try:
        with _another_program("127.0.0.2", port):
            with pytest.raises(ConfigurationError) as raised:
                _configure("127.0.0.2", port)
        message = str(raised.value)
        assert message.startswith(f"goodput.prometheus_port: cannot listen on 127.0.0.2:{port}")
        _still_serving(telemetry, "127.0.0.1", port)
    finally:
        telemetry.shutdown()


@pytest.mark.parametrize(
    "host",
    [
        pytest.param("127.0.0.2", id="another-address-whose-port-is-free"),
        pytest.param("localhost", id="the-same-address-spelled-otherwise"),
    ],
)
def test_configuring_again_on_the_running_port_takes_the_endpoint(host: str) -> None:
    """127.0.0.2 free on the running endpoint's port: the new endpoint listens there and the
    running one stops; localhost is 127.0.0.1: the new endpoint takes the running one over."""
    port = _port_free_on_both()
    running = _configure("127.0.0.1", port)
    try:
        telemetry = _configure(host, port)
    except BaseException:
        running.shutdown()
        raise
    try:
        asyncio.run(_steps(2))
        assert telemetry.flush()
        assert "rl_goodput" in _scrape(host, port)
        if host == "127.0.0.2":
            with pytest.raises(OSError):  # the running endpoint was stopped
                _scrape("127.0.0.1", port)
    finally:
        telemetry.shutdown()
