"""A Python script run in a child process that cannot hang the suite."""

from __future__ import annotations

import subprocess
import sys


def run_script(script: str, hang_s: float) -> list[str]:
    """Run *script* with ``python -c`` after a ``faulthandler`` line that dumps its stacks
    and exits after *hang_s*: a hang fails the test, never the suite. Its words on stdout."""
    prologue = f"import faulthandler\nfaulthandler.dump_traceback_later({hang_s}, exit=True)\n"
    result = subprocess.run(
        [sys.executable, "-c", prologue + script],
        capture_output=True,
        text=True,
        timeout=hang_s + 30,
        check=False,
    )
    assert result.returncode == 0, f"the child hung or failed:\n{result.stderr[-4000:]}"
    return result.stdout.split()
