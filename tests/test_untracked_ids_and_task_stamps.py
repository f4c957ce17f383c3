"""Session ids made with the tracer off carry the process's random nonce, and a text task
id is stamped on spans redacted, as the session record writes it."""

from __future__ import annotations

import re
import subprocess
import sys

import asynctrace as at
from asynctrace.testing import capture_spans

_ID = "import asynctrace as at\nwith at.session_scope() as s:\n    print(s)\n"


def test_untracked_session_ids_differ_between_processes_of_the_same_pid_namespace() -> None:
    """``u<pid>-<n>`` alone collided across containers whose programs all run as pid 1:
    the prefix now holds 16 random hex digits after the pid."""
    ids = [
        subprocess.run(
            [sys.executable, "-c", _ID], check=True, capture_output=True, text=True
        ).stdout.strip()
        for _ in range(2)
    ]
    for session_id in ids:
        assert re.fullmatch(r"u[0-9a-f]+[0-9a-f]{16}-1", session_id), session_id
    nonces = [session_id.rsplit("-", 1)[0][-16:] for session_id in ids]
    assert nonces[0] != nonces[1]


def test_a_text_task_id_is_stamped_on_spans_redacted() -> None:
    """``rl.task_id`` on a span never carries what the session record leaves out."""
    with capture_spans("all") as spans:
        with at.task_scope("https://bob:hunter2@host/items/7?token=abc123"):
            with at.managed_span("generation", "g"):
                pass
        with at.task_scope(7), at.managed_span("generation", "n"):
            pass
    stamped = {span.name: span.attributes["rl.task_id"] for span in spans}
    assert stamped["n"] == 7
    assert "hunter2" not in stamped["g"]
    assert "abc123" not in stamped["g"]
    assert stamped["g"].startswith("https://host/items/7")
