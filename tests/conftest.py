"""Shared fixtures: async backends, strict mode, clean telemetry state."""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from asynctrace import _errors, _secret_words
from asynctrace._session_tracer import SessionTracer, install
from asynctrace._state import restore, snapshot
from asynctrace.testing import CapturedSpans, capture_spans

# Hot-path failures re-raise in our own tests, so nothing is hidden from us.
_errors.set_strict(True)

BACKENDS: list[Any] = [
    pytest.param(("asyncio", {}), id="asyncio"),
    pytest.param(("asyncio", {"use_uvloop": True}), id="uvloop"),
    pytest.param(("trio", {}), id="trio"),
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests marked ``slow`` run first, the rest in their usual order.

    Under pytest-xdist a long test that starts last holds the run open on
    one worker while the others sit idle; started first, it runs while the
    other workers work through the short ones. ``nox -s tests`` runs them
    with ``--dist worksteal``: the worker that starts on the slow tests has the
    rest of its share taken over by the others.
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture(params=BACKENDS)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    """Every async test runs on asyncio, uvloop and trio."""
    return request.param


@pytest.fixture(autouse=True)
def _isolated_state() -> Iterator[None]:
    """Each test starts and ends with the telemetry state it found."""
    before = snapshot()
    _errors.reset_reported()
    yield
    restore(before)


@pytest.fixture(autouse=True)
def _logging_kept() -> Iterator[None]:
    """Each test ends with the logging machinery, and the secret words, it started with.

    AReaL's ``getLogger`` (run when its tracer is loaded and used) replaces
    logging's root logger and manager with new ones: loggers made before
    (asynctrace's) then reach a root nothing watches, and ``caplog`` of any
    later test in the process sees none of their records.
    """
    words, pattern = set(_secret_words._EXTRA_WORDS), _secret_words._SECRET_NAME
    named = set(_secret_words._NAMED)
    registered = _secret_words._REGISTERED
    registered_name = _secret_words._REGISTERED_NAME
    yield
    # Secret words an integration registered (its secret_keys) are the process's; a
    # test's must not redact what later tests in the same worker record.
    _secret_words._EXTRA_WORDS.clear()
    _secret_words._EXTRA_WORDS.update(words)
    _secret_words._NAMED.clear()
    _secret_words._NAMED.update(named)
    _secret_words._SECRET_NAME = pattern
    _secret_words._REGISTERED = registered
    _secret_words._REGISTERED_NAME = registered_name
    root, manager = _LOGGING
    if logging.Logger.manager is not manager or logging.Logger.root is not root:
        logging.root = logging.Logger.root = root
        logging.Logger.manager = manager


# As the process started (a module-scoped fixture may load AReaL before a test's own).
_LOGGING = (logging.Logger.root, logging.Logger.manager)


@pytest.fixture
def spans() -> Iterator[CapturedSpans]:
    """All groups on, captured in memory."""
    with capture_spans("all") as captured:
        yield captured


@pytest.fixture
def tracer(tmp_path: Path) -> Iterator[SessionTracer]:
    """A running session tracer writing to tmp_path/sessions-r0.jsonl."""
    tracer = SessionTracer(tmp_path / "sessions-r0.jsonl", run_id="t", flush_threshold=50)
    previous = install(tracer)
    yield tracer
    install(previous)
    tracer.shutdown(5.0)


@pytest.fixture
def lenient() -> Iterator[None]:
    """Hot-path failures logged, not raised (the production setting)."""
    previous = _errors.set_strict(False)
    try:
        yield
    finally:
        _errors.set_strict(previous)


@pytest.fixture
def switching() -> Iterator[None]:
    """Threads switch as often as the interpreter allows (races show within a few rounds)."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)
