"""A name that ends in a newline is refused: ``$`` matches before a final ``\\n``.

A ``role`` of ``"driver\\n"`` once made ``traces-driver\\n-r0.jsonl``, and a span group
``"reward\\n"`` was registered under that name. (A ``run_id`` is stripped when read.)
"""

from __future__ import annotations

from pathlib import Path

import pytest

import asynctrace as at


def test_a_role_ending_in_a_newline_is_refused(tmp_path: Path) -> None:
    """No file is made with a newline in its name."""
    with pytest.raises(at.ConfigurationError, match=r"^role: "):
        at.configure({"enabled": True, "output_dir": str(tmp_path)}, role="driver\n")
    assert at.current_telemetry() is None
    assert not [p for p in tmp_path.rglob("*") if "\n" in p.name]


def test_a_span_group_name_ending_in_a_newline_is_refused() -> None:
    """Registered names are what a spec can name: no trailing newline."""
    with pytest.raises(at.ConfigurationError):
        at.register_span_groups("newline-test", [at.SpanGroup("reward2\n", at.Bucket.PRODUCTIVE)])
    assert "reward2\n" not in at.registered_span_groups()
