"""A second process appending to an output file: what two processes of one rank do."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

OTHER_PROCESS = textwrap.dedent(
    """
    import logging, sys
    from pathlib import Path
    logging.basicConfig(level=logging.WARNING, format="LOG %(message)s")
    from asynctrace._files import AppendFile
    out = AppendFile(Path(sys.argv[1]))
    out.write(b'{"who":"other"}\\n', 1)
    out.close()
    """
)
"""A script (``python -c OTHER_PROCESS PATH``) that appends one line to PATH and logs."""


def append_from_another_process(path: Path) -> subprocess.CompletedProcess[str]:
    """Run :data:`OTHER_PROCESS` on *path* in a child; its output and status."""
    return subprocess.run(
        [sys.executable, "-c", OTHER_PROCESS, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
