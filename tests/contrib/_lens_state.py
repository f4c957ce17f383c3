"""The nemo-lens port's process state, put back for a test, patched where it is owned.

``asynctrace_contrib.nemo_lens`` is a package: what ``setup_telemetry`` remembers lives in
its ``_setup`` module, the warnings told once in ``_config``, the unknown-``rl.bucket``
note in ``_spans``. Patching a name on the package would change nothing they read.
"""

from __future__ import annotations

import pytest
from asynctrace_contrib.nemo_lens import _config, _setup, _spans


def forget_setup(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if this process never called ``setup_telemetry`` (nor configured through
    ``set_enabled_span_groups``); restored after the test."""
    monkeypatch.setattr(_setup, "_initialized", False)
    monkeypatch.setattr(_setup, "_started", None)


def forget_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if no warning had been told once yet; restored after the test."""
    monkeypatch.setattr(_config, "_warned", set())


def forget_unknown_bucket_told(monkeypatch: pytest.MonkeyPatch) -> None:
    """As if no unknown ``rl.bucket`` had been told about yet; restored after the test."""
    monkeypatch.setattr(_spans, "_unknown_bucket_told", [])
